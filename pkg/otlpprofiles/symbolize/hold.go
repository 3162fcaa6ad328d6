package symbolize

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpprofiles"
)

// ErrHoldFull is returned by Holder.Process when the profiles held already take the byte
// bound: the export is refused whole, untouched, for its sender to retry (a Collector
// receiver answers a non-permanent error with UNAVAILABLE, or HTTP 503).
var ErrHoldFull = errors.New("symbolize: the profiles held for arriving debuginfo fill the hold; retry")

// HoldConfig configures a Holder. Zero values take the defaults noted.
type HoldConfig struct {
	// For bounds how long a profile is held past its arrival (default 30s); then it goes on
	// as it is, its frames unsymbolized and counted. Its last pass ends a margin before (the
	// smaller of Retry and a tenth of For), so that a late answer on a loaded machine does
	// not carry it past For.
	For time.Duration
	// MaxBytes bounds the held profiles, by their protobuf size (default 64 MiB): an export
	// that arrives while they take it is refused with ErrHoldFull.
	MaxBytes int64
	// Retry is how long a held profile waits before it is asked again (default 1s); the wait
	// doubles after each pass that leaves frames waiting, up to four times Retry, so that a
	// long index load is not asked after every second by every profile that waits for it.
	Retry time.Duration
	// Parallel is the most held profiles asked again at once (default 4).
	Parallel int
	// Logger receives failures to hand a held profile on (default slog.Default()).
	Logger *slog.Logger
}

// HoldResult says how a held profile went on.
type HoldResult struct {
	// Held is how long it was held past its arrival.
	Held time.Duration
	// Expired is set when it went on at the end of the hold, or at Close, with frames still
	// waiting; Report then counts them by reason.
	Expired bool
	// Passes is how many times it was asked again, and Symbolized the frames those passes
	// symbolized.
	Passes, Symbolized int
	// Report is the last pass's: what stayed unsymbolized when it went on.
	Report Report
}

// EmitFunc hands a held profile on. An error keeps it held, to be handed on again after
// the next pass (it goes on counting against MaxBytes, so that the hold pushes back on
// senders while the next consumer does); an error for which permanent reports true ends
// its hold: it is logged and counted by the caller, never retried.
type EmitFunc func(ctx context.Context, pd pprofile.Profiles, res HoldResult) error

// Holder holds the profiles of an export whose frames are unsymbolized only because their
// debuginfo is arriving or their replica was busy (Report.Retry), asks again until every
// such frame is answered or the hold ends, and hands them on; the rest of the export goes
// on at once. It is safe for concurrent use.
type Holder struct {
	sym       *Symbolizer
	cfg       HoldConfig
	permanent func(error) bool

	mu    sync.Mutex
	items map[*heldProfiles]struct{}
	bytes int64

	stop chan struct{}
	done chan struct{}
	once sync.Once
	// ctx bounds the passes; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup // passes and emissions in flight
}

type heldProfiles struct {
	pd      pprofile.Profiles
	emit    EmitFunc
	arrived time.Time
	next    time.Time // when it is asked again
	bytes   int64
	passes  int
	symbols int // frames symbolized by the passes
	last    Report
	busy    bool // a pass or an emission is in flight
}

// NewHolder returns a Holder over sym; Close ends it. permanent tells the errors of an
// EmitFunc that retrying cannot cure (nil: none).
func NewHolder(sym *Symbolizer, cfg HoldConfig, permanent func(error) bool) *Holder {
	if cfg.For <= 0 {
		cfg.For = 30 * time.Second
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 64 << 20
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if permanent == nil {
		permanent = func(error) bool { return false }
	}
	h := &Holder{sym: sym, cfg: cfg, permanent: permanent, items: map[*heldProfiles]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{}), sem: make(chan struct{}, cfg.Parallel)}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	go h.loop()
	return h
}

// Held returns how many exports' profiles are held and their protobuf bytes.
func (h *Holder) Held() (exports int, bytes int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.items), h.bytes
}

