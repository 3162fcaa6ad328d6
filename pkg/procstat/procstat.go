// Package procstat reads what Linux's /proc says of a process's memory and CPU time, for the
// demo, the drills and the benchmarks that watch the servers they start.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Memory returns a memory field of /proc/PID/status in bytes ("VmRSS", the resident set size;
// "VmHWM", its peak), or 0 when it cannot be read (the process is gone).
func Memory(pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// userHZ is the unit of /proc/PID/stat's times: USER_HZ, 100 on every Linux architecture.
const userHZ = 100

// CPUTime returns the user and system CPU time a process has used (utime + stime of
// /proc/PID/stat): on a shared machine it says what work cost better than wall time does.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command may hold spaces and parentheses: the fields after it start past the last ')',
	// with the state (field 3 of proc(5)) first.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command, want at least 13", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}
