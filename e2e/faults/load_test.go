package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/demo/pipeline"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

// target is the binary a sender profiles.
type target struct {
	path   string
	ids    buildid.IDs
	lo, hi uint64
}

func newTarget(path string) (*target, error) {
	ids, err := buildid.FromFile(path)
	if err != nil {
		return nil, err
	}
	lo, hi, err := pipeline.FuncRange(path, "hot")
	if err != nil {
		return nil, err
	}
	return &target{path: path, ids: ids, lo: lo, hi: hi}, nil
}

// samplesPerRequest is the samples of each request (one per address).
const samplesPerRequest = 20

// sender behaves like the collector's exporter: a request per tick, each retried with backoff
// until the gateway acknowledges it, every retry counted in the phase it belongs to.
type sender struct {
	client  pprofileotlp.GRPCClient
	target  atomic.Pointer[target]
	seq     atomic.Int64
	mu      sync.Mutex
	phase   string
	acked   map[string]string // request ID -> phase
	retries map[string]int    // phase -> sends repeated after an error
}

func newSender(c pprofileotlp.GRPCClient) *sender {
	return &sender{client: c, phase: "before faults", acked: map[string]string{}, retries: map[string]int{}}
}

func (s *sender) newPhase(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = name
}

func (s *sender) phaseName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.phase
}

func (s *sender) sentIn(phase string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.acked {
		if p == phase {
			n++
		}
	}
	return n
}

func (s *sender) retriedIn(phase string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retries[phase]
}

func (s *sender) ackedIDs() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.acked))
	for k, v := range s.acked {
		out[k] = v
	}
	return out
}

func (s *sender) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// One at a time, like an exporter with one consumer.
			s.send(ctx, "req")
		}
	}
}

// send delivers one request and returns its ID ("" when ctx ended first).
func (s *sender) send(ctx context.Context, kind string) string {
	id := fmt.Sprintf("%s-%d", kind, s.seq.Add(1))
	phase := s.phaseName()
	tg := s.target.Load()
	addrs := make([]uint64, samplesPerRequest)
	for i := range addrs {
		addrs[i] = tg.lo + rand.Uint64N(tg.hi-tg.lo)
	}
	for backoff := 20 * time.Millisecond; ; backoff = min(backoff*2, time.Second) {
		pd, err := pipeline.ProfilerRequest(tg.path, tg.ids, addrs, map[string]string{requestKey: id})
		if err != nil {
			return ""
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = s.client.Export(rctx, pprofileotlp.NewExportRequestFromProfiles(pd))
		cancel()
		if err == nil {
			s.mu.Lock()
			s.acked[id] = phase
			s.mu.Unlock()
			return id
		}
		if ctx.Err() != nil {
			return ""
		}
		s.mu.Lock()
		s.retries[phase]++
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(backoff):
		}
	}
}

// recover sends probes until one comes out of the downstream symbolized.
func (s *sender) recover(ctx context.Context, sk *sink, symbolized bool, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < limit {
		id := s.send(ctx, "probe")
		for wait := time.Now().Add(3 * time.Second); time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
			if ok, seen := sk.probe(id); seen {
				if ok || !symbolized {
					return time.Since(start), nil
				}
				break
			}
		}
	}
	return time.Since(start), fmt.Errorf("no probe came out %swithin %v", map[bool]string{true: "symbolized "}[symbolized], limit)
}

// sink is a downstream that counts, per request, its deliveries and its samples, and
// whether it came symbolized.
type sink struct {
	addr       string
	mu         sync.Mutex
	got        map[string]int
	samples    map[string]int // of the first delivery
	symbolized map[string]bool
	// phase, when set, names the phase under way; arrivalDups counts duplicates by it.
	phase       func() string
	arrivalDups map[string]int
}

func startSink(t *testing.T) *sink {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{addr: ln.Addr().String(), got: map[string]int{}, samples: map[string]int{},
		symbolized: map[string]bool{}, arrivalDups: map[string]int{}}
	srv := otlptest.NewProfilesServer(s.Export)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return s
}

func (s *sink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	pd := req.Profiles()
	d := pd.Dictionary()
	lines := false
	for l := 1; l < d.LocationTable().Len(); l++ {
		if d.LocationTable().At(l).Lines().Len() > 0 {
			lines = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		rp := pd.ResourceProfiles().At(i)
		v, ok := rp.Resource().Attributes().Get(requestKey)
		if !ok {
			continue
		}
		id := v.Str()
		s.got[id]++
		if s.got[id] > 1 {
			if s.phase != nil {
				s.arrivalDups[s.phase()]++
			}
			continue
		}
		n := 0
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			ps := rp.ScopeProfiles().At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				n += ps.At(k).Samples().Len()
			}
		}
		s.samples[id] = n
		s.symbolized[id] = lines
	}
	return pprofileotlp.NewExportResponse(), nil
}

// duplicatesByArrival counts the deliveries after the first by the phase under way when they
// came: a request taken in one phase may still be in the gateway's queue when the next begins,
// and is sent twice by the link that fails then.
func (s *sink) duplicatesByArrival() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.arrivalDups))
	for k, v := range s.arrivalDups {
		out[k] = v
	}
	return out
}

// deliveries is how many distinct requests have arrived.
func (s *sink) deliveries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (s *sink) probe(id string) (symbolized, seen bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.symbolized[id], s.got[id] > 0
}

// missing counts the acknowledged requests not delivered yet.
func (s *sink) missing(acked map[string]string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id := range acked {
		if s.got[id] == 0 {
			n++
		}
	}
	return n
}

// account compares what was acknowledged with what came out: samples in (acknowledged
// requests) and out (their first deliveries), requests lost, and duplicates by the phase the
// request was sent in (where its retries are counted).
func (s *sink) account(acked map[string]string) (in, out, lost int, dups map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range acked {
		in += samplesPerRequest
		if s.got[id] == 0 {
			lost++
			continue
		}
		out += s.samples[id]
	}
	dups = map[string]int{}
	for id, phase := range acked {
		if n := s.got[id]; n > 1 {
			dups[phase] += n - 1
		}
	}
	return in, out, lost, dups
}

// buildSuite builds the services into a fresh directory and returns it, its logs folder and the
// binaries; when t fails, the last lines of the named services' logs are printed.
func buildSuite(ctx context.Context, t *testing.T, services ...string) (dir, logs string, bins pipeline.Binaries) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	logs = filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range services {
				t.Logf("%s log (last lines):\n%s", name, pipeline.TailFile(filepath.Join(logs, name+".log"), 30))
			}
		}
	})
	if bins, err = pipeline.BuildServices(ctx, root, filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
	return dir, logs, bins
}
