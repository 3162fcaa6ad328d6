package procstat

import (
	"os"
	"testing"
	"time"
)

func TestMemory(t *testing.T) {
	self := os.Getpid()
	rss, hwm := Memory(self, "VmRSS"), Memory(self, "VmHWM")
	if rss <= 0 || hwm < rss {
		t.Fatalf("VmRSS %d, VmHWM %d: want a positive RSS and a peak at least as large", rss, hwm)
	}
	for _, tc := range []struct {
		name  string
		pid   int
		field string
	}{
		{"no such field", self, "VmNothing"},
		{"no such process", 1 << 30, "VmRSS"},
		{"a prefix of a field is not the field", self, "Vm"},
	} {
		if got := Memory(tc.pid, tc.field); got != 0 {
			t.Errorf("%s: %d, want 0", tc.name, got)
		}
	}
}

func TestCPUTime(t *testing.T) {
	self := os.Getpid()
	before, err := CPUTime(self)
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the kernel's tick accounts some CPU time to the process.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		x := 0
		for i := range 10_000_000 {
			x += i
		}
		_ = x
		if after, err := CPUTime(self); err == nil && after > before {
			return
		}
	}
	t.Fatal("CPU time did not grow while the test spun for 10 s")
}

func TestCPUTimeOfNoProcess(t *testing.T) {
	if _, err := CPUTime(1 << 30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
