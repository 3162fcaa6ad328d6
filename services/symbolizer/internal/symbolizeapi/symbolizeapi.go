// Package symbolizeapi implements SymbolizerService: per module it finds the stored file by
// any of its IDs (fetching from debuginfod on a miss), normalizes the addresses with the
// file's PT_LOAD segments, answers from the result caches, and looks the rest up in the
// file's index (in memory, else stored, else built once).
package symbolizeapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sync/errgroup"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/tracing"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/indexcache"
	"github.com/profsym/profsym/services/symbolizer/internal/metrics"
	"github.com/profsym/profsym/services/symbolizer/internal/resultcache"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// Fetcher gets a file from elsewhere (debuginfod) into the store. found is false when no
// upstream has it.
type Fetcher interface {
	// Fetch gets the binary's debug file, else its executable.
	Fetch(ctx context.Context, gnuBuildID string) (found bool, err error)
	// FetchExecutable gets the executable of a binary whose record holds only a separate
	// debug file, for its program headers.
	FetchExecutable(ctx context.Context, gnuBuildID string) (found bool, err error)
}

// Options configures the service.
type Options struct {
	MaxModules   int
	MaxAddresses int
	TempDir      string
	Limits       elfx.Limits
	Workers      int
	// ResolveTTL bounds how long an ID's record is reused without re-reading the store
	// (uploads on other replicas become visible after at most this long).
	ResolveTTL time.Duration
	// StringsCacheBytes bounds the memory of the string tables kept to read cached results
	// of files whose index is not in memory; 0 means 256 MiB.
	StringsCacheBytes int64
	Logger            *slog.Logger
	// Used, when set, is told the key of every record a module was found in, and the
	// module's file name (the record of last use that retention reads).
	Used func(recordKey, filename string)
	// Observe, when set, is told every module's answer (the coverage tally).
	Observe func(*symbolizerv1.Module, *symbolizerv1.ModuleResult)
	// BuildLocks, when set, makes one of the replicas sharing the store build an index the
	// store lacks, while the others wait for it to land there and load it.
	BuildLocks BuildLocker
	// Tenant is the tenant this service answers for: its results are kept in the tenant's
	// part of the result cache.
	Tenant string
	// Strings, when set, is the cache of string tables (shared by the tenants' services: its
	// entries are named by file content); else the service makes its own of StringsCacheBytes.
	Strings *indexcache.Cache
	// BuildWait bounds how long a replica waits for another's build before building the index
	// itself (default 10m); a builder that dies loses its lock sooner, when its lease expires.
	BuildWait time.Duration
}

var _ symbolizerv1connect.SymbolizerServiceHandler = (*Service)(nil)

// BuildLocker locks an index build across replicas.
type BuildLocker interface {
	// TryLock takes key when no replica holds it; ok is false when another does. An error
	// means the lock could not be asked, and the caller builds without it.
	TryLock(ctx context.Context, key string) (unlock func(), ok bool, err error)
}

// Service is the SymbolizerService handler. It implements every method itself: a method added
// to the API fails this package's build until it is answered here.
type Service struct {
	meta    *catalog.Catalog
	indexes *indexcache.Cache
	strs    *indexcache.Cache // string tables of files whose index is not in memory (indexes supersedes it)
	results *resultcache.Cache
	fetch   Fetcher
	m       *metrics.Metrics
	opt     Options

	mu       sync.Mutex
	resolved map[catalog.ID]resolved
	comps    map[string]resolvedCompanions // by file SHA-256
}

type resolvedCompanions struct {
	c     catalog.Companions
	until time.Time
}

type resolved struct {
	rec *catalog.Record
	// arriving is set for an ID not found whose upload is under way (catalog.Arriving).
	arriving bool
	until    time.Time
}

