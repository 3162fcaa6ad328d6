package symbolizeprocessor

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/processor/xprocessor"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// TestMain removes what the shared fixtures left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, remove := range []func() error{otlptest.RemoveFixtures, testsupport.RemoveFixtures} {
		if err := remove(); err != nil {
			fmt.Fprintf(os.Stderr, "remove test fixtures: %v\n", err)
		}
	}
	os.Exit(code)
}

// started is a processor built by the factory, as a Collector builds it, in front of a sink.
type started struct {
	proc xprocessor.Profiles
	sink *consumertest.ProfilesSink
	tel  *componenttest.Telemetry
}

func start(t *testing.T, cfg *Config) *started {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := &started{sink: new(consumertest.ProfilesSink), tel: componenttest.NewTelemetry()}
	t.Cleanup(func() { _ = s.tel.Shutdown(context.Background()) })
	set := processortest.NewNopSettings(Type)
	set.TelemetrySettings = s.tel.NewTelemetrySettings()
	var err error
	s.proc, err = NewFactory().CreateProfiles(t.Context(), set, cfg, s.sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.proc.Start(t.Context(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.proc.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s
}

// counter sums a counter's points, those with reason=reason when reason is not empty; a
// counter never added to counts 0.
func (s *started) counter(t *testing.T, name, reason string) int64 {
	t.Helper()
	m, err := s.tel.GetMetric(name)
	if err != nil {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: %T, want an int64 sum", name, m.Data)
	}
	var n int64
	for _, dp := range sum.DataPoints {
		if r, _ := dp.Attributes.Value("reason"); reason == "" || r.AsString() == reason {
			n += dp.Value
		}
	}
	return n
}

func TestFactory(t *testing.T) {
	f := NewFactory()
	if f.Type().String() != "symbolize" {
		t.Fatalf("type %s", f.Type())
	}
	if f.ProfilesStability() != component.StabilityLevelDevelopment {
		t.Fatal("profiles stability")
	}
	// The default lacks only the endpoint, which has no sensible default.
	err := f.CreateDefaultConfig().(*Config).Validate()
	if err == nil || !strings.Contains(err.Error(), "endpoint") || strings.Count(err.Error(), "\n") != 0 {
		t.Fatalf("default config: %v, want only the endpoint missing", err)
	}
}

// TestSymbolizes runs the processor against the real symbolizer holding test binaries uploaded
// with the real client, on requests shaped like the OTel eBPF profiler's (ELF virtual
// addresses, GNU, Go and htlhash IDs, kernel frames) and like pprof's (a PIE library relocated
// at runtime). Every native frame comes out as llvm-symbolizer reads it, nothing else changes,
// and the counters say so.
func TestSymbolizes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the symbolizer and compiles test binaries")
	}
	bins := otlptest.Binaries(t)
	sym := testsupport.StartSymbolizer(t, "")
	paths := make([]string, len(bins))
	for i, b := range bins {
		paths[i] = b.Path
	}
	sym.Upload(t, paths...)
	cfg := createDefaultConfig()
	cfg.Endpoint = sym.URL()
	cfg.BearerToken = "ignored-by-an-open-symbolizer"
	p := start(t, cfg)

	var resolved int64
	for _, sh := range []otlptest.Shape{otlptest.ShapeEBPF, otlptest.ShapeEBPFZero, otlptest.ShapePprof} {
		t.Run(string(sh), func(t *testing.T) {
			pd, cases := otlptest.BuildRequest(t, sh, bins)
			in := pprofile.NewProfiles()
			pd.CopyTo(in)
			if err := p.proc.ConsumeProfiles(t.Context(), pd); err != nil {
				t.Fatal(err)
			}
			got := p.sink.AllProfiles()
			out := got[len(got)-1]
			if err := otlpprofiles.Validate(out); err != nil {
				t.Fatalf("output invalid: %v", err)
			}
			if err := otlpprofiles.Orphans(out); err != nil {
				t.Fatalf("output dictionary: %v", err)
			}
			resolvedOut := otlptest.Resolve(out)
			if err := otlptest.Compare(otlptest.Resolve(in), resolvedOut); err != nil {
				t.Fatal(err)
			}
			otlptest.CheckFrames(t, resolvedOut, cases)
			for _, s := range resolvedOut {
				attrs := fmt.Sprint(s.Stack[0].MappingAttrs)
				if !strings.Contains(attrs, otlpattr.MappingHasFunctions) || !strings.Contains(attrs, otlpattr.MappingHasLineNumbers) {
					t.Fatalf("symbolized mapping without has_* attributes: %v", attrs)
				}
			}
			resolved += int64(len(cases))
			if n := p.counter(t, metricResolved, ""); n != resolved {
				t.Fatalf("%s = %d, want %d", metricResolved, n, resolved)
			}
		})
	}
	if n := p.counter(t, metricErrors, ""); n != 0 {
		t.Fatalf("%s = %d with a healthy symbolizer", metricErrors, n)
	}
}

// TestProtectedReads: a symbolizer that requires a token for reads answers the processor that
// sends it from bearer_token_file, and refuses one without it, whose data then passes on
// unsymbolized and counted.
func TestProtectedReads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the symbolizer and compiles test binaries")
	}
	bins := otlptest.Binaries(t)[:1]
	sym := testsupport.StartSymbolizer(t, "", "--require-read-token")
	sym.Upload(t, bins[0].Path)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(sym.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		tokenFile string
		reason    string
	}{
		{"token", tokenFile, ""},
		{"no token", "", "symbolizer_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := createDefaultConfig()
			cfg.Endpoint = sym.URL()
			cfg.BearerTokenFile = tc.tokenFile
			p := start(t, cfg)
			pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
			if err := p.proc.ConsumeProfiles(t.Context(), pd); err != nil {
				t.Fatal(err)
			}
			resolved, unsymbolized := p.counter(t, metricResolved, ""), p.counter(t, metricUnsymbolized, tc.reason)
			if tc.reason == "" && resolved != int64(len(cases)) {
				t.Fatalf("%s = %d with the token, want %d", metricResolved, resolved, len(cases))
			}
			if tc.reason != "" && (resolved != 0 || unsymbolized != int64(len(cases))) {
				t.Fatalf("without the token: %d resolved, %d passed on for %s; want 0 and %d", resolved, unsymbolized, tc.reason, len(cases))
			}
		})
	}
}

