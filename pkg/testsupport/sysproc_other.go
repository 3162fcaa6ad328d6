//go:build unix && !linux

package testsupport

import (
	"syscall"
)

// childSysProcAttr puts the server in its own process group; only Linux can
// also tie the server's life to the test binary.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup signals the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) error {
	return syscall.Kill(-pid, sig)
}

// ownsListener cannot map sockets to processes without /proc; the port race
// is then detected only when the losing server exits.
func ownsListener(pid, port int) (bool, error) {
	return true, nil
}