// New returns the service. fetch may be nil.
func New(md *catalog.Catalog, ix *indexcache.Cache, rc *resultcache.Cache, fetch Fetcher, m *metrics.Metrics, opt Options) *Service {
	if opt.MaxModules == 0 {
		opt.MaxModules = 1024
	}
	if opt.MaxAddresses == 0 {
		opt.MaxAddresses = 100000
	}
	if opt.ResolveTTL == 0 {
		opt.ResolveTTL = 5 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.StringsCacheBytes == 0 {
		opt.StringsCacheBytes = 256 << 20
	}
	if opt.BuildWait <= 0 {
		opt.BuildWait = 10 * time.Minute
	}
	strs := opt.Strings
	if strs == nil {
		strs = indexcache.New(opt.StringsCacheBytes)
	}
	// An index in memory holds its string table: the cache keeps tables of the others only.
	ix.Supersede(strs)
	return &Service{meta: md, indexes: ix, strs: strs, results: rc, fetch: fetch, m: m, opt: opt, resolved: map[catalog.ID]resolved{}, comps: map[string]resolvedCompanions{}}
}

// Forget drops resolved records, after an upload or delete in this process.
func (s *Service) Forget() {
	s.mu.Lock()
	s.resolved = map[catalog.ID]resolved{}
	s.comps = map[string]resolvedCompanions{}
	s.mu.Unlock()
}

// Symbolize implements the RPC.
func (s *Service) Symbolize(ctx context.Context, req *connect.Request[symbolizerv1.SymbolizeRequest]) (*connect.Response[symbolizerv1.SymbolizeResponse], error) {
	mods := req.Msg.GetModules()
	if err := s.validate(mods); err != nil {
		return nil, err
	}
	out := make([]*symbolizerv1.ModuleResult, len(mods))
	// Modules are answered by a deadline a little before the caller's, so that one whose
	// index is still loading is answered UNAVAILABLE in time (the load goes on for the next
	// call) rather than the whole call timing out: a client that routes by build ID takes a
	// timed-out call for a dead replica and asks the next one, which loads the index too.
	actx, cancel := answerBy(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(actx)
	g.SetLimit(4)
	for i, mod := range mods {
		g.Go(func() error {
			out[i] = s.module(gctx, mod)
			if s.opt.Observe != nil && gctx.Err() == nil && out[i].GetStatus() != symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_RESIDENT {
				s.opt.Observe(mod, out[i])
			}
			return nil
		})
	}
	// module reports every failure in its module's result, so no goroutine returns an error.
	_ = g.Wait()
	if err := ctx.Err(); err != nil {
		return nil, connect.NewError(connect.CodeOf(err), err)
	}
	return connect.NewResponse(&symbolizerv1.SymbolizeResponse{Modules: out}), nil
}

// answerBy returns ctx with a deadline a margin before ctx's own (a tenth of the time left,
// between 20 and 250 ms): what the reply needs to reach the caller before it gives up.
func answerBy(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(max(time.Until(dl)/10, 20*time.Millisecond), 250*time.Millisecond)
	return context.WithDeadline(ctx, dl.Add(-margin))
}

func (s *Service) validate(mods []*symbolizerv1.Module) error {
	if len(mods) == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("modules: at least one module is required"))
	}
	if len(mods) > s.opt.MaxModules {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%d modules: the limit is %d per request", len(mods), s.opt.MaxModules))
	}
	total := 0
	for i, m := range mods {
		total += len(m.GetAddresses())
		if m.GetGnuBuildId() == "" && m.GetGoBuildId() == "" && m.GetHtlhash() == "" {
			return invalid("modules[%d]: none of gnu_build_id, go_build_id, htlhash is set", i)
		}
		for _, f := range []struct {
			name string
			typ  debuginfov1.BuildIDType
			v    string
		}{
			{"gnu_build_id", debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, m.GetGnuBuildId()},
			{"go_build_id", debuginfov1.BuildIDType_BUILD_ID_TYPE_GO, m.GetGoBuildId()},
			{"htlhash", debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH, m.GetHtlhash()},
		} {
			if f.v == "" {
				continue
			}
			if err := catalog.ValidateID(f.typ, f.v); err != nil {
				return invalid("modules[%d].%s: %v", i, f.name, err)
			}
		}
		if len(m.GetFilename()) > 4096 {
			return invalid("modules[%d].filename: %d bytes, the limit is 4096", i, len(m.GetFilename()))
		}
	}
	if total > s.opt.MaxAddresses {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%d addresses: the limit is %d per request", total, s.opt.MaxAddresses))
	}
	return nil
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

func failed(mod *symbolizerv1.Module, st symbolizerv1.ModuleStatus, msg string) *symbolizerv1.ModuleResult {
	return &symbolizerv1.ModuleResult{Status: st, Message: msg, FrameCounts: make([]uint32, len(mod.GetAddresses())), Frames: &symbolizerv1.FrameTable{}}
}

func (s *Service) module(ctx context.Context, mod *symbolizerv1.Module) *symbolizerv1.ModuleResult {
	return s.moduleTry(ctx, mod, false)
}

// moduleTry answers a module; again is set on the second try, after the record read first
// was replaced while it was read.
func (s *Service) moduleTry(ctx context.Context, mod *symbolizerv1.Module, again bool) *symbolizerv1.ModuleResult {
	rec, id, st, msg, arriving := s.find(ctx, mod)
	if st != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		r := failed(mod, st, msg)
		if st == symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND && arriving {
			r.UploadInProgress = true
			r.Message = "an upload of this binary is under way; ask again in a few seconds"
		}
		return r
	}
	if s.opt.Used != nil {
		s.opt.Used(rec.Key, mod.GetFilename())
	}
	f := rec.Current
	if f.State == debuginfov1.DebuginfoState_DEBUGINFO_STATE_INVALID {
		return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_DEBUGINFO, f.Message)
	}
	if f.IsCompanion() {
		return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND, fmt.Sprintf(
			"the file stored under %s is a %s, which describes no code of its own; no binary is stored under the module's IDs", id, f.Type))
	}
	m := addrmap.Mapping{Start: mod.GetMemoryStart(), Limit: mod.GetMemoryLimit(), Offset: mod.GetFileOffset()}
	if !m.IsZero() {
		if m.Start == 0 && m.Limit == 0 {
			return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_MAPPING, "memory_start and memory_limit are zero but file_offset is not")
		}
		if m.Limit <= m.Start {
			return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_MAPPING, fmt.Sprintf("memory_limit %#x is not above memory_start %#x", m.Limit, m.Start))
		}
	}

	var loads []addrmap.Load
	if !m.IsZero() {
		var known bool
		if rec, loads, known = s.programHeaders(ctx, rec, id, mod); !known {
			return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_EXECUTABLE_NEEDED,
				"only a separate debug file is stored for this binary; its program headers do not give the executable's file offsets, so mapped addresses cannot be placed: upload the executable, or send ELF virtual addresses with an all-zero mapping")
		}
		f = rec.Current
	}

	addrs := mod.GetAddresses()
	vaddrs := make([]uint64, len(addrs))
	ok := make([]bool, len(addrs))
	landed, outside := 0, 0
	var lastErr error
	for i, a := range addrs {
		v, err := addrmap.Normalize(a, m, loads)
		switch {
		case err == nil:
			vaddrs[i], ok[i] = v, true
			landed++
		case errors.Is(err, addrmap.ErrOutsideMapping):
			outside++
		default:
			lastErr = err
		}
	}
	if len(addrs) > 0 && landed == 0 && outside < len(addrs) {
		return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_MAPPING, fmt.Sprintf("no address lands in a PT_LOAD segment of the file (%v)", lastErr))
	}

	comps, err := s.companions(ctx, f)
	if err != nil {
		return s.unavailable(ctx, mod, id, f, again, err)
	}
	variant := comps.Variant()
	res := &symbolizerv1.ModuleResult{
		Status: symbolizerv1.ModuleStatus_MODULE_STATUS_OK, Fidelity: fidelity(f.Fidelity),
		ResolvedBuildId: id.ID, ResolvedBuildIdType: id.Type, Companions: comps.Proto(),
	}
	if e := f.Quality.DWARFError; e != "" {
		res.Message = "the stored file's DWARF is unreadable (" + e + "); answered from its other sources: upload debuginfo to replace it"
	}
	if miss := comps.Describe(); miss != "" {
		res.Message = miss
	}
	// Distinct addresses, so duplicates cost one lookup, in ascending order (see distinct).
	slot := make([]int, len(addrs)) // index into keys of address i
	uniq := distinct(vaddrs, ok, slot)
	keys := make([]resultcache.Key, len(uniq))
	for j, a := range uniq {
		keys[j] = resultcache.Key{BuildID: id.ID, Addr: a, Tenant: s.opt.Tenant}
	}
	caching := s.results.Enabled()
	ixKey := f.SHA256 + variant
	e := s.indexes.Get(ixKey)
	if e != nil {
		s.countIndex(true)
	} else if !caching || variant != "" {
		if mod.GetResidentOnly() {
			return notResident(mod)
		}
		// An index that depends on companions says itself what fidelity it reached (the
		// record's is that of the index built at upload, with the companions then stored).
		var err error
		if e, err = s.entry(ctx, rec, comps); err != nil {
			return s.unavailable(ctx, mod, id, f, again, err)
		}
	}
	if e != nil && variant != "" {
		res.Fidelity = fidelity(e.Index.Fidelity())
	}
	// Cached results are string IDs of the file's index: the key names the string table
	// with the file's content, so no replica reads IDs of one table against another.
	var strs *index.StringTable
	if e != nil {
		strs = e.Index.Strings()
	} else {
		var err error
		if strs, err = s.stringTable(ctx, rec, comps); err != nil {
			return s.unavailable(ctx, mod, id, f, again, err)
		}
	}
	tagKeys := func() {
		tag := f.SHA256[:16] + variant + "." + strs.Tag()
		for j := range keys {
			keys[j].Tag = tag
		}
	}
	if caching {
		tagKeys()
	}
	t := newTable(strs, len(keys))
	defer func() { t.release() }()
	if e != nil {
		// A resident index answers faster than a round trip to Redis: skip the result
		// caches, and fill Redis (in the background) for replicas that lack the index.
		vals := t.lookup(e.Index, keys, nil, caching)
		if caching {
			s.results.PutAsync(keys, vals)
		}
		t.emit(res, ok, slot)
		return res
	}
	missIdx := s.cached(ctx, t, keys)
	if len(missIdx) > 0 {
		if mod.GetResidentOnly() {
			return notResident(mod)
		}
		e, err := s.entry(ctx, rec, comps)
		if err != nil {
			return s.unavailable(ctx, mod, id, f, again, err)
		}
		if e.Index.Strings().Tag() != strs.Tag() {
			// The stored string table is not this index's (written by another version of
			// the index builder): answer from the index alone, under its own table, and
			// store that table for the next reads.
			s.opt.Logger.Warn("stored string table differs from the index's; replacing it", "object", f.StringsObjectOf(variant))
			s.meta.StoreStrings(ctx, f, variant, e.Index)
			s.strs.Remove(ixKey)
			t.release()
			strs = e.Index.Strings()
			tagKeys()
			t = newTable(strs, len(keys))
			missIdx = nil // every key
		}
		vals := t.lookup(e.Index, keys, missIdx, true)
		missKeys := keys
		if missIdx != nil {
			missKeys = make([]resultcache.Key, len(missIdx))
			for n, j := range missIdx {
				missKeys[n] = keys[j]
			}
		}
		s.results.PutAsync(missKeys, vals)
	}
	t.emit(res, ok, slot)
	return res
}

