// Package affinity sends each module of a Symbolize request to the symbolizer replica that
// owns its build ID, so that an index is loaded (or built) by one replica of a deployment and
// its results are read from that replica's memory, not from every replica's.
//
// Ownership is rendezvous hashing (highest random weight) of the module's build ID over the
// replicas' addresses: every client that sees the same replicas picks the same owner, and a
// replica that goes away moves only its own build IDs, each to its next owner. The addresses
// come from DNS (a headless Service answers with every ready pod) refreshed at an interval, or
// from a static list. A request is split per owner; a part whose owner refuses, times out or
// cannot be reached goes to the next owner of each of its modules, and the failed replica is
// skipped for a while. A bound on in-flight calls per replica (consistent hashing with
// bounded loads: at most BalanceFactor times the mean) keeps one hot build ID from queueing
// everything behind one replica: past the bound, a module goes to its next owner marked
// resident_only, so that the next owner answers it only from memory or the shared result
// cache and never loads a second copy of the index; a module it cannot answer so comes back
// NOT_RESIDENT and goes to its owner regardless of the bound. A replica that times out is taken
// as busy, not gone: its modules go to their next owners resident only too, for EjectFor, and
// are answered UNAVAILABLE (passed on unsymbolized, asked again with the next export) when the
// next owner holds nothing of them; only a replica that refuses, cannot be reached, leaves
// DNS, or has answered nothing for GiveUpAfter has its indexes loaded elsewhere. An index is
// then held by one replica, and by two only while its owner is failing.
package affinity

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
)

// Config configures a Router.
type Config struct {
	// Scheme is "http" or "https", for the replicas' base URLs.
	Scheme string
	// DNS is host:port of a name whose A/AAAA records are the replicas (a headless Service).
	DNS string
	// Static lists the replicas' host:port instead of DNS.
	Static []string
	// Refresh is how often DNS is asked again (default 10s).
	Refresh time.Duration
	// AttemptTimeout bounds the call to one replica, so a hung owner leaves time for the next
	// (default 1s).
	AttemptTimeout time.Duration
	// BalanceFactor bounds a replica's in-flight calls to this multiple of the mean over the
	// replicas (default 1.25); 0 or less turns the bound off. Must be above 1 otherwise.
	BalanceFactor float64
	// EjectFor is how long a replica that failed a call is passed over (default 10s).
	EjectFor time.Duration
	// GiveUpAfter is how long a replica may go on timing out, answering nothing, before
	// its modules are loaded by their next owners instead of asked of them resident only
	// (default 30s).
	GiveUpAfter time.Duration
	// Pin, when set, is hashed for every module instead of its build ID: the whole client goes
	// to one replica (the next one when it fails), as a client of a Kubernetes Service does
	// over its long-lived connection. It is the behaviour without affinity, for comparisons.
	Pin string
	// NewClient returns the client of one replica at baseURL.
	NewClient func(baseURL string) symbolizerv1connect.SymbolizerServiceClient
	// Lookup resolves a host to addresses (default net.DefaultResolver.LookupHost).
	Lookup func(ctx context.Context, host string) ([]string, error)
	Logger *slog.Logger
}

// Router is a SymbolizerServiceClient over a set of replicas.
type Router struct {
	cfg  Config
	host string // of DNS
	port string

	mu       sync.Mutex
	replicas []*replica // sorted by address
	resolved chan struct{}
	once     sync.Once

	stop chan struct{}
	done chan struct{}
}

type replica struct {
	addr     string
	client   symbolizerv1connect.SymbolizerServiceClient
	inflight atomic.Int64
	// downUntil is when an ejected replica is asked again (unix nanoseconds).
	downUntil atomic.Int64
	// slowUntil is when a replica that timed out is asked first again; until then its
	// modules go to their next owners resident only (unix nanoseconds).
	slowUntil atomic.Int64
	// lastOK is when the replica last answered a call (unix nanoseconds; its creation at
	// first).
	lastOK atomic.Int64

	calls, modules, failures, failedModules, spills, spillsRefused atomic.Int64
}

