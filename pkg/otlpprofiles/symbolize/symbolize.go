// Package symbolize finds the locations of an OTLP profiles request that need symbols, asks
// the symbolizer service for them (deduplicated, in bounded batches, with bounded concurrency
// and a deadline, through a small result cache) and hands the answers to otlpprofiles.AddSymbols.
//
// Addresses and mappings go to the symbolizer exactly as they stand in the request: the
// symbolizer holds the ELF headers and normalizes, and producers have already subtracted one
// from return addresses.
package symbolize

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/collector/pdata/pprofile"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/binaryid"
	"github.com/profsym/profsym/pkg/degraded"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/symbolizecodec"
)

// Reasons a location that needed symbols did not get them (label values of the unresolved
// metric).
const (
	ReasonNoBuildID = "no_build_id"
	ReasonDisabled  = "disabled"
	ReasonNotFound  = "not_found"
	// ReasonArriving: not found, but an upload of the binary is under way (the symbolizer
	// said upload_in_progress): its debuginfo arrives within seconds.
	ReasonArriving         = "arriving"
	ReasonInvalidDebuginfo = "invalid_debuginfo"
	ReasonUnavailable      = "unavailable"
	ReasonInvalidMapping   = "invalid_mapping"
	// ReasonExecutableNeeded: only a separate debug file of the binary is stored, which
	// cannot place mapped addresses; the executable is wanted.
	ReasonExecutableNeeded = "executable_needed"
	ReasonNoFrames         = "no_frames"
	ReasonDeadline         = "deadline"
	ReasonSymbolizerError  = "symbolizer_error"
	// ReasonBreakerOpen: the symbolizer failed repeatedly, so it is not called for a while
	// and data passes on at once instead of waiting for its deadline.
	ReasonBreakerOpen = "breaker_open"
	ReasonBadResponse = "bad_response"
)

// Server limits documented in symbolizer.proto; batches never exceed them.
const (
	maxModulesPerCall   = 1024
	maxAddressesPerCall = 100_000
	maxFilename         = 4096
)

// Config configures a Symbolizer. Zero values take the defaults noted.
type Config struct {
	// Client reaches the symbolizer; nil disables symbolization (data passes through).
	Client symbolizerv1connect.SymbolizerServiceClient
	// Timeout bounds symbolization per request (default 5s); what is not answered by then
	// goes out unsymbolized.
	Timeout time.Duration
	// CallTimeout bounds each symbolizer call (default: only Timeout bounds it). A request
	// split over several calls then loses only the slow call's answers, not the others'.
	CallTimeout time.Duration
	// FrameTypes lists the values of profile.frame.type whose locations are symbolized; ""
	// stands for locations without a frame type (default: "", "native", "go" and "kernel").
	// A kernel location is asked about only when it is an address of the file its mapping's
	// build ID names (an all-zero mapping, as profsym's collector sends for vmlinux and
	// modules); its node-side name stays where the symbolizer has nothing better.
	FrameTypes []string
	// BatchAddresses is the most addresses per call (default 8192).
	BatchAddresses int
	// BatchModules is the most modules per call (default 256).
	BatchModules int
	// Concurrency is the most calls in flight per request (default 4).
	Concurrency int
	// CacheEntries bounds the result cache (default 262144; negative disables it).
	CacheEntries int
	// PartialAnswerTTL is how long the cache keeps an answer below FIDELITY_FULL (symbols
	// only, or lines without inline frames) before asking again (default 1m): the binary's
	// better file may arrive after it (an executable uploaded before its debug file, a
	// -dbg package installed later), and a cached answer must not hide it for as long as it
	// stays hot. FULL answers stay until evicted; asking again costs one call per address.
	PartialAnswerTTL time.Duration
	// BreakerFailures consecutive calls that found the symbolizer hung open the breaker
	// (default 5): for BreakerOpen (default 10s) no call is made and data passes on
	// unsymbolized at once, then one probe call decides whether to close it again. Hung is a
	// call that ran into its deadline when the symbolizer has answered no call for
	// BreakerGiveUp (default 30s). Busy is not down: a deadline while it still answers other
	// calls counts neither way. A refusal or a failed connection (UNAVAILABLE, a 5xx answer,
	// connection refused) costs no wait, so it opens no breaker here either, which would
	// only delay recovery: the affinity router passes over such a replica itself (eject_for)
	// and sends its binaries to their next owners.
	BreakerFailures int
	BreakerOpen     time.Duration
	BreakerGiveUp   time.Duration
	// OnCall, if set, is told the duration and outcome of every symbolizer call.
	OnCall func(d time.Duration, err error)
	// Logger receives warnings about unusable answers (default slog.Default()).
	Logger *slog.Logger
}

