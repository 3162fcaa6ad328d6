//go:build !linux

package cfi

import "time"

// processCPUTime is not measured here; benchmarks then report no CPU time.
func processCPUTime() time.Duration { return 0 }
