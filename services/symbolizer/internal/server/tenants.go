package server

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"

	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/coverage"
	"github.com/profsym/profsym/services/symbolizer/internal/debuginfod"
	"github.com/profsym/profsym/services/symbolizer/internal/indexcache"
	"github.com/profsym/profsym/services/symbolizer/internal/resultcache"
	"github.com/profsym/profsym/services/symbolizer/internal/retention"
	"github.com/profsym/profsym/services/symbolizer/internal/symbolizeapi"
	"github.com/profsym/profsym/services/symbolizer/internal/tenant"
	"github.com/profsym/profsym/services/symbolizer/internal/ui"
	"github.com/profsym/profsym/services/symbolizer/internal/uploadapi"
)

// shared are the parts every tenant's stack uses. The memory caches are named by file
// content (SHA-256), reached only through a tenant's own record of the file; the result
// cache keeps each tenant's entries under the tenant's keys.
type shared struct {
	// replica names this server's usage days and coverage shards in every tenant's store.
	replica string
	policy  retention.Policy
	locks   *leaseLocks
	ix      *indexcache.Cache
	strs    *indexcache.Cache
	rc      *resultcache.Cache
	urls    []string
	gauges  map[string]func(bool)
}

// stack is one tenant's symbolizer: its view of the store, its records, usage, coverage,
// retention and quota, and the services and handlers that answer for it.
type stack struct {
	name      string
	meta      *catalog.Catalog
	usage     *retention.Usage
	coverage  *coverage.Recorder
	retention *retention.Sweeper
	sym       *symbolizeapi.Service
	up        *uploadapi.Service
	put       http.Handler
	buildid   http.Handler
	ui        http.Handler
}

// stack returns tenant name's stack, made (and started, when the server runs) on first use.
func (s *Server) stack(name string) (*stack, error) {
	s.stacksMu.RLock()
	st, ok := s.stacks[name]
	s.stacksMu.RUnlock()
	if ok {
		return st, nil
	}
	s.stacksMu.Lock()
	defer s.stacksMu.Unlock()
	if st, ok := s.stacks[name]; ok {
		return st, nil
	}
	st, err := s.newStack(name)
	if err != nil {
		return nil, err
	}
	if s.stacks == nil {
		s.stacks = map[string]*stack{}
	}
	s.stacks[name] = st
	if s.bgCtx != nil {
		s.runStack(s.bgCtx, st)
	}
	return st, nil
}

