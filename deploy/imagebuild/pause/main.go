// Command pause is the pod sandbox's process, the kubelet's "pause" image built here: it holds
// the pod's namespaces, does nothing until SIGTERM or SIGINT (then exits 0), and, as PID 1 of a
// pod that shares its process namespace, reaps the children the kernel re-parents to it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (profsym)")
		return
	}
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	// Until Notify has run, a SIGTERM takes the Go runtime's default path, which for PID 1
	// (the kernel ignores the re-raised signal) ends in exit status 2: one line on stderr says
	// the window is closed, for whoever must know that a SIGTERM now stops the sandbox cleanly.
	fmt.Fprintln(os.Stderr, "pause: waiting for SIGTERM")
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Several children may have exited behind one SIGCHLD: reap until none is left.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