// notResident answers a resident_only module whose index this replica would have to load.
func notResident(mod *symbolizerv1.Module) *symbolizerv1.ModuleResult {
	return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_RESIDENT,
		"this replica holds no index of the binary and the result cache lacks some addresses; ask its owner")
}

// programHeaders returns the program headers that place the module's mapped addresses. When
// the record holds only a separate debug file, the executable is asked of the debuginfod
// upstreams (by GNU build ID) and the record read again. known is false when no executable
// could be had; a failure to ask is logged, and the module is answered as if none exists.
func (s *Service) programHeaders(ctx context.Context, rec *catalog.Record, id catalog.ID, mod *symbolizerv1.Module) (*catalog.Record, []addrmap.Load, bool) {
	if loads, ok := rec.Loads(); ok {
		return rec, loads, true
	}
	gnu := mod.GetGnuBuildId()
	if gnu == "" && rec.Current.IDs.GNU != "" {
		gnu = rec.Current.IDs.GNU
	}
	if gnu == "" || s.fetch == nil {
		return rec, nil, false
	}
	found, err := s.fetch.FetchExecutable(ctx, gnu)
	if err != nil {
		s.opt.Logger.Warn("fetch executable for program headers", "build_id", gnu, "err", err)
		return rec, nil, false
	}
	if !found {
		return rec, nil, false
	}
	s.Forget()
	again, err := s.resolve(ctx, id)
	if err != nil {
		return rec, nil, false
	}
	loads, ok := again.Loads()
	return again, loads, ok
}