// TestPassesThroughWhenSymbolizerIsDown: a symbolizer that never answers holds data no longer
// than the deadline, one that refuses connections not at all; either way every sample goes on
// unchanged and the frames are counted as passed through, with the reason.
func TestPassesThroughWhenSymbolizerIsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles test binaries")
	}
	bins := otlptest.Binaries(t)
	var lc net.ListenConfig
	// Accepts connections and never answers: a symbolizer stuck behind a full queue.
	silent, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	// Bound, then closed: connections are refused.
	gone, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneAddr := gone.Addr().String()
	_ = gone.Close()

	const deadline = 400 * time.Millisecond
	for _, tc := range []struct {
		name, endpoint, reason string
		minWait                time.Duration
	}{
		{"silent", "http://" + silent.Addr().String(), "deadline", deadline},
		{"refused", "http://" + goneAddr, "symbolizer_error", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := createDefaultConfig()
			cfg.Endpoint = tc.endpoint
			cfg.Deadline = deadline
			cfg.Timeout = time.Minute // the deadline, not the call timeout, must end the wait
			// Without the hold: it would keep the batch a silent symbolizer leaves unanswered
			// (deadline) up to hold.timeout (TestHoldArriving covers the hold's end).
			cfg.Hold.Enabled = false
			p := start(t, cfg)
			pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
			in := pprofile.NewProfiles()
			pd.CopyTo(in)
			begin := time.Now()
			if err := p.proc.ConsumeProfiles(t.Context(), pd); err != nil {
				t.Fatalf("data refused: %v", err)
			}
			took := time.Since(begin)
			if took < tc.minWait || took > deadline+2*time.Second {
				t.Fatalf("held data %v; deadline %v", took, deadline)
			}
			got := p.sink.AllProfiles()
			if len(got) != 1 || got[0].SampleCount() != len(cases) {
				t.Fatalf("%d requests out, want 1 with %d samples", len(got), len(cases))
			}
			out := otlptest.Resolve(got[0])
			if err := otlptest.Compare(otlptest.Resolve(in), out); err != nil {
				t.Fatal(err)
			}
			for i, s := range out {
				if len(s.Stack[0].Lines) != 0 {
					t.Fatalf("sample %d symbolized without a symbolizer: %+v", i, s.Stack[0])
				}
			}
			if n := p.counter(t, metricUnsymbolized, tc.reason); n != int64(len(cases)) {
				t.Fatalf("%s{reason=%s} = %d, want %d", metricUnsymbolized, tc.reason, n, len(cases))
			}
			if n := p.counter(t, metricErrors, ""); n == 0 {
				t.Fatalf("%s = 0 after failed calls", metricErrors)
			}
			t.Logf("%d frames passed through in %v", len(cases), took)
		})
	}
}

// TestInvalidPassesThrough: a request with an index outside its table, which pdata would
// panic on, goes on as it came and is counted.
func TestInvalidPassesThrough(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Endpoint = "http://127.0.0.1:1"
	p := start(t, cfg)
	pd := pprofile.NewProfiles()
	pd.Dictionary().StringTable().Append("")
	pd.Dictionary().LocationTable().AppendEmpty()
	loc := pd.Dictionary().LocationTable().AppendEmpty()
	loc.SetMappingIndex(7)
	prof := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	prof.Samples().AppendEmpty()
	if err := p.proc.ConsumeProfiles(t.Context(), pd); err != nil {
		t.Fatal(err)
	}
	got := p.sink.AllProfiles()
	if len(got) != 1 || got[0].Dictionary().LocationTable().At(1).MappingIndex() != 7 {
		t.Fatal("invalid request not passed on as it came")
	}
	if n := p.counter(t, metricInvalidBatches, ""); n != 1 {
		t.Fatalf("%s = %d, want 1", metricInvalidBatches, n)
	}
}
