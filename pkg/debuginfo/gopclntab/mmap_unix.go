//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gopclntab

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the first size bytes of file read-only.
func mapFile(file *os.File, size int64) ([]byte, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("map %s: size %d", file.Name(), size)
	}
	b, err := unix.Mmap(int(file.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", file.Name(), err)
	}
	return b, nil
}

func unmapFile(b []byte) error { return unix.Munmap(b) }