// New returns a Router; Start begins resolving.
func New(cfg Config) (*Router, error) {
	if cfg.Scheme != "http" && cfg.Scheme != "https" {
		return nil, fmt.Errorf("affinity: scheme %q, want http or https", cfg.Scheme)
	}
	if (cfg.DNS == "") == (len(cfg.Static) == 0) {
		return nil, errors.New("affinity: set either a DNS name or a static list of replicas")
	}
	if cfg.BalanceFactor > 0 && cfg.BalanceFactor <= 1 {
		return nil, fmt.Errorf("affinity: balance factor %v must be above 1 (or 0 for no bound)", cfg.BalanceFactor)
	}
	if cfg.NewClient == nil {
		return nil, errors.New("affinity: NewClient is required")
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 10 * time.Second
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = time.Second
	}
	if cfg.EjectFor <= 0 {
		cfg.EjectFor = 10 * time.Second
	}
	if cfg.GiveUpAfter <= 0 {
		cfg.GiveUpAfter = 30 * time.Second
	}
	if cfg.Lookup == nil {
		cfg.Lookup = net.DefaultResolver.LookupHost
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Router{cfg: cfg, resolved: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.DNS != "" {
		var err error
		if r.host, r.port, err = net.SplitHostPort(cfg.DNS); err != nil {
			return nil, fmt.Errorf("affinity: dns %q: want host:port: %w", cfg.DNS, err)
		}
	}
	for _, a := range cfg.Static {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("affinity: replica %q: want host:port: %w", a, err)
		}
	}
	return r, nil
}

// Start resolves the replicas and keeps them fresh until Close. It does not wait for DNS: a
// call made before the first answer waits for it (within its own deadline).
func (r *Router) Start() {
	if len(r.cfg.Static) > 0 {
		r.set(r.cfg.Static)
		close(r.done)
		return
	}
	go func() {
		defer close(r.done)
		t := time.NewTicker(r.cfg.Refresh)
		defer t.Stop()
		for {
			r.resolve()
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// Close stops the DNS refresh.
func (r *Router) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

func (r *Router) resolve() {
	ctx, cancel := context.WithTimeout(context.Background(), max(r.cfg.Refresh, 5*time.Second))
	defer cancel()
	ips, err := r.cfg.Lookup(ctx, r.host)
	if err != nil || len(ips) == 0 {
		// Keep the replicas last seen: a DNS hiccup is not every replica leaving.
		r.cfg.Logger.Warn("resolve symbolizer replicas; keeping the last known", "name", r.host, "err", err)
		return
	}
	addrs := make([]string, len(ips))
	for i, ip := range ips {
		addrs[i] = net.JoinHostPort(ip, r.port)
	}
	r.set(addrs)
}

// set replaces the replicas, keeping the state of those that stay.
func (r *Router) set(addrs []string) {
	addrs = slices.Clone(addrs)
	sort.Strings(addrs)
	addrs = slices.Compact(addrs)
	r.mu.Lock()
	old := map[string]*replica{}
	for _, rp := range r.replicas {
		old[rp.addr] = rp
	}
	next := make([]*replica, 0, len(addrs))
	changed := len(addrs) != len(r.replicas)
	for _, a := range addrs {
		rp := old[a]
		if rp == nil {
			changed = true
			rp = &replica{addr: a, client: r.cfg.NewClient(r.cfg.Scheme + "://" + a)}
			rp.lastOK.Store(time.Now().UnixNano())
		}
		next = append(next, rp)
	}
	r.replicas = next
	r.mu.Unlock()
	if changed {
		r.cfg.Logger.Info("symbolizer replicas", "replicas", addrs)
	}
	select {
	case <-r.resolved:
	default:
		close(r.resolved)
	}
}

// Replicas returns the replicas' addresses, sorted.
func (r *Router) Replicas() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.replicas))
	for i, rp := range r.replicas {
		out[i] = rp.addr
	}
	return out
}

// Stats is what one replica was asked.
type Stats struct {
	Calls, Modules, Failures int64
	// FailedModules counts the modules of failed calls, each then sent to its next owner.
	FailedModules int64
	// Spills counts modules sent to this replica past their owner's load bound (resident
	// only); SpillsRefused those it answered NOT_RESIDENT, which then went to their owner.
	Spills, SpillsRefused int64
}

// Stats returns per replica address what it was asked since it was first resolved.
func (r *Router) Stats() map[string]Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]Stats{}
	for _, rp := range r.replicas {
		out[rp.addr] = Stats{rp.calls.Load(), rp.modules.Load(), rp.failures.Load(), rp.failedModules.Load(), rp.spills.Load(), rp.spillsRefused.Load()}
	}
	return out
}

// Key is what ownership hashes: a module's GNU build ID, else its Go build ID, else its
// htlhash. Every client picks the same one, so one binary has one owner.
func Key(m *symbolizerv1.Module) string {
	switch {
	case m.GetGnuBuildId() != "":
		return "gnu:" + m.GetGnuBuildId()
	case m.GetGoBuildId() != "":
		return "go:" + m.GetGoBuildId()
	default:
		return "htl:" + m.GetHtlhash()
	}
}

// score is the rendezvous weight of key on a replica: FNV-1a of both, through a 64-bit
// finalizer so that close addresses give unrelated weights.
func score(key, addr string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(addr))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Owners returns the replicas in the order they own key: the first is the owner.
func Owners(key string, addrs []string) []string {
	out := slices.Clone(addrs)
	sort.SliceStable(out, func(i, j int) bool { return score(key, out[i]) > score(key, out[j]) })
	return out
}

