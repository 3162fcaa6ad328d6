package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/demo/pipeline"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
)

func uploadAll(t *testing.T, sym *testsupport.Symbolizer, bins []otlptest.Binary) {
	t.Helper()
	paths := make([]string, len(bins))
	for i, b := range bins {
		paths[i] = b.Path
	}
	sym.Upload(t, paths...)
}

// TestSymbolizesWithFullFidelity sends every producer shape through the gateway binary, over
// gRPC and HTTP, and checks what a real OTLP downstream receives: the input plus symbols, no
// orphan dictionary entries, frames as llvm-symbolizer names them; and the pprof files.
func TestSymbolizesWithFullFidelity(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, the symbolizer and a downstream")
	}
	bins := otlptest.Binaries(t)
	sym := testsupport.StartSymbolizer(t, "")
	uploadAll(t, sym, bins)
	sk := startSink(t)
	pprofDir := t.TempDir()
	g := startGateway(t, gwConfig{Symbolizer: sym.URL(), Downstream: sk.addr, PprofDir: pprofDir})

	var total int64
	check := func(t *testing.T, in pprofile.Profiles, cases []otlptest.Case) {
		t.Helper()
		total += int64(len(cases))
		sk.settle(t, total, 30*time.Second)
		reqs := sk.received()
		last := reqs[len(reqs)-1]
		out := otlptest.Resolve(last)
		if err := otlptest.Compare(otlptest.Resolve(in), out); err != nil {
			t.Fatal(err)
		}
		if err := otlpprofiles.Orphans(last); err != nil {
			t.Fatalf("output dictionary: %v", err)
		}
		otlptest.CheckFrames(t, out, cases)
		for _, s := range out {
			attrs := fmt.Sprint(s.Stack[0].MappingAttrs)
			if !strings.Contains(attrs, otlpattr.MappingHasFunctions) || !strings.Contains(attrs, otlpattr.MappingHasLineNumbers) {
				t.Fatalf("symbolized mapping without has_* attributes: %v", attrs)
			}
		}
	}
	for _, sh := range []otlptest.Shape{otlptest.ShapeEBPF, otlptest.ShapeEBPFZero, otlptest.ShapePprof} {
		t.Run(string(sh), func(t *testing.T) {
			pd, cases := otlptest.BuildRequest(t, sh, bins)
			in := pprofile.NewProfiles()
			pd.CopyTo(in)
			if err := g.send(t.Context(), pd); err != nil {
				t.Fatal(err)
			}
			check(t, in, cases)
		})
	}
	t.Run("http", func(t *testing.T) {
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
		in := pprofile.NewProfiles()
		pd.CopyTo(in)
		if code := g.postProfiles(t, pd); code != http.StatusOK {
			t.Fatalf("POST /v1development/profiles: %d", code)
		}
		check(t, in, cases)
	})

	t.Run("pprof-files", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join(pprofDir, "profile-*.pb.gz"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != 4 {
			t.Fatalf("%d pprof files, want 4 (one per request)", len(files))
		}
		cmd := exec.CommandContext(t.Context(), "go", "tool", "pprof", "-raw", files[0])
		cmd.Env = append(os.Environ(), "PPROF_BINARY_PATH="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -raw: %v\n%s", err, out)
		}
		// An inline chain prints as consecutive lines of one location: leaf, then middle, then outer.
		text := string(out)
		i := strings.Index(text, " leaf ")
		if i < 0 || !strings.Contains(text[i:], " middle ") || !strings.Contains(text[i:], " outer ") || !strings.Contains(text, "main.work") {
			t.Fatalf("pprof -raw output lacks the inline chain leaf/middle/outer or the Go frames:\n%s", text[:min(len(text), 3000)])
		}
	})

	t.Run("metrics", func(t *testing.T) {
		m := g.metrics(t)
		// The Collector's own counters of the pipeline, and the symbolize processor's.
		for _, c := range []struct {
			name   string
			labels []string
		}{
			{"otelcol_receiver_accepted_profile_samples", nil},
			{"otelcol_exporter_sent_profile_samples", []string{`exporter="otlp_grpc"`}},
			{"otelcol_exporter_sent_profile_samples", []string{`exporter="pprof"`}},
		} {
			if got := m.sum(c.name, c.labels...); got != float64(total) {
				t.Errorf("%s%v = %v, want %d; the pipeline's series: %v", c.name, c.labels, got, total, m.pipelineSeries())
			}
		}
		resolved := 0.0
		var names []string
		for _, x := range m {
			names = append(names, x.name)
			if strings.HasPrefix(x.name, "otelcol_processor_symbolize_") && strings.Contains(x.name, "resolved") {
				resolved += x.value
			}
		}
		if resolved == 0 {
			t.Errorf("no symbolize processor counter of resolved frames in /metrics; have %v", names)
		}
	})
}

