// Package gctune sets the Go garbage collector up for a long-running server:
//
//   - a soft memory limit (GOMEMLIMIT) of 90% of the container's memory limit (cgroup
//     memory.max, through github.com/KimMachineGun/automemlimit), unless GOMEMLIMIT is set
//     or AUTOMEMLIMIT=off; it makes the collector work harder before the kernel kills the
//     process, whatever GOGC says;
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
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// Options configures Start.
type Options struct {
	// MinHeadroom is how many bytes the heap may grow past the live heap before a collection,
	// at least; 0 leaves GOGC alone.
	MinHeadroom uint64
	// Interval is how often the live heap is read; 0 means one second.
	Interval time.Duration
	Logger   *slog.Logger
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

// Start sets the memory limit and, with a headroom, keeps GOGC in step with the live heap
// until ctx ends, when the configured GOGC is restored. It returns after the first
// adjustment. With GOGC=off, GOGC is left alone.
func Start(ctx context.Context, opt Options) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	limit, err := memlimit.Set(memlimit.WithLogger(log.With("component", "automemlimit")))
	if err != nil {
		log.Warn("no memory limit set from the container's", "err", err)
	}
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if opt.MinHeadroom == 0 || base < 0 {
		log.Info("garbage collector", "gogc", base, "memory_limit", limitString(limit), "headroom_tuning", false)
		return
	}
	interval := opt.Interval
	if interval <= 0 {
		interval = time.Second
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := base
	adjust := func() {
		metrics.Read(sample)
		live := uint64(0)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live = sample[0].Value.Uint64()
		}
		p := Percent(base, live, opt.MinHeadroom)
		// Small changes are not worth a new pacing target.
		if p != current && (p > current+current/8 || p < current-current/8 || p == base) {
			debug.SetGCPercent(p)
			current = p
		}
	}
	adjust()
	log.Info("garbage collector", "gogc", base, "gogc_now", current, "memory_limit", limitString(limit), "min_headroom", opt.MinHeadroom)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				debug.SetGCPercent(base)
				return
			case <-t.C:
				adjust()
			}
		}
	}()
}

func limitString(l int64) string {
	if l <= 0 || l == math.MaxInt64 {
		return "none"
	}
	return fmt.Sprintf("%d MiB", l>>20)
}
