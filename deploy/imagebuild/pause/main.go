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
