package testsupport

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// childSysProcAttr puts the server in its own process group, so that a
// Ctrl-C in the terminal reaches only `go test`, whose cleanups then stop the
// server, and asks the kernel to kill the server when the test binary dies
// without running its cleanups.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup signals the process group led by pid, reaching any helper the
// server forked as well.
func signalGroup(pid int, sig syscall.Signal) error {
	return syscall.Kill(-pid, sig)
}

// ownsListener reports whether process pid holds a TCP socket listening on
// port. Readiness checks alone cannot tell our server from another test's
// server that won the race for the same port: both answer PING or /health.
func ownsListener(pid, port int) (bool, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(table)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6 on this kernel
		}
		if err != nil {
			return false, fmt.Errorf("read %s: %w", table, err)
		}
		if err := listeningInodes(data, port, inodes); err != nil {
			return false, fmt.Errorf("parse %s: %w", table, err)
		}
	}
	if len(inodes) == 0 {
		return false, nil
	}
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		return false, fmt.Errorf("list %s: %w", fdDir, err)
	}
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil {
			continue // the descriptor was closed meanwhile
		}
		inode, ok := strings.CutPrefix(link, "socket:[")
		if ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true, nil
		}
	}
	return false, nil
}

// listeningInodes adds to inodes the socket inodes of the /proc/net/tcp
// rows in LISTEN state on port.
func listeningInodes(table []byte, port int, inodes map[string]bool) error {
	const stateListen = "0A"
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	first := true
	for sc.Scan() {
		if first { // column headers
			first = false
			continue
		}
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			return fmt.Errorf("row %q has %d fields, want at least 10", sc.Text(), len(f))
		}
		_, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			return fmt.Errorf("local address %q has no port", f[1])
		}
		p, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			return fmt.Errorf("local port %q: %w", portHex, err)
		}
		if int(p) == port && f[3] == stateListen {
			inodes[f[9]] = true
		}
	}
	return sc.Err()
}
