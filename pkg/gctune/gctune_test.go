package gctune

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		base           int
		live, headroom uint64
		want           int
	}{
		{100, 10 << 20, 256 << 20, 2560}, // small live heap: raised
		{100, 0, 256 << 20, 6400},        // not measured yet: the runtime's 4 MB minimum
		{100, 1 << 30, 256 << 20, 100},   // large live heap: GOGC already gives more
		{100, 256 << 20, 256 << 20, 100}, // exactly enough
		{200, 100 << 20, 256 << 20, 256}, // rounded up
		{300, 100 << 20, 256 << 20, 300}, // a higher configured GOGC wins
		{100, 1, 1 << 40, maxPercent},    // bounded
		{100, 10 << 20, 0, 100},          // no headroom asked
	} {
		if got := Percent(c.base, c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.base, c.live, c.headroom, got, c.want)
		}
	}
}

// garbageCollections allocates 256 MB in 64 KB pieces while keeping little alive, and counts
// the collections that took.
func garbageCollections() uint32 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var keep [][]byte
	for i := range 4096 {
		b := make([]byte, 64<<10)
		b[i%len(b)] = 1
		if i%256 == 0 {
			keep = append(keep, b)
		}
	}
	runtime.KeepAlive(keep)
	runtime.ReadMemStats(&after)
	return after.NumGC - before.NumGC
}

func TestHeadroomSparesCollections(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	runtime.GC()
	untuned := garbageCollections()

	// A collection that ran while garbageCollections allocated counts what it allocated during
	// the mark as live (allocate-black): on a loaded machine that is most of the 256 MB, and
	// Start would read a large live heap. A collection now measures the small heap that is left.
	runtime.GC()
	cancel := Start(Options{MinHeadroom: 128 << 20})
	if p := debug.SetGCPercent(-1); p <= 100 {
		t.Fatalf("GOGC %d after Start with a small live heap; want it raised", p)
	} else {
		debug.SetGCPercent(p)
	}
	tuned := garbageCollections()
	cancel()
	t.Logf("%d collections with a 128 MB headroom, %d without", tuned, untuned)
	if untuned < 8 || tuned*4 > untuned {
		t.Fatalf("%d collections with the headroom, %d without: want at most a quarter", tuned, untuned)
	}
}

func TestGOGCOffIsLeftAlone(t *testing.T) {
	base := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(base)
	defer Start(Options{MinHeadroom: 128 << 20})()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Fatalf("GOGC=off became %d", p)
	}
}

// TestFollowsTheLiveHeap: once the live heap is large, the next collections bring GOGC back
// to the configured value, and a small heap raises it again; stop restores it for good.
func TestFollowsTheLiveHeap(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	stop := Start(Options{MinHeadroom: 64 << 20})
	gogc := func() int {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p
	}
	// Each runtime.GC runs the previous collection's finalizers at the latest by the next.
	settle := func(want func(int) bool) int {
		for range 20 {
			runtime.GC()
			if p := gogc(); want(p) {
				return p
			}
		}
		return gogc()
	}
	if p := settle(func(p int) bool { return p > 100 }); p <= 100 {
		t.Fatalf("small heap: GOGC %d, want above 100", p)
	}
	big := make([][]byte, 0, 128)
	for range 128 {
		big = append(big, make([]byte, 1<<20))
	}
	if p := settle(func(p int) bool { return p == 100 }); p != 100 {
		t.Fatalf("128 MB live, 64 MB headroom: GOGC %d, want the configured 100", p)
	}
	runtime.KeepAlive(big) // and nothing holds it after this
	if p := settle(func(p int) bool { return p > 100 }); p <= 100 {
		t.Fatalf("heap small again: GOGC %d, want above 100", p)
	}
	stop()
	if p := gogc(); p != 100 {
		t.Fatalf("after stop: GOGC %d, want the configured 100", p)
	}
	if p := settle(func(p int) bool { return p != 100 }); p != 100 {
		t.Fatalf("collections after stop set GOGC to %d", p)
	}
}