// Symbolizer symbolizes requests. It is safe for concurrent use.
type Symbolizer struct {
	cfg        Config
	cache      *lru
	frameTypes map[string]bool
	breaker    *gobreaker.CircuitBreaker[*connect.Response[symbolizerv1.SymbolizeResponse]]
	health     *degraded.Tracker
	// lastOK is when a call was last answered (unix nanoseconds; New's time at first).
	lastOK atomic.Int64
	// opens counts the breaker's openings.
	opens atomic.Int64
}

// New returns a Symbolizer with cfg's defaults filled in.
func New(cfg Config) *Symbolizer {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.BatchAddresses <= 0 {
		cfg.BatchAddresses = 8192
	}
	cfg.BatchAddresses = min(cfg.BatchAddresses, maxAddressesPerCall)
	if cfg.BatchModules <= 0 {
		cfg.BatchModules = 256
	}
	cfg.BatchModules = min(cfg.BatchModules, maxModulesPerCall)
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.CacheEntries == 0 {
		cfg.CacheEntries = 1 << 18
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.FrameTypes == nil {
		cfg.FrameTypes = DefaultFrameTypes()
	}
	if cfg.BreakerFailures <= 0 {
		cfg.BreakerFailures = 5
	}
	if cfg.BreakerOpen <= 0 {
		cfg.BreakerOpen = 10 * time.Second
	}
	if cfg.BreakerGiveUp <= 0 {
		cfg.BreakerGiveUp = 30 * time.Second
	}
	if cfg.PartialAnswerTTL <= 0 {
		cfg.PartialAnswerTTL = time.Minute
	}
	ft := make(map[string]bool, len(cfg.FrameTypes))
	for _, t := range cfg.FrameTypes {
		ft[t] = true
	}
	s := &Symbolizer{cfg: cfg, cache: newLRU(cfg.CacheEntries), frameTypes: ft,
		health: degraded.New("symbolizer", "profiles pass on with the symbols the cache holds, the rest unsymbolized", time.Minute, cfg.Logger)}
	s.lastOK.Store(time.Now().UnixNano())
	log := cfg.Logger
	s.breaker = gobreaker.NewCircuitBreaker[*connect.Response[symbolizerv1.SymbolizeResponse]](gobreaker.Settings{
		Name:        "symbolizer",
		MaxRequests: 1,
		Timeout:     cfg.BreakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(cfg.BreakerFailures) },
		// Only a hung symbolizer costs every request its whole deadline: deadlines count once
		// it has answered nothing for BreakerGiveUp. One that is busy (loading indexes,
		// verifying uploads) answers late or per module what it cannot answer yet, and one
		// that refuses costs nothing: neither counts. An answer with an error code of the
		// request's own (invalid argument, limits, credentials) is an answer.
		IsSuccessful: func(err error) bool { return s.callOutcome(err) != outcomeDown },
		IsExcluded:   func(err error) bool { return s.callOutcome(err) == outcomeExcluded },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			switch to {
			case gobreaker.StateOpen:
				s.opens.Add(1)
				log.Warn("symbolizer calls stopped: passing data on unsymbolized at once", "after_consecutive_failures", cfg.BreakerFailures, "retry_in", cfg.BreakerOpen, "from", from.String())
			case gobreaker.StateClosed:
				log.Info("symbolizer calls resumed: a probe call succeeded")
			}
		},
	})
	return s
}

type callOutcomeKind int

const (
	outcomeAnswered callOutcomeKind = iota
	outcomeDown
	outcomeExcluded
)

// callOutcome sorts a call's error for the breaker: down (deadlines after BreakerGiveUp
// without any answer: hung), excluded (busy: a deadline while the symbolizer still answers
// other calls; refused or unreachable, which costs no wait; the caller's cancellation) or
// answered.
func (s *Symbolizer) callOutcome(err error) callOutcomeKind {
	if err == nil {
		return outcomeAnswered
	}
	if IsDown(err) {
		return outcomeExcluded
	}
	if errors.Is(err, context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded {
		if time.Since(time.Unix(0, s.lastOK.Load())) > s.cfg.BreakerGiveUp {
			return outcomeDown
		}
		return outcomeExcluded
	}
	if errors.Is(err, context.Canceled) || connect.CodeOf(err) == connect.CodeCanceled {
		return outcomeExcluded
	}
	return outcomeAnswered
}

// IsDown reports whether a failed Symbolize call says the symbolizer is down rather than
// busy: it refused the call or could not be reached (UNAVAILABLE: connection refused or
// reset, shutting down, a 502/503/504 or 429 answer), or failed inside (INTERNAL, UNKNOWN:
// other 5xx answers). A deadline is not down.
func IsDown(err error) bool {
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeInternal, connect.CodeUnknown:
		return true
	}
	return false
}

