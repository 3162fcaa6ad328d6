package downstreamwatch

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

type harness struct {
	w    *Watch
	tel  *componenttest.Telemetry
	logs *observer.ObservedLogs
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	core, logs := observer.New(zapcore.InfoLevel)
	set := extensiontest.NewNopSettings(Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	set.Logger = zap.New(core)
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w, err := newWatch(set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{w: w, tel: tel, logs: logs}
}

// lines lists the log lines as "level message".
func (h *harness) lines() []string {
	var out []string
	for _, l := range h.logs.All() {
		out = append(out, l.Level.String()+" "+l.Message)
	}
	return out
}

// gauge is otelcol_downstream_degraded for endpoint.
func (h *harness) gauge(t *testing.T, endpoint string) int64 {
	t.Helper()
	m, err := h.tel.GetMetric(MetricName)
	if err != nil {
		t.Fatal(err)
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T", MetricName, m.Data)
	}
	for _, dp := range sum.DataPoints {
		if v, _ := dp.Attributes.Value("endpoint"); v.AsString() == endpoint {
			return dp.Value
		}
	}
	t.Fatalf("no %s series for %s", MetricName, endpoint)
	return 0
}

// An OTLP/gRPC downstream that fails some exports and then takes them again: one WARN when
// the failures start, one INFO when an export succeeds, the gauge 1 in between; successes
// alone say nothing.
func TestGRPCDownstreamOutageLoggedOnce(t *testing.T) {
	h := newHarness(t)
	var down atomic.Bool
	srv := otlptest.NewProfilesServer(func(context.Context, pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
		if down.Load() {
			return pprofileotlp.NewExportResponse(), status.Error(codes.Unavailable, "backend restarting")
		}
		return pprofileotlp.NewExportResponse(), nil
	})
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	opts, err := h.w.GetGRPCClientOptions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(ln.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := pprofileotlp.NewGRPCClient(cc)
	export := func() error {
		_, err := client.Export(t.Context(), pprofileotlp.NewExportRequestFromProfiles(pprofile.NewProfiles()))
		return err
	}
	for range 3 {
		if err := export(); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.lines(); len(got) != 0 {
		t.Fatalf("log lines while the downstream takes everything: %q", got)
	}
	down.Store(true)
	for range 20 {
		if err := export(); status.Code(err) != codes.Unavailable {
			t.Fatalf("export to a failing downstream: %v", err)
		}
	}
	if g := h.gauge(t, ln.Addr().String()); g != 1 {
		t.Fatalf("gauge during the outage: %d, want 1", g)
	}
	down.Store(false)
	if err := export(); err != nil {
		t.Fatal(err)
	}
	want := []string{"warn downstream " + ln.Addr().String() + " degraded: exports are queued and retried",
		"info downstream " + ln.Addr().String() + " recovered"}
	if got := h.lines(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("log lines %q, want %q", got, want)
	}
	if end := h.logs.All()[1].ContextMap(); end["failures"] != int64(20) {
		t.Fatalf("end line %v, want 20 failures", end)
	}
	if g := h.gauge(t, ln.Addr().String()); g != 0 {
		t.Fatalf("gauge after the outage: %d, want 0", g)
	}
}

// The OTLP/HTTP exporter's side: 503 and 429 answers and transport errors are failures, a
// 200 ends the outage; a 400 is the request's fault, not the downstream's, and ends it too.
func TestHTTPDownstreamOutage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		code   int
		failed bool
	}{
		{"unavailable", http.StatusServiceUnavailable, true},
		{"too many requests", http.StatusTooManyRequests, true},
		{"bad request", http.StatusBadRequest, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			var code atomic.Int64
			code.Store(int64(tc.code))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(int(code.Load()))
			}))
			defer srv.Close()
			wrap, err := h.w.GetHTTPRoundTripper(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			rt, err := wrap(t.Context(), http.DefaultTransport)
			if err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: rt}
			post := func() {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1development/profiles", nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			post()
			post()
			host := srv.Listener.Addr().String()
			if tc.failed {
				if g := h.gauge(t, host); g != 1 {
					t.Fatalf("gauge after HTTP %d: %d, want 1", tc.code, g)
				}
			} else if len(h.lines()) != 0 {
				t.Fatalf("HTTP %d logged as a downstream outage: %q", tc.code, h.lines())
			}
			code.Store(http.StatusOK)
			post()
			if g := h.gauge(t, host); g != 0 {
				t.Fatalf("gauge after HTTP 200: %d, want 0", g)
			}
			if tc.failed && h.logs.FilterMessage("downstream "+host+" recovered").Len() != 1 {
				t.Fatalf("no end of the outage logged: %q", h.lines())
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (&Config{}).Validate(); err == nil {
		t.Fatal("a zero summary_interval accepted")
	}
	if err := componenttest.CheckConfigStruct(NewFactory().CreateDefaultConfig()); err != nil {
		t.Fatal(err)
	}
}
