//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package elfx

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapRange maps n bytes of file from offset off (a multiple of the page size) read-only.
func mapRange(file *os.File, off int64, n int) ([]byte, error) {
	sc, err := file.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", file.Name(), err)
	}
	var b []byte
	var merr error
	if err := sc.Control(func(fd uintptr) {
		b, merr = unix.Mmap(int(fd), off, n, unix.PROT_READ, unix.MAP_PRIVATE)
	}); err != nil {
		return nil, fmt.Errorf("map %s: %w", file.Name(), err)
	}
	if merr != nil {
		return nil, fmt.Errorf("map %d bytes of %s at %#x: %w", n, file.Name(), off, merr)
	}
	return b, nil
}

func unmap(b []byte) error { return unix.Munmap(b) }
