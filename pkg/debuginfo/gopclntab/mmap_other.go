//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gopclntab

import (
	"errors"
	"os"
)

func mapFile(*os.File, int64) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmapFile([]byte) error { return nil }