func rank(key string, reps []*replica) []*replica {
	out := slices.Clone(reps)
	sort.SliceStable(out, func(i, j int) bool { return score(key, out[i].addr) > score(key, out[j].addr) })
	return out
}

// modState is what one call knows of one of its modules.
type modState struct {
	ranked []*replica
	tried  map[*replica]bool
	// timedOut holds the replicas whose call with this module passed the attempt timeout.
	timedOut map[*replica]bool
	// owed is set when a replica answered the module NOT_RESIDENT after it was sent past a
	// busy owner: it goes to its owner, whatever the owner's load.
	owed bool
}

// pick returns the replica a module goes to in this round: the first of its ranked replicas
// not tried yet and not ejected that either already takes a part of this round (the module
// joins it) or has room under the load bound (its in-flight count is taken here, atomically,
// so callers at once cannot all pass the bound). When every untried replica is ejected or
// full, the first untried one: a replica passed over is better than none. spilled is true when
// a live replica ahead of the one picked was passed over for being busy (over the bound,
// recently timed out, or timed out on this module in this call): the module then goes resident
// only.
func (r *Router) pick(st *modState, round map[*replica]*part, bound int64, now int64) (picked *replica, spilled bool) {
	var fallback *replica
	for _, rp := range st.ranked {
		if st.tried[rp] {
			spilled = spilled || st.timedOut[rp]
			continue
		}
		if _, ok := round[rp]; ok {
			return rp, spilled
		}
		if fallback == nil {
			fallback = rp
		}
		if rp.downUntil.Load() > now || r.gone(rp, now) {
			continue
		}
		if !st.owed && rp.slowUntil.Load() > now {
			spilled = true
			continue
		}
		if st.owed {
			rp.inflight.Add(1)
			return rp, spilled
		}
		if rp.reserve(bound) {
			return rp, spilled
		}
		spilled = true
	}
	if fallback != nil {
		fallback.inflight.Add(1)
	}
	return fallback, false
}

// gone reports whether a replica that keeps timing out has answered nothing for GiveUpAfter:
// it is then passed over like one that refuses, and its modules are loaded by their next
// owners.
func (r *Router) gone(rp *replica, now int64) bool {
	return rp.slowUntil.Load() > now && now-rp.lastOK.Load() > int64(r.cfg.GiveUpAfter)
}

// reserve counts one more call in flight unless that would pass bound (0: no bound).
func (rp *replica) reserve(bound int64) bool {
	for {
		v := rp.inflight.Load()
		if bound > 0 && v >= bound {
			return false
		}
		if rp.inflight.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// bound is the most in-flight calls a replica may have before a new one goes elsewhere.
func (r *Router) bound(reps []*replica) int64 {
	if r.cfg.BalanceFactor <= 0 || len(reps) < 2 {
		return 0
	}
	var total int64
	for _, rp := range reps {
		total += rp.inflight.Load()
	}
	return int64(math.Ceil(r.cfg.BalanceFactor * float64(total+1) / float64(len(reps))))
}

// retryable reports whether a call that failed this way may succeed on another replica.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false // the caller's own deadline: no time for another replica
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeResourceExhausted, connect.CodeDeadlineExceeded,
		connect.CodeUnknown, connect.CodeInternal, connect.CodeAborted, connect.CodeCanceled:
		return true
	}
	return false
}

type part struct {
	idx   []int  // of the request's modules
	spill []bool // of each of idx: sent resident only
}