// BreakerOpens returns how many times the breaker opened.
func (s *Symbolizer) BreakerOpens() int64 { return s.opens.Load() }

// BreakerOpen reports whether symbolizer calls are stopped after repeated failures.
func (s *Symbolizer) BreakerOpen() bool { return s.breaker.State() != gobreaker.StateClosed }

// DefaultFrameTypes are the frame types symbolized unless Config.FrameTypes says otherwise:
// native, go, kernel, and none (producers of pprof-style data set no frame type).
func DefaultFrameTypes() []string {
	return []string{"", otlpattr.FrameTypeNative, otlpattr.FrameTypeGo, otlpattr.FrameTypeKernel}
}

// Report says what happened to the locations of one request.
type Report struct {
	// Seen counts locations that needed symbols (see needsSymbols).
	Seen int
	// Symbolized counts those that got lines.
	Symbolized int
	// CacheHits counts distinct (binary, address) pairs answered from the cache.
	CacheHits int
	// Calls counts symbolizer calls made.
	Calls int
	// Unresolved counts the rest by reason.
	Unresolved map[string]int
	// Rewrite is what was added to the dictionary.
	Rewrite otlpprofiles.SymbolStats
	// Retry lists the locations (dictionary indices) left unsymbolized for a reason that
	// passes within seconds (Retryable): their debuginfo is arriving, or their replica was
	// busy. A Holder holds the profiles that reference them and asks again.
	Retry []int32
}

// Retryable reports whether a location unsymbolized for reason may be symbolized within
// seconds when asked again: its binary's upload is under way (arriving), its index was
// loading or its replica busy (unavailable), or the call ran out of time (deadline). A
// symbolizer found down (breaker_open, symbolizer_error) is not waited for.
func Retryable(reason string) bool {
	switch reason {
	case ReasonArriving, ReasonUnavailable, ReasonDeadline:
		return true
	}
	return false
}

// modKey names one binary under one mapping: the unit the symbolizer normalizes addresses in.
type modKey struct {
	gnu, goID, htl       string
	start, limit, offset uint64
}

type module struct {
	key      modKey
	filename string
	addrs    []uint64
}

// IDs returns the binary IDs a mapping carries, in the form the symbolizer accepts; IDs that
// could not be valid (wrong length, not hex) are left out rather than failing the whole
// batch with INVALID_ARGUMENT.
func IDs(d pprofile.ProfilesDictionary, m pprofile.Mapping) (gnu, goID, htl string) {
	gnu = strings.ToLower(otlpprofiles.AttrStr(d, m.AttributeIndices(), otlpattr.BuildIDGNU))
	if !binaryid.ValidGNU(gnu) {
		gnu = ""
	}
	goID = otlpprofiles.AttrStr(d, m.AttributeIndices(), otlpattr.BuildIDGo)
	if !binaryid.ValidGo(goID) {
		goID = ""
	}
	htl = strings.ToLower(otlpprofiles.AttrStr(d, m.AttributeIndices(), otlpattr.BuildIDHTLHash))
	if !binaryid.ValidHTLHash(htl) {
		htl = ""
	}
	return gnu, goID, htl
}

// needsSymbols reports whether a location is one to symbolize: a frame type of
// Config.FrameTypes (by default native, go, kernel or absent), and no lines yet. Go frames
// count because profsym's collector sends them as addresses too (the symbolizer reads Go
// binaries from pclntab); producers that symbolize Go on the node send lines, and located
// frames are never touched. Kernel frames follow kernelAddress.
func (s *Symbolizer) needsSymbols(d pprofile.ProfilesDictionary, loc pprofile.Location) bool {
	ft := otlpprofiles.AttrStr(d, loc.AttributeIndices(), otlpattr.FrameType)
	if ft == otlpattr.FrameTypeKernel {
		return s.frameTypes[ft] && kernelAddress(d, loc)
	}
	return loc.Lines().Len() == 0 && s.frameTypes[ft]
}