// unavailable is the answer for a module whose index (or string table) could not be had.
// unavailable answers a module whose record was found but whose objects could not be read.
// An object that is gone may have been deleted (by hand, or by retention) after the record
// was read: when the ID now resolves to nothing, the module is answered as not found, never
// with half of a deleted record; when it resolves to another file (deleted, then uploaded
// again), the module is answered once more from that one.
func (s *Service) unavailable(ctx context.Context, mod *symbolizerv1.Module, id catalog.ID, f *catalog.File, again bool, err error) *symbolizerv1.ModuleResult {
	if errors.Is(err, store.ErrNotExist) && ctx.Err() == nil {
		rec, rerr := s.meta.Resolve(ctx, id)
		switch {
		case errors.Is(rerr, catalog.ErrNotFound):
			s.Forget()
			return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND, "no debuginfo stored under any of the module's IDs (deleted while it was read)")
		case rerr == nil && rec.Current.SHA256 != f.SHA256 && !again:
			s.Forget()
			return s.moduleTry(ctx, mod, true)
		}
	}
	return unavailable(ctx, mod, err)
}

func unavailable(ctx context.Context, mod *symbolizerv1.Module, err error) *symbolizerv1.ModuleResult {
	if errors.Is(err, errInvalid) {
		return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_DEBUGINFO, err.Error())
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_UNAVAILABLE,
			"not answered within the call's deadline (the binary's index goes on loading, or the store is slow): retry shortly")
	}
	if ctx.Err() != nil {
		return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_UNAVAILABLE, ctx.Err().Error())
	}
	return failed(mod, symbolizerv1.ModuleStatus_MODULE_STATUS_UNAVAILABLE, publicReason(err))
}

