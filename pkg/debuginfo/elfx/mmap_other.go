//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package elfx

import (
	"errors"
	"os"
)

func mapRange(*os.File, int64, int) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmap([]byte) error { return nil }
