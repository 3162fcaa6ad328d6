package affinity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/freeport"
)

// replicaServer is a Symbolize server on its own loopback address that answers every module
// with its own key (so the caller can check the order of answers) and records which keys it
// was asked.
type replicaServer struct {
	addr string
	srv  *http.Server

	mu        sync.Mutex
	keys      map[string]int  // asked without resident_only
	spilled   map[string]int  // asked with resident_only
	resident  map[string]bool // answered when asked resident_only; others NOT_RESIDENT
	inflight  int
	most      int
	hold      chan struct{} // when set, calls wait for it to close
	holdCalls atomic.Int64
}

func (s *replicaServer) Symbolize(ctx context.Context, req *connect.Request[symbolizerv1.SymbolizeRequest]) (*connect.Response[symbolizerv1.SymbolizeResponse], error) {
	s.mu.Lock()
	s.inflight++
	s.most = max(s.most, s.inflight)
	hold := s.hold
	notResident := map[int]bool{}
	for k, m := range req.Msg.GetModules() {
		if m.GetResidentOnly() {
			s.spilled[Key(m)]++
			notResident[k] = !s.resident[Key(m)]
			continue
		}
		s.keys[Key(m)]++
	}
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.inflight--; s.mu.Unlock() }()
	if hold != nil {
		s.holdCalls.Add(1)
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := &symbolizerv1.SymbolizeResponse{}
	for k, m := range req.Msg.GetModules() {
		if notResident[k] {
			out.Modules = append(out.Modules, &symbolizerv1.ModuleResult{Status: symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_RESIDENT})
			continue
		}
		out.Modules = append(out.Modules, &symbolizerv1.ModuleResult{Status: symbolizerv1.ModuleStatus_MODULE_STATUS_OK,
			ResolvedBuildId: Key(m), FrameCounts: make([]uint32, len(m.GetAddresses())), Frames: &symbolizerv1.FrameTable{}})
	}
	return connect.NewResponse(out), nil
}

func (s *replicaServer) stop() { _ = s.srv.Close() }

func (s *replicaServer) asked() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.keys {
		out[k] = v
	}
	return out
}

// startReplicas starts n servers on 127.0.0.2, 127.0.0.3, ... all on one port, as the pods
// behind a headless Service are.
func startReplicas(t *testing.T, n int) []*replicaServer {
	t.Helper()
	for attempt := 0; ; attempt++ {
		port, err := freeport.Port()
		if err != nil {
			t.Fatal(err)
		}
		var out []*replicaServer
		ok := true
		for i := range n {
			addr := net.JoinHostPort("127.0.0."+strconv.Itoa(i+2), strconv.Itoa(port))
			var lc net.ListenConfig
			ln, err := lc.Listen(t.Context(), "tcp", addr)
			if err != nil {
				ok = false
				break
			}
			s := &replicaServer{addr: addr, keys: map[string]int{}, spilled: map[string]int{}, resident: map[string]bool{}}
			mux := http.NewServeMux()
			mux.Handle(symbolizerv1connect.NewSymbolizerServiceHandler(s))
			var p http.Protocols
			p.SetHTTP1(true)
			p.SetUnencryptedHTTP2(true)
			s.srv = &http.Server{Handler: mux, Protocols: &p, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = s.srv.Serve(ln) }()
			out = append(out, s)
		}
		if ok {
			t.Cleanup(func() {
				for _, s := range out {
					s.stop()
				}
			})
			return out
		}
		for _, s := range out {
			s.stop()
		}
		if attempt > 10 {
			t.Fatal("no port free on every loopback address")
		}
	}
}