// addTenants makes a stack for every tenant the tenant tokens file names.
func (s *Server) addTenants() error {
	for _, name := range s.Tenants.Names() {
		if _, err := s.stack(name); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) newStack(name string) (*stack, error) {
	c, log, sh := s.cfg, s.log, s.shared
	st := &stack{name: name}
	reg := prometheus.Registerer(s.Metrics.Registry)
	if s.Tenants != nil {
		// With tenants, each tenant's gauges and counters carry its name.
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"tenant": tenant.Label(name)}, reg)
		log = log.With("tenant", tenant.Label(name))
	}
	view := tenant.Store(s.Store, name)
	inst := sh.replica
	st.usage = retention.NewUsage(view, retention.UsageOptions{Logger: log, Registerer: reg, Instance: inst})
	st.coverage = coverage.New(view, coverage.Options{MaxEntries: c.CoverageEntries, Registerer: reg, Logger: log, Instance: inst})
	st.meta = catalog.New(view, catalog.Options{
		MaxSize: c.MaxUpload, UploadTTL: c.UploadTTL, TempDir: c.TempDir, Logger: log,
		OnIndex: func(f *catalog.File, ins *catalog.Inspection) {
			if !c.HoldUploaded {
				return
			}
			sh.ix.Add(f.SHA256+ins.Companions.Variant(), &indexcache.Entry{Index: ins.Index, Loads: f.Loads, Bytes: ins.Index.Stats().Bytes})
		},
		Locker: sh.locks.catalog(name),
		Annotate: func(ctx context.Context, r *catalog.Record, d *debuginfov1.Debuginfo) {
			used, err := st.usage.Read(ctx)
			if err != nil {
				log.Warn("read usage", "err", err)
				return
			}
			if e, ok := used[r.Key]; ok {
				d.LastUsed = timestamppb.New(e.LastUsed())
				if d.Name == "" {
					d.Name = e.Name
				}
			}
		},
	})
	var fetch symbolizeapi.Fetcher
	if len(sh.urls) > 0 {
		fetch = debuginfod.NewClient(st.meta, debuginfod.ClientOptions{
			URLs: sh.urls, Timeout: c.DebuginfodTimeout, NegativeTTL: c.DebuginfodNegTTL,
			MaxParallel: c.DebuginfodParallel, BreakerFailures: c.DebuginfodBreaker, BreakerOpen: c.DebuginfodOpen, MaxSize: int64(min(c.MaxUpload, 1<<62)), TempDir: c.TempDir,
			Logger: log, Count: s.Metrics.DebuginfodFetch,
			OnDegraded: func(upstream string, down bool) {
				if g := sh.gauges[upstream]; g != nil {
					g(down)
				}
			},
		})
	}
	st.sym = symbolizeapi.New(st.meta, sh.ix, sh.rc, fetch, s.Metrics, symbolizeapi.Options{
		MaxModules: c.MaxModules, MaxAddresses: c.MaxAddresses, TempDir: c.TempDir, Logger: log,
		StringsCacheBytes: c.StringsBytes, Strings: sh.strs, Observe: st.coverage.Record, BuildLocks: sh.locks.builds(name),
		Used: st.usage.Use, Tenant: name,
	})
	st.retention = retention.NewSweeper(st.meta, st.usage, retention.SweeperOptions{
		Policy: sh.policy, DryRun: c.RetentionDryRun, Locks: sh.locks.sweeps(name), Logger: log,
		Registerer: reg, Deleted: st.sym.Forget,
	})
	st.up = uploadapi.New(st.meta, s.Metrics, log)
	st.up.PublicURL = c.PublicURL
	st.up.Changed = st.sym.Forget
	st.up.Coverage = st.coverage
	if s.Tenants != nil {
		if name != "" {
			lim := &tenant.Limiter{Tenant: name, Quota: func() tenant.Quota { return s.Tenants.Quota(name) }, Tally: st.meta.Tally}
			st.up.Admit = lim.Admit
		}
		// Tokens were checked, and the tenant found, by s.access before these are reached.
		st.put = st.up.PutHandler(nil)
		st.buildid = debuginfod.Handler(st.meta, nil, log, st.usage.Use)
		st.ui = ui.Handler(st.coverage, st.meta, nil, log)
	}
	return st, nil
}

// runStack starts st's background work: the sweep of abandoned uploads, retention (whose
// first sweep writes the usage record's start), and the usage and coverage writers, whose last
// writes happen when ctx ends. s.bg waits for all of them, so nothing writes to the store
// after the server stopped.
func (s *Server) runStack(ctx context.Context, st *stack) {
	s.bg.Add(4)
	go func() {
		defer s.bg.Done()
		s.sweep(ctx, st.meta)
	}()
	go func() {
		defer s.bg.Done()
		st.retention.Run(ctx, s.cfg.RetentionInterval)
	}()
	go func() {
		defer s.bg.Done()
		st.usage.Run(ctx, s.cfg.UsageInterval)
	}()
	go func() {
		defer s.bg.Done()
		st.coverage.Run(ctx, s.cfg.CoverageInterval)
	}()
}

// startStacks starts every stack's background work under ctx, and that of stacks made later.
func (s *Server) startStacks(ctx context.Context) {
	s.stacksMu.Lock()
	defer s.stacksMu.Unlock()
	s.bgCtx = ctx
	for _, st := range s.stacks {
		s.runStack(ctx, st)
	}
}