// Symbolize splits the request per owner, calls the owners at once, and merges the answers in
// the request's order. A part whose replica fails goes to the next owner of its modules.
func (r *Router) Symbolize(ctx context.Context, req *connect.Request[symbolizerv1.SymbolizeRequest]) (*connect.Response[symbolizerv1.SymbolizeResponse], error) {
	select {
	case <-r.resolved:
	case <-ctx.Done():
		// Not wrapped: no replica to ask is the symbolizer down, not a busy one that ran out of
		// time, so the caller passes the data on instead of holding it for a retry.
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no symbolizer replica resolved before the call ended"))
	}
	r.mu.Lock()
	reps := r.replicas
	r.mu.Unlock()
	if len(reps) == 0 {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no symbolizer replica known"))
	}
	// Header builds its map on first use: taken here, before the calls read it at once.
	hdr := req.Header()
	mods := req.Msg.GetModules()
	states := make([]modState, len(mods))
	for i, m := range mods {
		key := r.cfg.Pin
		if key == "" {
			key = Key(m)
		}
		states[i] = modState{ranked: rank(key, reps), tried: map[*replica]bool{}, timedOut: map[*replica]bool{}}
	}
	out := make([]*symbolizerv1.ModuleResult, len(mods))
	pending := make([]int, len(mods))
	for i := range pending {
		pending[i] = i
	}
	var lastErr error
	for len(pending) > 0 {
		// Group the pending modules by the replica each goes to now.
		now := time.Now().UnixNano()
		bound := r.bound(reps)
		groups := map[*replica]*part{}
		var order []*replica
		for _, i := range pending {
			rp, spilled := r.pick(&states[i], groups, bound, now)
			if rp == nil {
				for _, taken := range order {
					taken.inflight.Add(-1)
				}
				if lastErr == nil {
					lastErr = errors.New("every replica was tried")
				}
				return nil, lastErr
			}
			states[i].tried[rp] = true
			g := groups[rp]
			if g == nil {
				g = &part{}
				groups[rp] = g
				order = append(order, rp)
			}
			g.idx = append(g.idx, i)
			g.spill = append(g.spill, spilled)
		}
		type result struct {
			rp   *replica
			p    *part
			resp *symbolizerv1.SymbolizeResponse
			err  error
		}
		results := make(chan result, len(order))
		for _, rp := range order {
			p := groups[rp]
			go func() {
				defer rp.inflight.Add(-1)
				resp, err := r.call(ctx, rp, req, hdr, p)
				results <- result{rp, p, resp, err}
			}()
		}
		pending = pending[:0]
		var fatal error
		for range order {
			res := <-results
			if fatal != nil {
				continue // drained, so no call outlives Symbolize
			}
			if res.err != nil {
				res.rp.failures.Add(1)
				res.rp.failedModules.Add(int64(len(res.p.idx)))
				if !retryable(ctx, res.err) {
					fatal = res.err
					continue
				}
				lastErr = res.err
				pending = append(pending, res.p.idx...)
				if connect.CodeOf(res.err) == connect.CodeDeadlineExceeded {
					// Busy or hung: its modules go to their next owners resident only.
					res.rp.slowUntil.Store(time.Now().Add(r.cfg.EjectFor).UnixNano())
					for _, i := range res.p.idx {
						states[i].timedOut[res.rp] = true
					}
					r.cfg.Logger.Warn("symbolizer replica timed out; its modules go to their next owners, answered from what those hold",
						"replica", res.rp.addr, "modules", len(res.p.idx), "attempt_timeout", r.cfg.AttemptTimeout, "for", r.cfg.EjectFor)
					continue
				}
				res.rp.downUntil.Store(time.Now().Add(r.cfg.EjectFor).UnixNano())
				r.cfg.Logger.Warn("symbolizer replica failed; its modules go to their next owners",
					"replica", res.rp.addr, "modules", len(res.p.idx), "err", res.err, "passed_over_for", r.cfg.EjectFor)
				continue
			}
			res.rp.lastOK.Store(time.Now().UnixNano())
			for k, i := range res.p.idx {
				m := res.resp.GetModules()[k]
				if res.p.spill[k] && m.GetStatus() == symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_RESIDENT {
					res.rp.spillsRefused.Add(1)
					st := &states[i]
					if len(st.timedOut) > 0 {
						// Its owner timed out on it in this call: no replica loads a second
						// copy for one slow answer; the next export asks again.
						out[i] = &symbolizerv1.ModuleResult{Status: symbolizerv1.ModuleStatus_MODULE_STATUS_UNAVAILABLE,
							Message: "its owner replica timed out and the next holds no index of it; retry"}
						continue
					}
					st.owed = true
					pending = append(pending, i)
					continue
				}
				out[i] = m
			}
		}
		if fatal != nil {
			return nil, fatal
		}
	}
	return connect.NewResponse(&symbolizerv1.SymbolizeResponse{Modules: out}), nil
}

func (r *Router) call(ctx context.Context, rp *replica, req *connect.Request[symbolizerv1.SymbolizeRequest], hdr http.Header, p *part) (*symbolizerv1.SymbolizeResponse, error) {
	sub := &symbolizerv1.SymbolizeRequest{Modules: make([]*symbolizerv1.Module, len(p.idx))}
	for k, i := range p.idx {
		m := req.Msg.GetModules()[i]
		if p.spill[k] && !m.GetResidentOnly() {
			m = proto.CloneOf(m)
			m.ResidentOnly = true
			rp.spills.Add(1)
		}
		sub.Modules[k] = m
	}
	creq := connect.NewRequest(sub)
	for k, v := range hdr {
		creq.Header()[k] = v
	}
	rp.calls.Add(1)
	rp.modules.Add(int64(len(p.idx)))
	actx, cancel := context.WithTimeout(ctx, r.cfg.AttemptTimeout)
	defer cancel()
	resp, err := rp.client.Symbolize(actx, creq)
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", rp.addr, err)
	}
	if len(resp.Msg.GetModules()) != len(sub.Modules) {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("replica %s answered %d modules for %d", rp.addr, len(resp.Msg.GetModules()), len(sub.Modules)))
	}
	return resp.Msg, nil
}
