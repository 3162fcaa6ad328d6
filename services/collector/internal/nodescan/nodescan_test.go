//go:build linux

package nodescan

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

// TestScanReachesEveryMappedFile: a walk hands the hook the executable and the libraries of a
// running process, with their IDs, and a second walk reads them again (new libraries appear)
// without computing the files' IDs twice.
func TestScanReachesEveryMappedFile(t *testing.T) {
	bin := testsupport.CompileC(t, "#include <unistd.h>\nint main(void) { for (;;) pause(); }\n", "-O2")
	cmd := exec.CommandContext(t.Context(), bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Start returns once the program is exec'ed, before the dynamic loader has mapped libc: on
	// a loaded machine a walk can come first.
	waitForMapping(t, cmd.Process.Pid, "libc.so.6")

	var mu sync.Mutex
	seen := map[string]string{}     // mapped path -> GNU build ID
	walked := map[string]struct{}{} // every mapped path the walk reached
	files := procmaps.NewFileCache(1024)
	roots := map[string]bool{}
	s := New("/proc", files, func(m procmaps.MappedFile) {
		mu.Lock()
		defer mu.Unlock()
		walked[m.Mapped] = struct{}{}
		roots[m.Root] = true
		if fi := m.Info; fi != nil && fi.Err == nil {
			seen[m.Mapped] = fi.IDs.GNU
		}
	}, prometheus.NewRegistry(), nil)

	if n := s.Scan(); n < 2 {
		t.Fatalf("scan read %d processes", n)
	}
	mu.Lock()
	id, ok := seen[bin]
	var libc bool
	for p := range seen {
		if filepath.Base(p) == "libc.so.6" {
			libc = true
		}
	}
	mu.Unlock()
	if !ok || id == "" || !libc {
		t.Fatalf("the test process's executable (seen %v, build ID %q) or libc (%v) was not reached", ok, id, libc)
	}
	// Each file comes with the root of a process that maps it, where its debug files are.
	self := filepath.Join("/proc", strconv.Itoa(os.Getpid()), "root")
	if !roots[self] {
		t.Errorf("no mapped file came with this process's root %s (roots: %d)", self, len(roots))
	}
	// A second walk reads no file of the first again. Processes the machine started in
	// between bring files of their own (a shared machine runs compilers): those may be read.
	_, computed := files.Stats()
	mu.Lock()
	first := maps.Clone(walked)
	clear(walked)
	mu.Unlock()
	s.Scan()
	_, again := files.Stats()
	mu.Lock()
	defer mu.Unlock()
	var fresh uint64
	for p := range walked {
		if _, ok := first[p]; !ok {
			fresh++
		}
	}
	if again-computed > fresh {
		t.Fatalf("second walk computed %d files, and only %d were not mapped in the first", again-computed, fresh)
	}
}

// waitForMapping waits until the process maps a file named base.
func waitForMapping(t *testing.T, pid int, base string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		if err != nil {
			t.Fatalf("read the test process's maps: %v", err)
		}
		if strings.Contains(string(maps), "/"+base+"\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test process did not map %s within 10 s", base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