func newClient(base string) symbolizerv1connect.SymbolizerServiceClient {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return symbolizerv1connect.NewSymbolizerServiceClient(&http.Client{Transport: &http.Transport{Protocols: &p}}, base)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func addrsOf(reps []*replicaServer) []string {
	out := make([]string, len(reps))
	for i, r := range reps {
		out[i] = r.addr
	}
	return out
}

func newRouter(t *testing.T, cfg Config) *Router {
	t.Helper()
	cfg.Scheme = "http"
	cfg.NewClient = newClient
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	t.Cleanup(r.Close)
	return r
}

func gnu(i int) string { return fmt.Sprintf("%040x", i+1) }

// request builds a request of the modules of build IDs ids.
func request(ids ...int) *connect.Request[symbolizerv1.SymbolizeRequest] {
	req := &symbolizerv1.SymbolizeRequest{}
	for _, id := range ids {
		req.Modules = append(req.Modules, &symbolizerv1.Module{GnuBuildId: gnu(id), Addresses: []uint64{1, 2, 3}})
	}
	return connect.NewRequest(req)
}

// send sends a request and checks each answer is its module's, in order.
func send(t *testing.T, r *Router, ids ...int) error {
	t.Helper()
	resp, err := r.Symbolize(context.Background(), request(ids...))
	if err != nil {
		return err
	}
	for k, id := range ids {
		if got := resp.Msg.Modules[k].ResolvedBuildId; got != "gnu:"+gnu(id) {
			t.Fatalf("answer %d is for %s, want gnu:%s", k, got, gnu(id))
		}
	}
	return nil
}

// TestOwnership: over many requests mixing modules, each build ID is asked of one replica
// only, its owner, and the build IDs are spread over the replicas.
func TestOwnership(t *testing.T) {
	reps := startReplicas(t, 3)
	r := newRouter(t, Config{Static: addrsOf(reps)})
	const ids = 300
	for round := range 5 {
		for start := 0; start < ids; start += 7 {
			var batch []int
			for i := start; i < min(start+7, ids); i++ {
				batch = append(batch, (i*31+round)%ids)
			}
			if err := send(t, r, batch...); err != nil {
				t.Fatal(err)
			}
		}
	}
	seen := map[string]string{}
	for _, s := range reps {
		keys := s.asked()
		t.Logf("replica %s owns %d of %d build IDs", s.addr, len(keys), ids)
		if len(keys) < ids/6 {
			t.Errorf("replica %s owns %d build IDs, far below a third of %d", s.addr, len(keys), ids)
		}
		for k := range keys {
			if other, ok := seen[k]; ok {
				t.Fatalf("%s asked of %s and of %s", k, other, s.addr)
			}
			seen[k] = s.addr
			if owner := Owners(k, addrsOf(reps))[0]; owner != s.addr {
				t.Fatalf("%s asked of %s, its owner is %s", k, s.addr, owner)
			}
		}
	}
	if len(seen) != ids {
		t.Fatalf("%d build IDs asked, want %d", len(seen), ids)
	}
}

// TestPin: a pinned client sends every module to one replica.
func TestPin(t *testing.T) {
	reps := startReplicas(t, 3)
	r := newRouter(t, Config{Static: addrsOf(reps), Pin: "gateway-0"})
	for i := range 30 {
		if err := send(t, r, i, i+100); err != nil {
			t.Fatal(err)
		}
	}
	asked := 0
	for _, s := range reps {
		if len(s.asked()) > 0 {
			asked++
		}
	}
	if asked != 1 {
		t.Fatalf("a pinned client asked %d replicas, want 1", asked)
	}
}

// TestFailover: a replica that stops answering loses its build IDs to their next owners,
// each to one replica, and no other build ID moves; a hung replica is left after the attempt
// timeout; answers stay complete and in order throughout.
func TestFailover(t *testing.T) {
	reps := startReplicas(t, 3)
	r := newRouter(t, Config{Static: addrsOf(reps), AttemptTimeout: 300 * time.Millisecond, EjectFor: time.Hour})
	const ids = 120
	all := make([]int, ids)
	for i := range all {
		all[i] = i
	}
	for start := 0; start < ids; start += 10 {
		if err := send(t, r, all[start:start+10]...); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]map[string]int{}
	for _, s := range reps {
		before[s.addr] = s.asked()
	}
	dead := reps[0]
	dead.stop()
	start := time.Now()
	if err := send(t, r, all...); err != nil {
		t.Fatalf("with a replica stopped: %v", err)
	}
	t.Logf("failover from a stopped replica: first answer in %v", time.Since(start))
	for _, s := range reps[1:] {
		now := s.asked()
		for k, n := range now {
			wasOwner := Owners(k, addrsOf(reps))[0]
			if before[s.addr][k] == 0 && wasOwner != dead.addr {
				t.Fatalf("%s moved to %s though its owner %s is alive", k, s.addr, wasOwner)
			}
			if wasOwner == dead.addr && Owners(k, addrsOf(reps[1:]))[0] != s.addr {
				t.Fatalf("%s of the stopped replica went to %s, not its next owner", k, s.addr)
			}
			_ = n
		}
	}
	st := r.Stats()[dead.addr]
	if st.Failures != 1 {
		t.Fatalf("the stopped replica failed %d calls, want 1 (then passed over)", st.Failures)
	}

	// A hung replica: its part waits out the attempt timeout, then goes to the next owners
	// resident only; they hold its build IDs (in memory or in Redis, as a replica that
	// answered them before does) and answer them.
	hung := reps[1]
	hung.mu.Lock()
	hung.hold = make(chan struct{})
	hung.mu.Unlock()
	defer close(hung.hold)
	reps[2].mu.Lock()
	for _, id := range all {
		reps[2].resident["gnu:"+gnu(id)] = true
	}
	reps[2].mu.Unlock()
	mid := reps[2].asked()
	start = time.Now()
	if err := send(t, r, all...); err != nil {
		t.Fatalf("with a replica hung: %v", err)
	}
	t.Logf("failover from a hung replica (attempt timeout 300ms): answer in %v", time.Since(start))
	if hung.holdCalls.Load() != 1 {
		t.Fatalf("the hung replica was asked %d times, want once (then passed over)", hung.holdCalls.Load())
	}
	if err := send(t, r, all...); err != nil {
		t.Fatal(err)
	}
	if hung.holdCalls.Load() != 1 {
		t.Fatal("the hung replica was asked again while passed over")
	}
	after := reps[2].asked()
	for _, id := range all {
		k := "gnu:" + gnu(id)
		if Owners(k, addrsOf(reps))[0] == hung.addr && after[k] != mid[k] {
			t.Fatalf("%s, the hung replica's, was asked of %s without resident_only", k, reps[2].addr)
		}
	}

	// The next owner holds nothing of them: the modules come back UNAVAILABLE (asked again
	// with the next export), and no replica loads them; once the hung replica has answered
	// nothing for GiveUpAfter, its modules are loaded by their next owners.
	r2 := newRouter(t, Config{Static: []string{hung.addr, reps[2].addr}, AttemptTimeout: 200 * time.Millisecond, EjectFor: time.Hour, GiveUpAfter: time.Second})
	var hungIDs []int
	for _, id := range all {
		if Owners("gnu:"+gnu(id), []string{hung.addr, reps[2].addr})[0] == hung.addr {
			hungIDs = append(hungIDs, id)
		}
	}
	reps[2].mu.Lock()
	reps[2].resident = map[string]bool{}
	reps[2].mu.Unlock()
	resp, err := r2.Symbolize(context.Background(), request(hungIDs...))
	if err != nil {
		t.Fatal(err)
	}
	for k, m := range resp.Msg.Modules {
		if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_UNAVAILABLE {
			t.Fatalf("module %d of the hung replica: %v, want UNAVAILABLE while it is only slow", k, m.Status)
		}
	}
	loadsBefore := reps[2].asked()["gnu:"+gnu(hungIDs[0])]
	time.Sleep(1200 * time.Millisecond)
	if err := send(t, r2, hungIDs...); err != nil {
		t.Fatalf("after GiveUpAfter: %v", err)
	}
	if reps[2].asked()["gnu:"+gnu(hungIDs[0])] != loadsBefore+1 {
		t.Fatal("after GiveUpAfter the next owner was not asked to load the hung replica's build IDs")
	}

	// With every replica down, the call fails with the last error.
	reps[2].stop()
	if err := send(t, newRouter(t, Config{Static: []string{dead.addr, reps[2].addr}}), 1, 2); err == nil {
		t.Fatal("no error with every replica stopped")
	}
}

// TestShareBound: one hot build ID asked by many at once: without a bound every call queues
// on its owner; with the bound, the owner holds at most its share and the rest spill to the
// next owners.
func TestShareBound(t *testing.T) {
	reps := startReplicas(t, 3)
	byAddr := map[string]*replicaServer{}
	for _, s := range reps {
		byAddr[s.addr] = s
	}
	const callers = 30
	hot := "gnu:" + gnu(7)
	owner := byAddr[Owners(hot, addrsOf(reps))[0]]
	var router *Router
	run := func(factor float64, residentElsewhere bool) (ownerMost int, spilled int) {
		for _, s := range reps {
			s.mu.Lock()
			s.keys, s.spilled, s.most, s.hold = map[string]int{}, map[string]int{}, 0, make(chan struct{})
			s.resident = map[string]bool{hot: residentElsewhere || s == owner}
			s.mu.Unlock()
			s.holdCalls.Store(0)
		}
		r := newRouter(t, Config{Static: addrsOf(reps), BalanceFactor: factor, AttemptTimeout: time.Minute})
		router = r
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				if err := send(t, r, 7); err != nil {
					t.Error(err)
				}
			})
		}
		// Every call reaches a replica before any is answered.
		var total int64
		for deadline := time.Now().Add(time.Minute); ; {
			total = 0
			for _, s := range reps {
				total += s.holdCalls.Load()
			}
			if total == callers || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		for _, s := range reps {
			close(s.hold)
		}
		wg.Wait()
		if total != callers {
			t.Fatalf("%d of %d calls reached a replica", total, callers)
		}
		for _, s := range reps {
			s.mu.Lock()
			if s != owner && s.keys[hot] != 0 {
				t.Errorf("replica %s was asked %d times to load the hot index it does not own", s.addr, s.keys[hot])
			}
			s.mu.Unlock()
		}
		owner.mu.Lock()
		defer owner.mu.Unlock()
		return owner.most, callers - owner.keys[hot]
	}
	most, spilled := run(0, true)
	t.Logf("no bound: owner held %d calls at once, %d went elsewhere", most, spilled)
	if most != callers || spilled != 0 {
		t.Fatalf("without a bound the owner held %d at once and %d spilled; want %d and 0", most, spilled, callers)
	}
	most, spilled = run(1.25, true)
	limit := int(math.Ceil(1.25 * float64(callers+1) / 3))
	t.Logf("bound 1.25, the index resident everywhere: owner held %d calls at once (limit %d), %d answered elsewhere", most, limit, spilled)
	if most > limit || spilled == 0 {
		t.Fatalf("with bound 1.25 the owner held %d at once (limit %d), %d spilled", most, limit, spilled)
	}
	// Resident only on its owner: the spilled modules come back NOT_RESIDENT and go to the
	// owner, which answers every call; no other replica is asked to load it.
	most, spilled = run(1.25, false)
	var spills, refused int64
	for _, st := range router.Stats() {
		spills, refused = spills+st.Spills, refused+st.SpillsRefused
	}
	t.Logf("bound 1.25, the index resident on its owner only: owner held %d calls at once, %d answered elsewhere; %d spills, %d refused", most, spilled, spills, refused)
	if spilled != 0 || spills == 0 || refused != spills {
		t.Fatalf("%d calls answered off the owner, %d spills, %d refused: want 0, some, all", spilled, spills, refused)
	}
}

