package cfi

import (
	"syscall"
	"time"
)

// processCPUTime returns the user and system time the process has used, so that a
// benchmark on a shared machine can report the work it did besides the wall time it took.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
