//go:build linux

package cluster_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// profilerState says what the OpenTelemetry eBPF profiler's maps hold of process pid, read
// from the node's kernel: whether the profiler has the process at all (the per-process marker
// its eBPF program checks before it unwinds: without it, a sample of the process is dropped
// and the PID reported to user space, rate-limited), whether it has the mapping of the
// process's first executable file mapping, and the rate limiter's state of its reports.
// A workload with CPU time and no samples is told apart by it: a process the profiler never
// synchronised, from one it has and whose traces are lost later.
func profilerState(pid string) string {
	n, err := strconv.ParseUint(pid, 10, 32)
	if err != nil {
		return fmt.Sprintf("the profiler's maps: pid %q: %v", pid, err)
	}
	maps, err := profilerMaps("pid_page_to_map", "reported_pids", "pid_events")
	if err != nil {
		return fmt.Sprintf("the profiler's maps: %v", err)
	}
	defer func() {
		for _, m := range maps {
			_ = m.Close() // a descriptor of a map only read
		}
	}()
	var parts []string
	if m := maps["pid_page_to_map"]; m != nil {
		known := pidPageHas(m, uint32(n), 0)
		parts = append(parts, fmt.Sprintf("process known (its marker in pid_page_to_mapping_info): %v", known))
		executable := func(perms, path string) bool { return strings.Contains(perms, "x") && strings.HasPrefix(path, "/") }
		if addr, file, err := findMapping(pid, executable); err != nil {
			parts = append(parts, err.Error())
		} else {
			parts = append(parts, fmt.Sprintf("its mapping of %s at %#x: %v", file, addr, pidPageHas(m, uint32(n), addr)))
		}
	} else {
		parts = append(parts, "no map pid_page_to_mapping_info on the node")
	}
	if m := maps["reported_pids"]; m != nil {
		var token uint64
		if err := m.Lookup(uint32(n), &token); err != nil {
			parts = append(parts, "not in reported_pids")
		} else {
			// The token: the report's time (bpf_ktime_get_ns, its low 6 bits cleared), flags
			// in bits 4 and 5, and the rate limiter's attempt in bits 0-3 (a window of
			// 100 ms << attempt).
			var now unix.Timespec
			_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &now)
			age := time.Duration(uint64(now.Nano()) - token&^0x3f)
			parts = append(parts, fmt.Sprintf("reported_pids: last report %v ago, attempt %d", age.Round(time.Millisecond), token&0xf))
		}
	}
	if m := maps["pid_events"]; m != nil {
		var pending bool
		err := m.Lookup(n<<32|n, &pending)
		parts = append(parts, fmt.Sprintf("an event of it pending in pid_events: %v", err == nil))
	}
	return "the profiler's maps: " + strings.Join(parts, "; ")
}

// profilerMaps opens the node's BPF maps of these names (the kernel keeps 15 bytes of a
// map's name). Of two maps of one name, the later made (the higher ID) is kept.
func profilerMaps(names ...string) (map[string]*ebpf.Map, error) {
	out := map[string]*ebpf.Map{}
	var id ebpf.MapID
	for {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("listing BPF maps: %w", err)
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue // gone since listed
		}
		info, err := m.Info()
		if err != nil || !slices.Contains(names, info.Name) {
			_ = m.Close() // a descriptor of a map only read
			continue
		}
		if old := out[info.Name]; old != nil {
			_ = old.Close()
		}
		out[info.Name] = m
	}
}

// pidPageHas looks up page addr of process pid in pid_page_to_mapping_info, an LPM trie keyed
// by {prefix length, PID big-endian, page big-endian}: address 0 finds the per-process
// marker alone (a prefix of the whole 96 bits), another address the mapping that covers it.
func pidPageHas(m *ebpf.Map, pid uint32, addr uint64) bool {
	key := make([]byte, 16)
	binary.NativeEndian.PutUint32(key[0:], 32+64)
	binary.BigEndian.PutUint32(key[4:], pid)
	binary.BigEndian.PutUint64(key[8:], addr)
	value := make([]byte, m.ValueSize())
	return m.Lookup(key, value) == nil
}
