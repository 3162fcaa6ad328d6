// Package gctune sets the Go garbage collector up for a long-running server:
//
//   - a soft memory limit: the GOMEMLIMIT environment variable when set; else 90% of the
//     container's memory limit (cgroup memory.max or memory.limit_in_bytes, through
//     github.com/KimMachineGun/automemlimit); else, outside a container, the limit the server
//     derives from what it is configured to hold (Options.MemoryLimit); AUTOMEMLIMIT=off
//     leaves the runtime's default (no limit). It makes the collector work harder before the
//     heap outgrows what the server was sized for, whatever GOGC says: without it the heap
//     grows to twice its live size before a collection;
//   - a minimum headroom: GOGC is raised while the live heap is small, so that the heap may
//     grow by at least that many bytes before a collection.
//
// Why the headroom: with GOGC=100 the heap may only double before a collection. A symbolizer
// answering from Redis keeps 10 MB live and allocates 4 MB per 10,000-address batch, so it
// collected twice per batch: 793 collections in 400 batches, 30 ms of CPU per batch. With
// the heap allowed 256 MB of growth, 45 collections and 19 ms. Once the live heap is large
// (loaded indexes), the configured GOGC gives that much headroom by itself and is left as is.
package gctune

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// Options configures Start.
type Options struct {
	// MinHeadroom is how many bytes the heap may grow past the live heap before a collection,
	// at least; 0 leaves GOGC alone.
	MinHeadroom uint64
	// MemoryLimit is the soft memory limit to set when neither GOMEMLIMIT nor a container's
	// memory limit gives one; 0 sets none.
	MemoryLimit int64
	Logger      *slog.Logger
}

// Where the soft memory limit came from, as Start logs it.
const (
	SourceEnv        = "GOMEMLIMIT"       // the environment variable, read by the runtime
	SourceOff        = "AUTOMEMLIMIT=off" // automatic limits turned off: the runtime's default
	SourceContainer  = "container"        // 90% of the cgroup's memory limit
	SourceConfigured = "configured"       // Options.MemoryLimit: no container limit applies
	SourceNone       = "none"             // neither a container limit nor Options.MemoryLimit
)

// containerLimit reads the cgroup's memory limit; tests replace it.
var containerLimit memlimit.Provider = memlimit.FromCgroup

// setMemoryLimit sets the soft memory limit as the package comment says and returns it with
// its source (one of the Source constants).
func setMemoryLimit(fallback int64, log *slog.Logger) (int64, string) {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return debug.SetMemoryLimit(-1), SourceEnv
	}
	if v, ok := os.LookupEnv("AUTOMEMLIMIT"); ok && v == "off" {
		return debug.SetMemoryLimit(-1), SourceOff
	}
	fromContainer := false
	limit, err := memlimit.Set(memlimit.WithLogger(log.With("component", "automemlimit")),
		memlimit.WithProvider(func() (uint64, error) {
			l, err := containerLimit()
			fromContainer = err == nil && l > 0 && l < math.MaxInt64
			return l, err
		}))
	if err != nil {
		log.Warn("no memory limit set from the container's", "err", err)
	}
	if fromContainer && err == nil {
		return limit, SourceContainer
	}
	if fallback > 0 {
		debug.SetMemoryLimit(fallback)
		return fallback, SourceConfigured
	}
	return debug.SetMemoryLimit(-1), SourceNone
}

// minLive stands in for the live heap before the first collection has measured it (and is
// the runtime's own minimum heap target).
const minLive = 4 << 20

// maxPercent bounds GOGC: with a nearly empty heap, the headroom alone would ask for
// millions of percent.
const maxPercent = 100_000

// Percent returns the GOGC that lets a live heap of live bytes grow by at least headroom
// bytes, and never less than base (the configured GOGC).
func Percent(base int, live, headroom uint64) int {
	live = max(live, minLive)
	p := (headroom*100 + live - 1) / live
	if p > maxPercent {
		p = maxPercent
	}
	return max(base, int(p))
}

// Start sets the memory limit and, with a headroom, sets GOGC again after every collection
// from the live heap it measured, until stop is called, which restores the configured GOGC.
// It returns after the first adjustment. With GOGC=off, GOGC is left alone. A later Start
// replaces an earlier one (a process has one GOGC).
//
// After every collection rather than on a timer: GOGC is a ratio to the live heap of the
// last collection, so a ratio picked for a 10 MB heap, still in force when an index of
// 300 MB has become live, would let the heap reach gigabytes before the timer fired.
func Start(opt Options) (stop func()) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	limit, source := setMemoryLimit(opt.MemoryLimit, log)
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if opt.MinHeadroom == 0 || base < 0 {
		log.Info("garbage collector", "gogc", base, "memory_limit", limitString(limit), "memory_limit_from", source, "headroom_tuning", false)
		mu.Lock()
		active = nil
		mu.Unlock()
		return func() {}
	}
	t := &tuner{base: base, current: base, headroom: opt.MinHeadroom,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	mu.Lock()
	active = t
	t.adjust()
	mu.Unlock()
	log.Info("garbage collector", "gogc", base, "gogc_now", t.current, "memory_limit", limitString(limit), "memory_limit_from", source, "min_headroom", opt.MinHeadroom)
	t.arm()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if active == t {
			active = nil
			debug.SetGCPercent(t.base)
		}
	}
}

// A process has one GOGC, hence one tuner: a later Start replaces the earlier one.
var (
	mu     sync.Mutex
	active *tuner
)

type tuner struct {
	base, current int
	headroom      uint64
	sample        []metrics.Sample
}

// sentinel is garbage from birth: its finalizer runs once the next collection has found it
// unreachable, which is how the tuner hears of every collection.
type sentinel struct{ t *tuner }

func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{t}, func(s *sentinel) {
		mu.Lock()
		defer mu.Unlock()
		if active != s.t {
			return // stopped or replaced: the chain ends here
		}
		s.t.adjust()
		s.t.arm()
	})
}

// adjust sets GOGC for the live heap the last collection measured; mu is held.
func (t *tuner) adjust() {
	metrics.Read(t.sample)
	live := uint64(0)
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	p := Percent(t.base, live, t.headroom)
	// Small changes are not worth a new pacing goal.
	if p != t.current && (p > t.current+t.current/8 || p < t.current-t.current/8 || p == t.base) {
		debug.SetGCPercent(p)
		t.current = p
	}
}

func limitString(l int64) string {
	if l <= 0 || l == math.MaxInt64 {
		return "none"
	}
	return fmt.Sprintf("%d MiB", l>>20)
}