// symbolizedRequests counts received requests whose leaf frames have lines, and those without.
func symbolizedRequests(reqs []pprofile.Profiles) (yes, no int) {
	for _, r := range reqs {
		out := otlptest.Resolve(r)
		if len(out) > 0 && len(out[0].Stack[0].Lines) > 0 {
			yes++
		} else {
			no++
		}
	}
	return yes, no
}

// TestDrillsMidStream sends 30 requests, one after the other, and takes one part of the
// pipeline away for the middle ten: samples in == samples out every time, and what is
// symbolized says what the outage costs.
//   - symbolizer stopped: data is delayed up to the deadline, then goes on unsymbolized;
//     symbolization resumes when it is back (20 symbolized, 10 not);
//   - the symbolizer's Redis stopped: symbolization slows, never stops (30 symbolized);
//   - downstream stopped: the sending queue holds what was accepted and retries it
//     (30 symbolized, nothing lost).
func TestDrillsMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, the symbolizer, Redis and a downstream")
	}
	b := otlptest.Binaries(t)[:1]
	noCache := 0
	for _, tc := range []struct {
		name         string
		redis        bool
		cfg          gwConfig // Symbolizer and Downstream are filled in
		stop, start  func(sym *testsupport.Symbolizer, redis *testsupport.Redis, sk *sink)
		symbolizedOK int
		// logged is what the gateway's log says once when the outage starts and once when it
		// ends; empty: the gateway does not see this outage itself.
		logged [2]string
	}{
		{
			name: "symbolizer stopped",
			// Every request asks the symbolizer, and gives up on it after a second.
			cfg:          gwConfig{Deadline: time.Second, CacheEntries: &noCache},
			stop:         func(sym *testsupport.Symbolizer, _ *testsupport.Redis, _ *sink) { sym.Stop() },
			start:        func(sym *testsupport.Symbolizer, _ *testsupport.Redis, _ *sink) { sym.Start(t) },
			symbolizedOK: 20,
		},
		{
			name:         "redis stopped",
			redis:        true,
			cfg:          gwConfig{CacheEntries: &noCache},
			stop:         func(_ *testsupport.Symbolizer, r *testsupport.Redis, _ *sink) { r.Stop() },
			start:        func(_ *testsupport.Symbolizer, r *testsupport.Redis, _ *sink) { r.Restart() },
			symbolizedOK: 30,
		},
		{
			name:         "downstream stopped",
			stop:         func(_ *testsupport.Symbolizer, _ *testsupport.Redis, sk *sink) { sk.GracefulStop() },
			start:        func(_ *testsupport.Symbolizer, _ *testsupport.Redis, sk *sink) { sk.Start(t) },
			symbolizedOK: 30,
			logged:       [2]string{"degraded: exports are queued and retried", "recovered"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var redis *testsupport.Redis
			redisURL := ""
			if tc.redis {
				redis = testsupport.StartRedis(t)
				redisURL = redis.URL()
			}
			sym := testsupport.StartSymbolizer(t, redisURL)
			sym.Upload(t, b[0].Path)
			sk := startSink(t)
			cfg := tc.cfg
			cfg.Symbolizer, cfg.Downstream = sym.URL(), sk.addr
			g := startGateway(t, cfg)
			var sent int64
			for i := range 30 {
				switch i {
				case 10:
					tc.stop(sym, redis, sk)
				case 20:
					tc.start(sym, redis, sk)
				}
				pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
				g.sendRetry(t, pd)
				sent += int64(len(cases))
			}
			sk.settle(t, sent, 60*time.Second)
			if yes, no := symbolizedRequests(sk.received()); yes != tc.symbolizedOK || no != 30-tc.symbolizedOK {
				t.Fatalf("%d requests symbolized, %d not; want %d and %d", yes, no, tc.symbolizedOK, 30-tc.symbolizedOK)
			}
			if tc.logged[0] != "" {
				log, err := os.ReadFile(g.proc.LogPath)
				if err != nil {
					t.Fatal(err)
				}
				for _, what := range tc.logged {
					if n := strings.Count(string(log), "downstream "+sk.addr+" "+what); n != 1 {
						t.Errorf("the gateway's log says %q %d times, want once", "downstream "+sk.addr+" "+what, n)
					}
				}
			}
		})
	}
}