// Process symbolizes pd in place and splits it: the profiles that reference a frame
// waiting for arriving debuginfo (Report.Retry) are held, and emit hands them on later;
// now holds the rest, to go on at once (it may hold no profile). held reports whether
// anything was held. When the hold is full on arrival, pd is refused untouched with
// ErrHoldFull.
func (h *Holder) Process(ctx context.Context, pd pprofile.Profiles, emit EmitFunc) (now pprofile.Profiles, rep Report, held bool, err error) {
	h.mu.Lock()
	full := h.bytes >= h.cfg.MaxBytes
	h.mu.Unlock()
	if full {
		return pd, Report{}, false, ErrHoldFull
	}
	arrived := time.Now()
	rep = h.sym.Process(ctx, pd)
	if len(rep.Retry) == 0 {
		return pd, rep, false, nil
	}
	now, later := splitProfiles(pd, rep.Retry)
	if later.ResourceProfiles().Len() == 0 {
		return now, rep, false, nil
	}
	it := &heldProfiles{pd: later, emit: emit, arrived: arrived, next: arrived.Add(h.cfg.Retry), last: rep,
		bytes: int64((&pprofile.ProtoMarshaler{}).ProfilesSize(later))}
	h.mu.Lock()
	h.items[it] = struct{}{}
	h.bytes += it.bytes
	h.mu.Unlock()
	return now, rep, true, nil
}

// Close ends the hold: every profile still held goes on as it is (Expired), and Close
// returns when they have, or when ctx ends.
func (h *Holder) Close(ctx context.Context) error {
	h.once.Do(func() { close(h.stop); h.cancel() })
	select {
	case <-h.done:
	case <-ctx.Done():
		return fmt.Errorf("symbolize hold: close: %w", ctx.Err())
	}
	h.wg.Wait()
	h.mu.Lock()
	items := make([]*heldProfiles, 0, len(h.items))
	for it := range h.items {
		items = append(items, it)
	}
	h.mu.Unlock()
	var errs []error
	for _, it := range items {
		if err := it.emit(ctx, it.pd, h.result(it, true)); err != nil {
			errs = append(errs, err)
		}
		h.remove(it)
	}
	return errors.Join(errs...)
}

func (h *Holder) result(it *heldProfiles, expired bool) HoldResult {
	return HoldResult{Held: time.Since(it.arrived), Expired: expired, Passes: it.passes, Symbolized: it.symbols, Report: it.last}
}

func (h *Holder) remove(it *heldProfiles) {
	h.mu.Lock()
	if _, ok := h.items[it]; ok {
		delete(h.items, it)
		h.bytes -= it.bytes
	}
	h.mu.Unlock()
}

// margin is how much before the end of its hold a profile is handed on, so that its last
// pass and the hand-over, late on a loaded machine, still end within For.
func (h *Holder) margin() time.Duration { return min(h.cfg.Retry, h.cfg.For/10) }

// ends returns when a held profile's last pass must end.
func (h *Holder) ends(it *heldProfiles) time.Time { return it.arrived.Add(h.cfg.For - h.margin()) }

// loop wakes a few times per Retry: a held profile whose hold ended goes on, one that is
// due is asked again (at most Parallel at once; the others wait for the next wake).
func (h *Holder) loop() {
	defer close(h.done)
	tick := time.NewTicker(max(h.cfg.Retry/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		h.mu.Lock()
		var due []*heldProfiles
		for it := range h.items {
			if !it.busy && (!now.Before(it.next) || !now.Before(h.ends(it))) {
				due = append(due, it)
			}
		}
		h.mu.Unlock()
		for _, it := range due {
			expired := !now.Before(h.ends(it))
			if !expired {
				select {
				case h.sem <- struct{}{}:
				default:
					continue // every slot taken: at the next wake
				}
			}
			h.mu.Lock()
			it.busy = true
			h.mu.Unlock()
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				if expired {
					h.hand(it, true)
					return
				}
				h.pass(it)
				<-h.sem
			}()
		}
	}
}