// TestDNS: the replicas are what the name resolves to, asked again at the refresh interval;
// a replica that leaves the answer stops being asked, one that joins takes its share.
func TestDNS(t *testing.T) {
	reps := startReplicas(t, 3)
	_, port, _ := net.SplitHostPort(reps[0].addr)
	var answer atomic.Value
	ip := func(s *replicaServer) string { h, _, _ := net.SplitHostPort(s.addr); return h }
	answer.Store([]string{ip(reps[0]), ip(reps[1])})
	var lookups atomic.Int64
	r := newRouter(t, Config{DNS: "symbolizer-headless.test:" + port, Refresh: 20 * time.Millisecond,
		Lookup: func(_ context.Context, host string) ([]string, error) {
			if host != "symbolizer-headless.test" {
				return nil, fmt.Errorf("unexpected host %q", host)
			}
			if lookups.Add(1) == 3 {
				return nil, errors.New("a DNS hiccup")
			}
			return answer.Load().([]string), nil
		}})
	for i := range 40 {
		if err := send(t, r, i); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(reps[2].asked()); n != 0 {
		t.Fatalf("a replica not in DNS was asked %d build IDs", n)
	}
	answer.Store([]string{ip(reps[1]), ip(reps[2])})
	waitFor(t, func() bool { rs := r.Replicas(); return len(rs) == 2 && rs[1] == reps[2].addr })
	// Past the failed lookup (the third), the replicas last seen are kept.
	waitFor(t, func() bool { return lookups.Load() >= 4 })
	if rs := r.Replicas(); len(rs) != 2 || rs[0] != reps[1].addr || rs[1] != reps[2].addr {
		t.Fatalf("replicas after a failed lookup: %v", rs)
	}
	asked0 := len(reps[0].asked())
	for i := range 40 {
		if err := send(t, r, i); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(reps[0].asked()); n != asked0 {
		t.Fatalf("the replica that left DNS was asked %d more build IDs", n-asked0)
	}
	if len(reps[2].asked()) == 0 {
		t.Fatal("the replica that joined DNS was asked nothing")
	}
}

// TestSystemResolver: with the system's resolver, localhost is a replica.
func TestSystemResolver(t *testing.T) {
	r := newRouter(t, Config{DNS: "localhost:7070"})
	waitFor(t, func() bool { return len(r.Replicas()) > 0 })
	found := false
	for _, a := range r.Replicas() {
		found = found || a == "127.0.0.1:7070" || a == "[::1]:7070"
	}
	if !found {
		t.Fatalf("localhost resolved to %v", r.Replicas())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no scheme", Config{Static: []string{"a:1"}, NewClient: newClient}},
		{"neither", Config{Scheme: "http", NewClient: newClient}},
		{"both", Config{Scheme: "http", DNS: "a:1", Static: []string{"a:1"}, NewClient: newClient}},
		{"dns without port", Config{Scheme: "http", DNS: "a", NewClient: newClient}},
		{"static without port", Config{Scheme: "http", Static: []string{"a"}, NewClient: newClient}},
		{"factor at 1", Config{Scheme: "http", Static: []string{"a:1"}, BalanceFactor: 1, NewClient: newClient}},
		{"no client", Config{Scheme: "http", Static: []string{"a:1"}}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
