// Package rlimit replaces, at build time, the OpenTelemetry eBPF profiler's package of the same
// name (go.opentelemetry.io/ebpf-profiler/rlimit) through `go build -overlay`: the offline image
// builder maps the module's rlimit/rlimit.go to this file. The profiler raises RLIMIT_MEMLOCK to
// infinity before it creates BPF maps and stops when it may not (no CAP_SYS_RESOURCE: a
// container runtime whose bounding set leaves it out). Since Linux 5.11 BPF memory is charged to
// the memory cgroup instead and the limit does not matter: there, this one goes on.
package rlimit

import (
	"fmt"
	"log/slog"

	ciliumrlimit "github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// MaximizeMemlock raises RLIMIT_MEMLOCK to RLIM_INFINITY and returns a function that restores
// the previous limit. When the limit cannot be raised but the kernel charges BPF memory to the
// memory cgroup (github.com/cilium/ebpf/rlimit probes it), it leaves the limit as it is and
// returns a function that does nothing; otherwise it returns the error.
func MaximizeMemlock() (func(), error) {
	var old unix.Rlimit
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &inf, &old)
	if err == nil {
		return func() {
			if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &old); err != nil {
				slog.Error("restoring RLIMIT_MEMLOCK", "err", err)
			}
		}, nil
	}
	// RemoveMemlock is a no-op where the memory cgroup accounts BPF memory, and tries the same
	// raise (and fails the same way) where it does not.
	if cerr := ciliumrlimit.RemoveMemlock(); cerr != nil {
		return nil, fmt.Errorf("failed to set temporary rlimit: %w (and BPF memory is not charged to the memory cgroup: %w)", err, cerr)
	}
	return func() {}, nil
}