// env sets (value non-nil) or unsets the variable for the test.
func env(t *testing.T, name string, value *string) {
	t.Helper()
	t.Setenv(name, "") // restores the variable after the test
	if value == nil {
		if err := os.Unsetenv(name); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Setenv(name, *value)
}

func TestMemoryLimitSources(t *testing.T) {
	const mib = 1 << 20
	str := func(s string) *string { return &s }
	limited := func(l uint64) memlimit.Provider { return memlimit.Limit(l) }
	failing := func(err error) memlimit.Provider {
		return func() (uint64, error) { return 0, err }
	}
	for _, c := range []struct {
		name                string
		gomemlimit, automem *string
		container           memlimit.Provider
		fallback            int64
		want                int64 // -1: the limit is left as it was
		source              string
	}{
		{"GOMEMLIMIT wins over everything", str("300MiB"), nil, limited(1000 * mib), 500 * mib, -1, SourceEnv},
		{"AUTOMEMLIMIT=off sets nothing", nil, str("off"), limited(1000 * mib), 500 * mib, -1, SourceOff},
		{"a container's limit wins over the server's", nil, nil, limited(1000 * mib), 500 * mib, 900 * mib, SourceContainer},
		{"the container's ratio from AUTOMEMLIMIT", nil, str("0.5"), limited(1000 * mib), 500 * mib, 500 * mib, SourceContainer},
		{"no container limit: the server's", nil, nil, failing(memlimit.ErrNoLimit), 500 * mib, 500 * mib, SourceConfigured},
		{"no cgroup: the server's", nil, nil, failing(memlimit.ErrNoCgroup), 500 * mib, 500 * mib, SourceConfigured},
		{"an unreadable cgroup: the server's", nil, nil, failing(os.ErrPermission), 500 * mib, 500 * mib, SourceConfigured},
		{"neither: no limit", nil, nil, failing(memlimit.ErrNoLimit), 0, math.MaxInt64, SourceNone},
	} {
		t.Run(c.name, func(t *testing.T) {
			env(t, "GOMEMLIMIT", c.gomemlimit)
			env(t, "AUTOMEMLIMIT", c.automem)
			defer func(p memlimit.Provider) { containerLimit = p }(containerLimit)
			containerLimit = c.container
			const before = 12345 * mib
			defer debug.SetMemoryLimit(debug.SetMemoryLimit(before))
			limit, source := setMemoryLimit(c.fallback, slog.New(slog.DiscardHandler))
			want := c.want
			if want == -1 {
				want = before
			}
			if source != c.source || limit != want {
				t.Errorf("limit %d MiB from %q, want %d MiB from %q", limit/mib, source, want/mib, c.source)
			}
			if got := debug.SetMemoryLimit(-1); got != want {
				t.Errorf("the runtime's limit is %d MiB, want %d MiB", got/mib, want/mib)
			}
		})
	}
}

// TestStartLogsTheLimit: Start sets the server's limit outside a container and says so.
func TestStartLogsTheLimit(t *testing.T) {
	env(t, "GOMEMLIMIT", nil)
	env(t, "AUTOMEMLIMIT", nil)
	defer func(p memlimit.Provider) { containerLimit = p }(containerLimit)
	containerLimit = func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	var buf bytes.Buffer
	Start(Options{MemoryLimit: 1536 << 20, Logger: slog.New(slog.NewTextHandler(&buf, nil))})()
	if got := debug.SetMemoryLimit(-1); got != 1536<<20 {
		t.Errorf("memory limit %d, want 1536 MiB", got)
	}
	if !strings.Contains(buf.String(), `memory_limit="1536 MiB" memory_limit_from=configured`) {
		t.Errorf("log does not name the limit and its source:\n%s", buf.String())
	}
}