// pass asks again for a held profile's waiting frames, within what is left of its hold,
// and hands it on when none waits any more.
func (h *Holder) pass(it *heldProfiles) {
	ctx, cancel := context.WithDeadline(h.ctx, h.ends(it))
	rep := h.sym.Process(ctx, it.pd)
	cancel()
	if h.ctx.Err() != nil {
		// Closing: Close hands it on as it is.
		return
	}
	it.passes++
	it.symbols += rep.Symbolized
	it.last = rep
	if len(rep.Retry) == 0 {
		h.hand(it, false)
		return
	}
	if !time.Now().Before(h.ends(it)) {
		h.hand(it, true)
		return
	}
	h.mu.Lock()
	it.next = time.Now().Add(min(h.cfg.Retry<<min(it.passes-1, 2), 4*h.cfg.Retry))
	it.busy = false
	h.mu.Unlock()
}

// hand gives a held profile to its EmitFunc; a failure keeps it for the next wake.
func (h *Holder) hand(it *heldProfiles, expired bool) {
	err := it.emit(context.Background(), it.pd, h.result(it, expired))
	if err != nil && !h.permanent(err) {
		h.cfg.Logger.Warn("held profiles not taken by the next consumer; kept for the next try", "err", err)
		h.mu.Lock()
		it.next = time.Now().Add(h.cfg.Retry)
		it.busy = false
		h.mu.Unlock()
		return
	}
	if err != nil {
		h.cfg.Logger.Error("held profiles refused by the next consumer for good", "err", err)
	}
	h.remove(it)
}

// splitProfiles moves the profiles of pd that reference a location of locs (dictionary
// indices) into later; now keeps the others. Each part's dictionary is compacted to what
// it references. When every profile or none moves, pd itself is the one part.
func splitProfiles(pd pprofile.Profiles, locs []int32) (now, later pprofile.Profiles) {
	d := pd.Dictionary()
	wait := make(map[int32]bool, len(locs))
	for _, l := range locs {
		wait[l] = true
	}
	stacks := d.StackTable()
	stackWaits := map[int32]bool{}
	waits := func(si int32) bool {
		if w, ok := stackWaits[si]; ok {
			return w
		}
		w := false
		if si >= 0 && int(si) < stacks.Len() {
			li := stacks.At(int(si)).LocationIndices()
			for k := 0; k < li.Len() && !w; k++ {
				w = wait[li.At(k)]
			}
		}
		stackWaits[si] = w
		return w
	}
	var moved []bool // per profile, in order
	total, n := 0, 0
	rps := pd.ResourceProfiles()
	for i := range rps.Len() {
		sps := rps.At(i).ScopeProfiles()
		for j := range sps.Len() {
			ps := sps.At(j).Profiles()
			for k := range ps.Len() {
				ss := ps.At(k).Samples()
				m := false
				for s := 0; s < ss.Len() && !m; s++ {
					m = waits(ss.At(s).StackIndex())
				}
				moved = append(moved, m)
				total++
				if m {
					n++
				}
			}
		}
	}
	switch n {
	case 0:
		return pd, pprofile.NewProfiles()
	case total:
		return pprofile.NewProfiles(), pd
	}
	later = pprofile.NewProfiles()
	pd.CopyTo(later)
	keep(pd, moved, false)
	keep(later, moved, true)
	otlpprofiles.Compact(pd)
	otlpprofiles.Compact(later)
	return pd, later
}

// keep removes from pd the profiles whose moved flag is not want, and the scopes and
// resources left empty.
func keep(pd pprofile.Profiles, moved []bool, want bool) {
	i := 0
	pd.ResourceProfiles().RemoveIf(func(rp pprofile.ResourceProfiles) bool {
		scopes := rp.ScopeProfiles().Len()
		rp.ScopeProfiles().RemoveIf(func(sp pprofile.ScopeProfiles) bool {
			n := sp.Profiles().Len()
			sp.Profiles().RemoveIf(func(pprofile.Profile) bool {
				m := moved[i]
				i++
				return m != want
			})
			return n > 0 && sp.Profiles().Len() == 0
		})
		return scopes > 0 && rp.ScopeProfiles().Len() == 0
	})
}