// kernelAddress reports whether a kernel frame is one the symbolizer can answer: an address
// of the file its mapping names by GNU build ID (the all-zero mapping, as profsym's collector
// sends frames of vmlinux and of modules), with no lines or only the node's names (no file,
// no line; kallsyms gives nothing more), which the answer then replaces. Kernel frames of
// producers that send runtime addresses, or lines of their own, are left as they came.
func kernelAddress(d pprofile.ProfilesDictionary, loc pprofile.Location) bool {
	m, ok := otlpprofiles.Mapping(d, loc.MappingIndex())
	if !ok || loc.MappingIndex() == 0 || m.MemoryStart() != 0 || m.MemoryLimit() != 0 || m.FileOffset() != 0 {
		return false
	}
	if gnu, _, _ := IDs(d, m); gnu == "" {
		return false
	}
	for i := range loc.Lines().Len() {
		l := loc.Lines().At(i)
		if l.Line() != 0 {
			return false
		}
		if fn, ok := otlpprofiles.Function(d, l.FunctionIndex()); ok && fn.FilenameStrindex() != 0 {
			return false
		}
	}
	return true
}

type modInfo struct {
	key  modKey
	hash uint64 // modHash(key)
	ok   bool
}

// slotKey is a (mapping, address) pair of one request.
type slotKey struct {
	mapping int32
	addr    uint64
}

// scratch holds the per-request tables of Process.
type scratch struct {
	slots    map[slotKey]int32
	slotKeys []cacheKey
	slotOut  []outcome
	locSlot  []int32 // per location: 0 when not symbolized here, else slot+1
	locs     [][]symbolizecodec.Frame
}

// maxPooledLocations bounds what a pooled scratch keeps: one huge request must not pin its
// tables for good.
const maxPooledLocations = 1 << 16

var scratchPool = sync.Pool{New: func() any { return &scratch{slots: map[slotKey]int32{}} }}

func getScratch(locations int) *scratch {
	sc := scratchPool.Get().(*scratch)
	if cap(sc.slotKeys) < locations {
		sc.slotKeys = make([]cacheKey, 0, locations)
		sc.slotOut = make([]outcome, 0, locations)
		sc.locSlot = make([]int32, locations)
		sc.locs = make([][]symbolizecodec.Frame, locations)
	}
	sc.locSlot = sc.locSlot[:locations]
	sc.locs = sc.locs[:locations]
	return sc
}

func (sc *scratch) release() {
	if cap(sc.slotKeys) > maxPooledLocations {
		return
	}
	// Cleared so no request's strings or frames stay reachable from the pool.
	clear(sc.slots)
	clear(sc.slotKeys[:cap(sc.slotKeys)])
	clear(sc.slotOut[:cap(sc.slotOut)])
	clear(sc.locSlot)
	clear(sc.locs)
	sc.slotKeys, sc.slotOut = sc.slotKeys[:0], sc.slotOut[:0]
	scratchPool.Put(sc)
}

type outcome struct {
	entry  cacheEntry
	reason string // empty when entry is a symbolizer answer
}