// of returns the stack of the tenant in ctx (put there by tenant.Access).
func (s *Server) of(ctx context.Context) (*stack, error) {
	st, err := s.stack(tenant.From(ctx))
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("tenant %s: %w", tenant.Label(tenant.From(ctx)), err))
	}
	return st, nil
}

// byTenant serves each request with the handler of its tenant's stack.
func (s *Server) byTenant(h func(*stack) http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := s.of(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h(st).ServeHTTP(w, r)
	})
}

// symbolizeByTenant answers Symbolize with the caller's tenant's service.
type symbolizeByTenant struct{ s *Server }

func (t symbolizeByTenant) Symbolize(ctx context.Context, req *connect.Request[symbolizerv1.SymbolizeRequest]) (*connect.Response[symbolizerv1.SymbolizeResponse], error) {
	st, err := t.s.of(ctx)
	if err != nil {
		return nil, err
	}
	return st.sym.Symbolize(ctx, req)
}

// debuginfoByTenant answers DebuginfoService with the caller's tenant's service.
type debuginfoByTenant struct{ s *Server }

var _ debuginfov1connect.DebuginfoServiceHandler = debuginfoByTenant{}

// forTenant calls method of the caller's tenant's upload service.
func forTenant[Req, Resp any](t debuginfoByTenant, ctx context.Context, req *connect.Request[Req],
	method func(*uploadapi.Service, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
) (*connect.Response[Resp], error) {
	st, err := t.s.of(ctx)
	if err != nil {
		return nil, err
	}
	return method(st.up, ctx, req)
}

func (t debuginfoByTenant) ShouldUpload(ctx context.Context, req *connect.Request[debuginfov1.ShouldUploadRequest]) (*connect.Response[debuginfov1.ShouldUploadResponse], error) {
	return forTenant(t, ctx, req, (*uploadapi.Service).ShouldUpload)
}

func (t debuginfoByTenant) InitiateUpload(ctx context.Context, req *connect.Request[debuginfov1.InitiateUploadRequest]) (*connect.Response[debuginfov1.InitiateUploadResponse], error) {
	return forTenant(t, ctx, req, (*uploadapi.Service).InitiateUpload)
}

func (t debuginfoByTenant) FinishUpload(ctx context.Context, req *connect.Request[debuginfov1.FinishUploadRequest]) (*connect.Response[debuginfov1.FinishUploadResponse], error) {
	return forTenant(t, ctx, req, (*uploadapi.Service).FinishUpload)
}

func (t debuginfoByTenant) Get(ctx context.Context, req *connect.Request[debuginfov1.GetRequest]) (*connect.Response[debuginfov1.GetResponse], error) {
	return forTenant(t, ctx, req, (*uploadapi.Service).Get)
}

func (t debuginfoByTenant) List(ctx context.Context, req *connect.Request[debuginfov1.ListRequest]) (*connect.Response[debuginfov1.ListResponse], error) {
	return forTenant(t, ctx, req, (*uploadapi.Service).List)
}

func (t debuginfoByTenant) Delete(ctx context.Context, req *connect.Request[debuginfov1.DeleteRequest]) (*connect.Response[debuginfov1.DeleteResponse], error) {
	return forTenant(t, ctx, req, (*uploadapi.Service).Delete)
}

func (t debuginfoByTenant) ListCoverage(ctx context.Context, req *connect.Request[debuginfov1.ListCoverageRequest]) (*connect.Response[debuginfov1.ListCoverageResponse], error) {
	return forTenant(t, ctx, req, (*uploadapi.Service).ListCoverage)
}

// tenantsReload re-reads the tenant tokens file and makes stacks for tenants it now names.
func (s *Server) tenantsReload() {
	if s.Tenants == nil {
		return
	}
	if err := s.Tenants.Reload(); err != nil {
		s.log.Error("reload tenant tokens", "err", err)
		return
	}
	if err := s.addTenants(); err != nil {
		s.log.Error("start new tenants", "err", err)
		return
	}
	s.log.Info("tenant tokens reloaded", "tenants", len(s.Tenants.Names()))
}