// publicReason is what a caller is told of a failure: a failure of the store's backend is
// named as such, without the backend's own words (its endpoint, bucket, object keys or
// folder), which the server logs.
func publicReason(err error) string {
	var be *store.BackendError
	if errors.As(err, &be) {
		return fmt.Sprintf("%v (%s); retry later", store.ErrUnavailable, be.Op)
	}
	return err.Error()
}

// stringTable returns the string table of the file's index for reading cached results: a
// small object of its own in the store (a quarter to a third of the index), so that a replica
// without the index in memory need not load the index to read Redis. Without that object (a
// store written before it existed, or a corrupt one), the index is loaded, and its table
// stored. The table of an index in memory is the index's own: the cache of string tables
// never holds a copy of it (an index kept drops its table from that cache, see
// indexcache.Cache.Supersede).
func (s *Service) stringTable(ctx context.Context, rec *catalog.Record, comps catalog.Companions) (*index.StringTable, error) {
	f := rec.Current
	variant := comps.Variant()
	key := f.SHA256 + variant
	if ie := s.indexes.Get(key); ie != nil {
		return ie.Index.Strings(), nil
	}
	e, _, err := s.strs.GetOrLoad(ctx, key, func(ctx context.Context) (*indexcache.Entry, error) {
		st, err := s.loadStrings(ctx, f, variant)
		if err == nil {
			return &indexcache.Entry{Strings: st, Bytes: st.Bytes()}, nil
		}
		if !errors.Is(err, store.ErrNotExist) {
			s.opt.Logger.Warn("stored string table unusable; taking the index's", "object", f.StringsObjectOf(variant), "err", err)
		}
		ie, err := s.entry(ctx, rec, comps)
		if err != nil {
			return nil, err
		}
		s.meta.StoreStrings(ctx, f, variant, ie.Index)
		st = ie.Index.Strings()
		return &indexcache.Entry{Strings: st, Bytes: st.Bytes()}, nil
	})
	if err != nil {
		return nil, err
	}
	// The index was kept while the table loaded (by this load's fallback, another request
	// or an upload): the table just cached is a copy of the index's.
	if s.indexes.Get(key) != nil {
		s.strs.Remove(key)
	}
	return e.Strings, nil
}

func (s *Service) loadStrings(ctx context.Context, f *catalog.File, variant string) (*index.StringTable, error) {
	b, _, err := s.readObject(ctx, f.StringsObjectOf(variant))
	if err != nil {
		return nil, err
	}
	return index.UnmarshalStrings(b)
}

// readObject reads a whole stored object. opened says whether the object could be opened
// (an absent one wraps store.ErrNotExist), so an error is known to come from reading it.
func (s *Service) readObject(ctx context.Context, key string) (data []byte, opened bool, err error) {
	rc, size, err := s.meta.Store().Open(ctx, key)
	if err != nil {
		return nil, false, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	buf.Grow(int(min(size, 1<<30)))
	if _, err := io.Copy(&buf, io.LimitReader(rc, size)); err != nil {
		return nil, true, fmt.Errorf("read %s: %w", key, err)
	}
	return buf.Bytes(), true, nil
}

// fetchChunk is how many addresses one result cache read asks for, and fetchParallel how
// many reads of one batch may be in flight: Redis works on one read while this process sends
// the next and parses the answer of the previous one. More reads in flight did not help:
// Redis answers the reads it has in hand together, so each of three comes back later than
// each of two, and every read costs Redis a round of system calls.
const (
	fetchChunk    = 2048
	fetchParallel = 2
)

// cached adds the frames of every key the result caches hold to t and returns the indices of
// the other keys. keys are in ascending address order, so each read covers a narrow range of
// addresses, which Redis keeps in few hashes.
func (s *Service) cached(ctx context.Context, t *table, keys []resultcache.Key) []int {
	vals, found := make([]string, len(keys)), make([]bool, len(keys))
	type span struct{ start, end int }
	done := make(chan span, (len(keys)+fetchChunk-1)/fetchChunk)
	go func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, fetchParallel)
		for start := 0; start < len(keys); start += fetchChunk {
			end := min(len(keys), start+fetchChunk)
			sem <- struct{}{}
			wg.Go(func() {
				s.results.Get(ctx, keys[start:end], vals[start:end], found[start:end])
				<-sem
				done <- span{start, end}
			})
		}
		wg.Wait()
		close(done)
	}()
	var miss []int
	for sp := range done {
		for j := sp.start; j < sp.end; j++ {
			if !found[j] {
				miss = append(miss, j)
				continue
			}
			// A value that does not parse is a miss: the index answers instead.
			if err := t.addValue(j, vals[j]); err != nil {
				s.opt.Logger.Warn("unusable result cache entry", "build_id", keys[j].BuildID, "address", keys[j].Addr, "err", err)
				miss = append(miss, j)
			}
		}
		t.internPending()
	}
	// The index answers the misses in address order too.
	slices.Sort(miss)
	return miss
}