// Process symbolizes pd in place. It never fails: whatever cannot be symbolized in time is
// left as it was and counted in the report. pd must have passed validation.
func (s *Symbolizer) Process(ctx context.Context, pd pprofile.Profiles) Report {
	rep := Report{Unresolved: map[string]int{}}
	d := pd.Dictionary()
	lt := d.LocationTable()

	mapInfo := map[int32]modInfo{}
	modules := map[modKey]*module{}
	// Per request, (binary, address) pairs get a slot number: the map keys are small and hash
	// fast, and each location only records its slot. The tables come from a pool, sized for
	// every location: allocating them per request was most of the gateway's allocation, and
	// its garbage collections were the tail of the added latency.
	sc := getScratch(lt.Len())
	defer sc.release()
	slots, slotKeys, slotOut, locSlot := sc.slots, sc.slotKeys, sc.slotOut, sc.locSlot

	for i := 1; i < lt.Len(); i++ {
		loc := lt.At(i)
		if !s.needsSymbols(d, loc) {
			continue
		}
		rep.Seen++
		mi := loc.MappingIndex()
		info, seen := mapInfo[mi]
		if !seen {
			if m, ok := otlpprofiles.Mapping(d, mi); ok && mi != 0 {
				gnu, goID, htl := IDs(d, m)
				if gnu != "" || goID != "" || htl != "" {
					k := modKey{gnu, goID, htl, m.MemoryStart(), m.MemoryLimit(), m.FileOffset()}
					info = modInfo{key: k, hash: modHash(k), ok: true}
				}
			}
			mapInfo[mi] = info
		}
		if !info.ok {
			rep.Unresolved[ReasonNoBuildID]++
			continue
		}
		sk := slotKey{mi, loc.Address()}
		slot, dup := slots[sk]
		if !dup {
			slot = int32(len(slotKeys))
			slots[sk] = slot
			ck := cacheKey{info.key, loc.Address()}
			slotKeys = append(slotKeys, ck)
			if e, hit := s.cache.get(ck, info.hash); hit {
				slotOut = append(slotOut, outcome{entry: e})
				rep.CacheHits++
			} else {
				slotOut = append(slotOut, outcome{reason: ReasonDisabled})
				mod := modules[info.key]
				if mod == nil {
					m, _ := otlpprofiles.Mapping(d, mi)
					name := otlpprofiles.Str(d, m.FilenameStrindex())
					if len(name) > maxFilename {
						name = ""
					}
					mod = &module{key: info.key, filename: name}
					modules[info.key] = mod
				}
				mod.addrs = append(mod.addrs, loc.Address())
			}
		}
		locSlot[i] = slot + 1
	}

	if len(modules) > 0 && s.cfg.Client != nil {
		results := make(map[cacheKey]outcome, len(slotKeys))
		rep.Calls = s.resolve(ctx, modules, results)
		for i, ck := range slotKeys {
			if o, ok := results[ck]; ok {
				slotOut[i] = o
			}
		}
	}

	locs := sc.locs
	symbolizedMaps := map[modKey]symbolizerv1.Fidelity{}
	for i, sl := range locSlot {
		if sl == 0 {
			continue
		}
		o := slotOut[sl-1]
		switch {
		case o.reason != "":
			rep.Unresolved[o.reason]++
			if Retryable(o.reason) {
				rep.Retry = append(rep.Retry, int32(i))
			}
		case len(o.entry.frames) == 0:
			rep.Unresolved[ReasonNoFrames]++
		default:
			locs[i] = o.entry.frames
			// A kernel frame's node-side name gives way to the answer (AddSymbols fills
			// only locations without lines).
			if loc, ok := otlpprofiles.Location(d, int32(i)); ok {
				loc.Lines().RemoveIf(func(pprofile.Line) bool { return true })
			}
			rep.Symbolized++
			mk := slotKeys[sl-1].mod
			if o.entry.fidelity > symbolizedMaps[mk] {
				symbolizedMaps[mk] = o.entry.fidelity
			}
		}
	}
	mappings := map[int32]symbolizerv1.Fidelity{}
	for mi, info := range mapInfo {
		if f, ok := symbolizedMaps[info.key]; ok && info.ok {
			mappings[mi] = f
		}
	}
	rep.Rewrite = otlpprofiles.AddSymbols(pd, locs, mappings)
	return rep
}

type batch struct {
	mods  []*module // each with the slice of addresses this batch carries
	addrs int
}

// plan cuts modules into batches of at most BatchAddresses addresses and BatchModules
// modules; a module with more addresses than a batch holds is split over several (the API
// answers each entry on its own).
func (s *Symbolizer) plan(modules map[modKey]*module) []*batch {
	keys := make([]*module, 0, len(modules))
	for _, m := range modules {
		keys = append(keys, m)
	}
	// Deterministic batches make calls reproducible in logs and tests.
	slices.SortFunc(keys, func(a, b *module) int {
		return strings.Compare(fmt.Sprint(a.key), fmt.Sprint(b.key))
	})
	var out []*batch
	cur := &batch{}
	for _, m := range keys {
		addrs := m.addrs
		for len(addrs) > 0 {
			room := s.cfg.BatchAddresses - cur.addrs
			if room == 0 || len(cur.mods) == s.cfg.BatchModules {
				out = append(out, cur)
				cur = &batch{}
				room = s.cfg.BatchAddresses
			}
			n := min(room, len(addrs))
			cur.mods = append(cur.mods, &module{key: m.key, filename: m.filename, addrs: addrs[:n]})
			cur.addrs += n
			addrs = addrs[n:]
		}
	}
	if len(cur.mods) > 0 {
		out = append(out, cur)
	}
	return out
}