// TestDrillDownstreamDownBackpressure: with the downstream away, a bounded sending queue fills
// and the receiver answers UNAVAILABLE (gRPC) and 503 (HTTP) instead of dropping; senders that
// retry get everything through once the downstream is back.
func TestDrillDownstreamDownBackpressure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, the symbolizer and a downstream")
	}
	b, sym, sk := startWithOneBinary(t)
	sk.Stop()
	g := startGateway(t, gwConfig{Symbolizer: sym.URL(), Downstream: sk.addr, QueueSize: 3,
		JSONLogs: true, RefusalLogInterval: time.Second, PushbackWindow: 2 * time.Second})
	waitReadiness(t, g, http.StatusOK, 10*time.Second, "before any pushback")

	var sent int64
	pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
	for {
		err := g.send(t.Context(), pd)
		if status.Code(err) == codes.Unavailable {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sent += int64(len(cases))
		if sent > 50*int64(len(cases)) {
			t.Fatal("the sending queue never filled")
		}
		pd, cases = otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
	}
	if code := g.postProfiles(t, pd); code != http.StatusServiceUnavailable {
		t.Fatalf("HTTP with a full sending queue: %d, want 503", code)
	}
	// Readiness follows the pushback, so a load balancer sends new connections elsewhere.
	if code := g.readiness(t); code != http.StatusServiceUnavailable {
		t.Fatalf("readiness while senders are pushed back: %d, want 503", code)
	}

	var wg sync.WaitGroup
	var pushedBack atomic.Int64
	var mu sync.Mutex
	for range 4 {
		wg.Go(func() {
			for range 5 {
				p, c := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
				pushedBack.Add(int64(g.sendRetry(t, p)))
				mu.Lock()
				sent += int64(len(c))
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Second)
	if code := g.readiness(t); code != http.StatusServiceUnavailable {
		t.Fatalf("readiness while senders retry against a full queue: %d, want 503", code)
	}
	sk.Start(t)
	wg.Wait()
	sk.settle(t, sent, 60*time.Second)
	if pushedBack.Load() == 0 {
		t.Fatal("no sender was pushed back while the downstream was down")
	}
	// Ready again once the downstream took the queue and a pushback window passed.
	waitReadiness(t, g, http.StatusOK, 15*time.Second, "after the downstream returned")
	// Each refusal is counted where operators look, not only answered.
	m := g.metrics(t)
	if refused := m.sum("otelcol_receiver_refused_profile_samples"); refused == 0 {
		t.Error("otelcol_receiver_refused_profile_samples is 0 after refusals")
	}
	if failed := m.sum("otelcol_exporter_enqueue_failed_profile_samples", `exporter="otlp_grpc"`); failed == 0 {
		t.Error("otelcol_exporter_enqueue_failed_profile_samples is 0 after a full queue")
	}
	if got := m.sum("otelcol_exporter_sent_profile_samples", `exporter="otlp_grpc"`); got != float64(sent) {
		t.Errorf("otelcol_exporter_sent_profile_samples = %v, want %d", got, sent)
	}
	grpcPushback := m.sum("otelcol_refused_requests", `transport="grpc"`, `reason="pushback"`)
	if grpcPushback < float64(pushedBack.Load()) {
		t.Errorf("otelcol_refused_requests{grpc,pushback} = %v, want at least the %d pushbacks the senders saw", grpcPushback, pushedBack.Load())
	}
	if got := m.sum("otelcol_refused_requests", `transport="http"`, `reason="pushback"`); got != 1 {
		t.Errorf("otelcol_refused_requests{http,pushback} = %v, want 1", got)
	}
	// Logged per episode, not per refusal: a WARN at the start (with the sender and the
	// error), an INFO at the end.
	starts := g.refusalLines(t, "Refusing requests", "grpc", "pushback")
	if len(starts) == 0 || float64(len(starts)) >= grpcPushback/2 {
		t.Errorf("%d start lines for %v pushbacks: want a few episodes, not a line per refusal", len(starts), grpcPushback)
	}
	if len(starts) > 0 && (!strings.HasPrefix(fmt.Sprint(starts[0]["peer"]), "127.0.0.1:") || !strings.Contains(fmt.Sprint(starts[0]["error"]), "queue is full")) {
		t.Errorf("start line %v: want the sender's address and the queue's error", starts[0])
	}
	g.waitLog(t, "Stopped refusing requests", "grpc", "pushback", 10*time.Second)
}

// waitReadiness waits until the readiness endpoint answers want.
func waitReadiness(t *testing.T, g *gateway, want int, timeout time.Duration, when string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code := g.readiness(t)
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness %s: %d after %v, want %d", when, code, timeout, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDrillRestartWhileDownstreamDown: what the gateway acknowledged while the downstream was
// away sits in the file_storage-backed sending queue; a gateway killed with SIGKILL and started
// again sends all of it once the downstream is back.
func TestDrillRestartWhileDownstreamDown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, the symbolizer and a downstream")
	}
	b, sym, sk := startWithOneBinary(t)
	sk.Stop()
	g := startGateway(t, gwConfig{Symbolizer: sym.URL(), Downstream: sk.addr, StorageDir: t.TempDir()})

	var sent int64
	for range 10 {
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
		if err := g.send(t.Context(), pd); err != nil {
			t.Fatalf("send while the downstream is away: %v", err)
		}
		sent += int64(len(cases))
	}
	g.kill()
	g.restart()
	// More while the downstream is still away, to the restarted gateway.
	for range 5 {
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
		if err := g.send(t.Context(), pd); err != nil {
			t.Fatalf("send after the restart: %v", err)
		}
		sent += int64(len(cases))
	}
	sk.Start(t)
	sk.settle(t, sent, 60*time.Second)
	if yes, no := symbolizedRequests(sk.received()); yes != 15 || no != 0 {
		t.Fatalf("%d requests symbolized, %d not; the queue holds symbolized data", yes, no)
	}
	// The persistent queue encodes requests as they stand (xpdata's request encoding), without
	// the string-table references pdata's ProtoMarshaler would add.
	for i, r := range sk.received() {
		if err := otlpprofiles.Orphans(r); err != nil {
			t.Fatalf("request %d after the disk queue: %v", i, err)
		}
	}
}

// TestDefaultConfigValidates checks the built-in configuration and the shipped examples with
// the gateway's own validate command.
func TestDefaultConfigValidates(t *testing.T) {
	for _, args := range [][]string{
		{"validate"},
		{"validate", "--config", "config/local.yaml"},
		{"validate", "--config", "config/production.yaml"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cmd := newCommand()
			cmd.SetArgs(args)
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			if err := cmd.ExecuteContext(context.Background()); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out.String())
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(bad, []byte(strings.Replace(defaultConfig, "endpoint: ${env:PROFSYM_SYMBOLIZER:-http://127.0.0.1:7070}", "endpoint: ftp://x", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := newCommand()
		cmd.SetArgs([]string{"validate", "--config", bad})
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "ftp://x") {
			t.Fatalf("validate of a config with an ftp:// symbolizer: %v, want the endpoint refused", err)
		}
	})
}

// TestK8sAttributesPassthrough runs the contrib k8sattributes processor (v0.160.0 on this core)
// on profiles: in passthrough mode it adds the sender's address as k8s.pod.ip to each resource,
// and the rest of the request goes on as it came, symbolized.
func TestK8sAttributesPassthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, the symbolizer and a downstream")
	}
	b, sym, sk := startWithOneBinary(t)
	g := startGateway(t, gwConfig{Symbolizer: sym.URL(), Downstream: sk.addr, K8sPassthrough: true})
	pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
	in := pprofile.NewProfiles()
	pd.CopyTo(in)
	if err := g.send(t.Context(), pd); err != nil {
		t.Fatal(err)
	}
	sk.settle(t, int64(len(cases)), 30*time.Second)
	out := sk.received()[0]
	rps := out.ResourceProfiles()
	for i := range rps.Len() {
		v, ok := rps.At(i).Resource().Attributes().Get("k8s.pod.ip")
		if !ok || v.Str() != "127.0.0.1" {
			t.Fatalf("resource %d: k8s.pod.ip = %v (present %v), want 127.0.0.1", i, v.AsString(), ok)
		}
		// Without the added attribute the output is the input plus symbols.
		rps.At(i).Resource().Attributes().Remove("k8s.pod.ip")
	}
	if err := otlptest.Compare(otlptest.Resolve(in), otlptest.Resolve(out)); err != nil {
		t.Fatal(err)
	}
	otlptest.CheckFrames(t, otlptest.Resolve(out), cases)
}

// TestLocalDefaultRun runs the one-command local gateway: no --config, the built-in
// configuration, with only its listen addresses moved to free ports by --set and the symbolizer
// and output folder given by their environment variables. What was sent comes out symbolized in
// the OTLP file and as pprof files.
func TestLocalDefaultRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway and the symbolizer")
	}
	bins := otlptest.Binaries(t)
	sym := testsupport.StartSymbolizer(t, "")
	uploadAll(t, sym, bins)
	bin, err := gatewayBin()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	t.Setenv("PROFSYM_SYMBOLIZER", sym.URL())
	t.Setenv("PROFSYM_GATEWAY_OUTPUT", out)
	logPath := filepath.Join(t.TempDir(), "gateway.log")
	proc, ports, err := pipeline.StartService(t.Context(), "gateway", logPath, bin, 5, 60*time.Second,
		func(p []int) ([]string, string) {
			return []string{
				"--set=receivers::otlp::protocols::grpc::endpoint=127.0.0.1:" + strconv.Itoa(p[0]),
				"--set=receivers::otlp::protocols::http::endpoint=127.0.0.1:" + strconv.Itoa(p[1]),
				"--set=extensions::health_check::endpoint=127.0.0.1:" + strconv.Itoa(p[3]),
				"--set=extensions::refusals::readiness::endpoint=127.0.0.1:" + strconv.Itoa(p[4]),
				fmt.Sprintf("--set=service::telemetry::metrics::readers=[{pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}}]", p[2]),
			}, fmt.Sprintf("http://127.0.0.1:%d/", p[3])
		})
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{t: t, proc: proc, grpcAddr: "127.0.0.1:" + strconv.Itoa(ports[0]),
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[2])}
	cc, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	g.client = pprofileotlp.NewGRPCClient(cc)

	var in []otlptest.Sample
	var cases []otlptest.Case
	for _, sh := range []otlptest.Shape{otlptest.ShapeEBPF, otlptest.ShapePprof} {
		pd, c := otlptest.BuildRequest(t, sh, bins)
		in = append(in, otlptest.Resolve(pd)...)
		cases = append(cases, c...)
		if err := g.send(t.Context(), pd); err != nil {
			t.Fatal(err)
		}
	}
	// SIGTERM: the Collector stops its receivers, then flushes and closes the exporters.
	if err := proc.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, proc.Tail(30))
	}
	var got []otlptest.Sample
	written, err := pipeline.ReadOTLPFile(filepath.Join(out, "profiles.otlp.pb"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pd := range written {
		got = append(got, otlptest.Resolve(pd)...)
		// The built-in configuration writes through the otlp_plain encoding.
		if err := otlpprofiles.Orphans(pd); err != nil {
			t.Fatalf("OTLP file output: %v", err)
		}
	}
	if err := otlptest.Compare(in, got); err != nil {
		t.Fatalf("OTLP file output: %v", err)
	}
	otlptest.CheckFrames(t, got, cases)
	files, err := filepath.Glob(filepath.Join(out, "pprof", "profile-*.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("%d pprof files in %s, want 2", len(files), filepath.Join(out, "pprof"))
	}
}

// TestMemoryLimiterRefuses: above memory_limiter's limit the gateway refuses data with gRPC
// UNAVAILABLE and HTTP 503, which OTLP senders retry, and counts the refusal; what it accepted
// before arrives whole, what it refused not at all. A limit of 2 MiB is below any Go process's
// heap, so every request after the limiter's first check is refused.
func TestMemoryLimiterRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, the symbolizer and a downstream")
	}
	b, sym, sk := startWithOneBinary(t)
	g := startGateway(t, gwConfig{Symbolizer: sym.URL(), Downstream: sk.addr, MemoryLimitMiB: 2})
	pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
	// The limiter decides on its first check after start: what came before goes through.
	deadline := time.Now().Add(10 * time.Second)
	var err error
	var accepted int64
	for {
		err = g.send(t.Context(), pd)
		if err == nil {
			accepted += int64(len(cases))
		}
		if status.Code(err) == codes.Unavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("send above the memory limit: %v, want UNAVAILABLE", err)
	}
	if code := g.postProfiles(t, pd); code != http.StatusServiceUnavailable {
		t.Fatalf("HTTP above the memory limit: %d, want 503", code)
	}
	if refused := g.metrics(t).sum("otelcol_receiver_refused_profile_samples"); refused == 0 {
		t.Error("otelcol_receiver_refused_profile_samples is 0 after refusals")
	}
	// Accepted requests arrive whole; refused ones not at all.
	sk.settle(t, accepted, 30*time.Second)
}