func (s *Service) countIndex(hit bool) {
	if s.m == nil {
		return
	}
	if hit {
		s.m.CacheResult("index", 1, 0)
	} else {
		s.m.CacheResult("index", 0, 1)
	}
}

func fidelity(f index.Fidelity) symbolizerv1.Fidelity {
	switch f {
	case index.FidelitySymbols:
		return symbolizerv1.Fidelity_FIDELITY_SYMBOLS
	case index.FidelityLines:
		return symbolizerv1.Fidelity_FIDELITY_LINES
	case index.FidelityFullInlines:
		return symbolizerv1.Fidelity_FIDELITY_FULL
	}
	return symbolizerv1.Fidelity_FIDELITY_UNSPECIFIED
}

// find resolves the module's IDs in the order GNU, Go, htlhash, then asks debuginfod for the
// GNU build ID.
func (s *Service) find(ctx context.Context, mod *symbolizerv1.Module) (_ *catalog.Record, _ catalog.ID, _ symbolizerv1.ModuleStatus, _ string, arriving bool) {
	var ids []catalog.ID
	if v := mod.GetGnuBuildId(); v != "" {
		ids = append(ids, catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: v})
	}
	if v := mod.GetGoBuildId(); v != "" {
		ids = append(ids, catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GO, ID: v})
	}
	if v := mod.GetHtlhash(); v != "" {
		ids = append(ids, catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH, ID: v})
	}
	var storeErr error
	for _, id := range ids {
		rec, up, err := s.resolveArriving(ctx, id)
		if err == nil {
			return rec, id, symbolizerv1.ModuleStatus_MODULE_STATUS_OK, "", false
		}
		arriving = arriving || up
		if !errors.Is(err, catalog.ErrNotFound) {
			storeErr = err
		}
	}
	if storeErr != nil {
		s.opt.Logger.Warn("store lookup failed", "filename", mod.GetFilename(), "err", storeErr)
		return nil, catalog.ID{}, symbolizerv1.ModuleStatus_MODULE_STATUS_UNAVAILABLE, publicReason(storeErr), false
	}
	if gnu := mod.GetGnuBuildId(); gnu != "" && s.fetch != nil {
		found, err := s.fetch.Fetch(ctx, gnu)
		if err != nil {
			return nil, catalog.ID{}, symbolizerv1.ModuleStatus_MODULE_STATUS_UNAVAILABLE, err.Error(), false
		}
		if found {
			s.Forget()
			id := catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: gnu}
			if rec, err := s.resolve(ctx, id); err == nil {
				return rec, id, symbolizerv1.ModuleStatus_MODULE_STATUS_OK, "", false
			}
		}
	}
	return nil, catalog.ID{}, symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND, "no debuginfo stored under any of the module's IDs", arriving
}

func (s *Service) resolve(ctx context.Context, id catalog.ID) (*catalog.Record, error) {
	rec, _, err := s.resolveArriving(ctx, id)
	return rec, err
}

// resolveArriving is resolve, and for an ID not found whether an upload of it is under way.
func (s *Service) resolveArriving(ctx context.Context, id catalog.ID) (*catalog.Record, bool, error) {
	now := time.Now()
	s.mu.Lock()
	r, ok := s.resolved[id]
	s.mu.Unlock()
	if ok && now.Before(r.until) {
		if r.rec == nil {
			return nil, r.arriving, catalog.ErrNotFound
		}
		return r.rec, false, nil
	}
	rec, err := s.meta.Resolve(ctx, id)
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return nil, false, err
	}
	ttl := s.opt.ResolveTTL
	arriving := false
	if rec == nil {
		ttl /= 5 // a missing file may be uploaded any moment
		// Whether it is being uploaded right now: a caller that can wait asks again soon.
		// A store that cannot tell is taken as no upload.
		if a, aerr := s.meta.Arriving(ctx, id); aerr == nil {
			arriving = a
		}
	}
	s.mu.Lock()
	if len(s.resolved) > 100000 {
		s.resolved = map[catalog.ID]resolved{}
	}
	s.resolved[id] = resolved{rec: rec, arriving: arriving, until: now.Add(ttl)}
	s.mu.Unlock()
	return rec, arriving, err
}