func (s *Symbolizer) resolve(ctx context.Context, modules map[modKey]*module, results map[cacheKey]outcome) int {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	batches := s.plan(modules)
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, s.cfg.Concurrency)
	)
	for _, b := range batches {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out := s.call(ctx, b)
			mu.Lock()
			for k, v := range out {
				results[k] = v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return len(batches)
}

func (s *Symbolizer) call(ctx context.Context, b *batch) map[cacheKey]outcome {
	req := &symbolizerv1.SymbolizeRequest{Modules: make([]*symbolizerv1.Module, len(b.mods))}
	for i, m := range b.mods {
		req.Modules[i] = &symbolizerv1.Module{
			GnuBuildId:  m.key.gnu,
			GoBuildId:   m.key.goID,
			Htlhash:     m.key.htl,
			MemoryStart: m.key.start,
			MemoryLimit: m.key.limit,
			FileOffset:  m.key.offset,
			Filename:    m.filename,
			Addresses:   m.addrs,
		}
	}
	out := make(map[cacheKey]outcome, b.addrs)
	failAll := func(reason string) map[cacheKey]outcome {
		for _, m := range b.mods {
			for _, a := range m.addrs {
				out[cacheKey{m.key, a}] = outcome{reason: reason}
			}
		}
		return out
	}
	if s.cfg.CallTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
	}
	start := time.Now()
	resp, err := s.breaker.Execute(func() (*connect.Response[symbolizerv1.SymbolizeResponse], error) {
		return s.cfg.Client.Symbolize(ctx, connect.NewRequest(req))
	})
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		s.health.Fail(err)
		return failAll(ReasonBreakerOpen)
	}
	if s.cfg.OnCall != nil {
		s.cfg.OnCall(time.Since(start), err)
	}
	if err != nil {
		s.health.Fail(err)
		// A refusal is down even when it came at the deadline (no replica resolved in time):
		// not held for a retry, which would hold every profile while the symbolizer is gone.
		if IsDown(err) {
			return failAll(ReasonSymbolizerError)
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded {
			return failAll(ReasonDeadline)
		}
		return failAll(ReasonSymbolizerError)
	}
	s.health.OKStarted(start)
	s.lastOK.Store(time.Now().UnixNano())
	if len(resp.Msg.GetModules()) != len(req.Modules) {
		return failAll(ReasonBadResponse)
	}
	own := symbolizecodec.NewDetacher()
	for i, m := range b.mods {
		r := resp.Msg.GetModules()[i]
		reason := ""
		var frames [][]symbolizecodec.Frame
		switch r.GetStatus() {
		case symbolizerv1.ModuleStatus_MODULE_STATUS_OK:
			var err error
			if frames, err = symbolizecodec.Decode(r, len(m.addrs)); err != nil {
				s.cfg.Logger.Warn("symbolizer answer unusable", "module", r.GetResolvedBuildId(), "err", err)
				reason = ReasonBadResponse
			}
		case symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND:
			reason = ReasonNotFound
			if r.GetUploadInProgress() {
				reason = ReasonArriving
			}
		case symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_DEBUGINFO:
			reason = ReasonInvalidDebuginfo
		case symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_MAPPING:
			reason = ReasonInvalidMapping
		case symbolizerv1.ModuleStatus_MODULE_STATUS_UNAVAILABLE, symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_RESIDENT:
			// NOT_RESIDENT answers only a module sent resident_only, which the affinity
			// router does and re-routes itself; a client that set it passes it on as a miss.
			reason = ReasonUnavailable
		case symbolizerv1.ModuleStatus_MODULE_STATUS_EXECUTABLE_NEEDED:
			reason = ReasonExecutableNeeded
		default:
			reason = ReasonBadResponse
		}
		h := modHash(m.key)
		for j, a := range m.addrs {
			k := cacheKey{m.key, a}
			if reason != "" {
				out[k] = outcome{reason: reason}
				continue
			}
			// A cache entry holds copies: the answer's frames would keep the whole answer alive.
			e := cacheEntry{frames: own.Frames(frames[j]), fidelity: r.GetFidelity()}
			if e.fidelity != symbolizerv1.Fidelity_FIDELITY_FULL {
				e.expires = s.cache.clock().Add(s.cfg.PartialAnswerTTL)
			}
			out[k] = outcome{entry: e}
			s.cache.put(k, h, e)
		}
	}
	return out
}

// CacheLen returns the number of cached (binary, mapping, address) answers.
func (s *Symbolizer) CacheLen() int { return s.cache.len() }
