package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
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