var errInvalid = errors.New("invalid debuginfo")

// entry returns the file's index: memory, else the stored serialized index, else built from
// the file (and then stored).
func (s *Service) entry(ctx context.Context, rec *catalog.Record, comps catalog.Companions) (_ *indexcache.Entry, err error) {
	f := rec.Current
	variant := comps.Variant()
	ctx, span := startIndexSpan(ctx, "index", f, variant)
	defer func() { tracing.End(span, err) }()
	e, hit, err := s.indexes.GetOrLoad(ctx, f.SHA256+variant, func(ctx context.Context) (*indexcache.Entry, error) {
		return s.loadOrBuild(ctx, rec, comps)
	})
	s.countIndex(hit)
	span.SetAttributes(attribute.Bool("profsym.index.cache_hit", hit))
	if s.m != nil {
		used, _ := s.indexes.Used()
		s.m.IndexCacheSize.Set(float64(used))
	}
	return e, err
}

// loadOrBuild loads the stored index, else builds it. With BuildLocks, one replica builds
// while the others poll the store until the index lands; a builder that dies stops renewing
// its lock, which then expires, and the next replica to look takes the build over.
func (s *Service) loadOrBuild(ctx context.Context, rec *catalog.Record, comps catalog.Companions) (*indexcache.Entry, error) {
	f := rec.Current
	variant := comps.Variant()
	stored := func() *indexcache.Entry {
		if ix, err := s.loadStored(ctx, f, variant); err == nil {
			return &indexcache.Entry{Index: ix, Loads: f.Loads, Bytes: ix.Stats().Bytes}
		}
		return nil
	}
	if e := stored(); e != nil {
		return e, nil
	}
	if s.opt.BuildLocks == nil {
		return s.build(ctx, rec, comps)
	}
	// Per format version: a replica of another release builds another object.
	key := fmt.Sprintf("index/v%d/%s%s", index.FormatVersion, f.SHA256, variant)
	giveUp := time.Now().Add(s.opt.BuildWait)
	pause := 50 * time.Millisecond
	waited := false
	for {
		unlock, ok, err := s.opt.BuildLocks.TryLock(ctx, key)
		if err != nil {
			return s.build(ctx, rec, comps)
		}
		if ok {
			defer unlock()
			// The index may have landed between the last look and the lock.
			if e := stored(); e != nil {
				return e, nil
			}
			return s.build(ctx, rec, comps)
		}
		if !waited {
			waited = true
			if s.m != nil {
				s.m.IndexBuildWaits.Inc()
			}
			s.opt.Logger.Debug("another replica builds the index; waiting for it", "build_id", f.BuildID.String(), "companions", variant)
		}
		if time.Now().After(giveUp) {
			s.opt.Logger.Warn("another replica's index build outlasted the wait; building it here", "build_id", f.BuildID.String(), "waited", s.opt.BuildWait)
			return s.build(ctx, rec, comps)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(pause*2, time.Second)
		if e := stored(); e != nil {
			return e, nil
		}
	}
}

func (s *Service) loadStored(ctx context.Context, f *catalog.File, variant string) (_ *index.Index, err error) {
	ctx, span := startIndexSpan(ctx, "index.load", f, variant)
	defer func() { tracing.End(span, err) }()
	b, opened, err := s.readObject(ctx, f.IndexObjectOf(variant))
	if err != nil {
		if opened {
			s.countLoad("error")
		} else if errors.Is(err, store.ErrNotExist) {
			// Stored by a release before per-format keys: read when of this format.
			if ix := s.loadLegacy(ctx, f, variant); ix != nil {
				return ix, nil
			}
		}
		return nil, err
	}
	ix, err := index.Unmarshal(b)
	if err != nil {
		s.countLoad("error")
		s.opt.Logger.Warn("stored index unusable; rebuilding", "object", f.IndexObjectOf(variant), "err", err)
		return nil, err
	}
	s.countLoad("ok")
	return ix, nil
}

// loadLegacy reads the index a release before per-format keys stored for f, and adopts it
// (copies it to its per-format key) when it is of this build's format; nil otherwise (absent,
// or of another format: the caller builds its own, and leaves that one to its release).
func (s *Service) loadLegacy(ctx context.Context, f *catalog.File, variant string) *index.Index {
	b, _, err := s.readObject(ctx, f.LegacyIndexObjectOf(variant))
	if err != nil {
		return nil
	}
	ix, err := index.Unmarshal(b)
	if err != nil {
		s.opt.Logger.Debug("index of an earlier release not read", "object", f.LegacyIndexObjectOf(variant), "err", err)
		return nil
	}
	s.countLoad("ok")
	s.meta.AdoptIndex(ctx, f, variant, ix)
	return ix
}

func (s *Service) countLoad(result string) {
	if s.m != nil {
		s.m.IndexLoads.WithLabelValues(result).Inc()
	}
}

func (s *Service) build(ctx context.Context, rec *catalog.Record, comps catalog.Companions) (_ *indexcache.Entry, err error) {
	f := rec.Current
	ctx, span := startIndexSpan(ctx, "index.build", f, comps.Variant())
	defer func() { tracing.End(span, err) }()
	path, cleanup, err := store.LocalCopy(ctx, s.meta.Store(), f.Object, s.opt.TempDir)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", f.Object, err)
	}
	defer cleanup()
	// A companion that cannot be fetched now is a transient failure, not the file's fault.
	opts, cleanupComps, err := comps.Fetch(ctx, s.meta.Store(), s.opt.TempDir)
	if err != nil {
		return nil, err
	}
	defer cleanupComps()
	opts.Limits, opts.Workers = s.opt.Limits, s.opt.Workers
	start := time.Now()
	ix, info, err := debuginfo.OpenIndex(path, opts)
	if s.m != nil {
		s.m.IndexBuildTime.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		if s.m != nil {
			s.m.IndexBuilds.WithLabelValues("error").Inc()
		}
		msg := fmt.Sprintf("build index: %v", catalog.HidePath(err, path, f.Object))
		if merr := s.meta.MarkInvalid(ctx, rec.Key, f.SHA256, msg); merr != nil {
			s.opt.Logger.Warn("mark invalid", "record", rec.Key, "err", merr)
		}
		s.Forget()
		return nil, fmt.Errorf("%w: %s", errInvalid, msg)
	}
	if s.m != nil {
		s.m.IndexBuilds.WithLabelValues("ok").Inc()
	}
	span.SetAttributes(attribute.Int64("profsym.index.bytes", ix.Stats().Bytes))
	s.opt.Logger.Info("index built", "build_id", f.BuildID.String(), "companions", comps.Variant(), "fidelity", ix.Fidelity().String(), "took", time.Since(start), "bytes", ix.Stats().Bytes)
	s.meta.StoreIndex(ctx, f, comps.Variant(), ix)
	if v := comps.Variant(); v != f.QualityVariant {
		// The record's quality is that of other companions: Get and List read this one
		// rather than build the index again (see catalog.QualityWith).
		s.meta.StoreQuality(ctx, f, v, catalog.QualityOf(info, ix))
	}
	return &indexcache.Entry{Index: ix, Loads: f.Loads, Bytes: ix.Stats().Bytes}, nil
}

// companions returns what f's DWARF needs beside it, as stored now. A supplementary file
// the store lacks is asked of the debuginfod upstreams (which serve dwz files under their
// ID at /buildid/<ID>/debuginfo). The answer is kept for ResolveTTL, a fifth of it while
// something is missing, so a companion uploaded to another replica is read soon after.
func (s *Service) companions(ctx context.Context, f *catalog.File) (catalog.Companions, error) {
	if f.Supplementary == "" && f.SkeletonUnits == 0 {
		return catalog.Companions{}, nil
	}
	now := time.Now()
	s.mu.Lock()
	rc, ok := s.comps[f.SHA256]
	s.mu.Unlock()
	if ok && now.Before(rc.until) {
		return rc.c, nil
	}
	c, err := s.meta.Companions(ctx, f)
	if err != nil {
		return c, err
	}
	if c.SupplementaryID != "" && c.Supplementary == nil && s.fetch != nil {
		found, err := s.fetch.Fetch(ctx, c.SupplementaryID)
		switch {
		case err != nil:
			// Answer from what is stored; the upstream is asked again after the TTL.
			s.opt.Logger.Warn("fetch supplementary file", "id", c.SupplementaryID, "err", err)
		case found:
			if c, err = s.meta.Companions(ctx, f); err != nil {
				return c, err
			}
		}
	}
	ttl := s.opt.ResolveTTL
	if c.Missing() {
		ttl /= 5
	}
	s.mu.Lock()
	if len(s.comps) > 100000 {
		s.comps = map[string]resolvedCompanions{}
	}
	s.comps[f.SHA256] = resolvedCompanions{c, now.Add(ttl)}
	s.mu.Unlock()
	return c, nil
}
