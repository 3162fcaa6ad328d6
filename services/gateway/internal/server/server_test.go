package server_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/gateway/internal/receiver"
	"github.com/profsym/profsym/services/gateway/internal/server"
)

type httpSink struct {
	mu      sync.Mutex
	got     []pprofile.Profiles
	headers []http.Header
}

func (h *httpSink) Consume(_ context.Context, pd pprofile.Profiles, _ string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, pd)
	return nil
}

// TestPassThroughExporters: with symbolization disabled every exporter delivers exactly what
// came in, and malformed requests are refused with the problem named.
func TestPassThroughExporters(t *testing.T) {
	hs := &httpSink{}
	inner := receiver.HTTPHandler(hs, 64<<20)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hs.mu.Lock()
		hs.headers = append(hs.headers, r.Header.Clone())
		hs.mu.Unlock()
		inner.ServeHTTP(w, r)
	}))
	defer down.Close()
	sk := startSink(t)
	outDir := t.TempDir()
	g := startGateway(t, server.Config{OTLPGRPCEndpoint: sk.addr, OTLPHTTPEndpoint: down.URL, OTLPGzip: true,
		OTLPHeaders: map[string]string{"X-Tenant": "t1"}, OutputDir: outDir})

	r := rand.New(rand.NewPCG(11, 12))
	var want [][]otlptest.Sample
	var samples int64
	for range 5 {
		pd := otlptest.Generate(r)
		want = append(want, otlptest.Resolve(pd))
		samples += int64(pd.SampleCount())
		if err := g.send(context.Background(), pd); err != nil {
			t.Fatal(err)
		}
	}
	sk.waitSamples(t, samples, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		hs.mu.Lock()
		n := len(hs.got)
		hs.mu.Unlock()
		files, _ := filepath.Glob(filepath.Join(outDir, "*.otlp.pb"))
		if n == 5 && len(files) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("http exporter delivered %d, file exporter %d of 5", n, len(files))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Export workers run concurrently, so match requests by content, not arrival order.
	check := func(kind string, got []pprofile.Profiles) {
		t.Helper()
		for _, pd := range got {
			out := otlptest.Resolve(pd)
			found := false
			for _, w := range want {
				if otlptest.Compare(w, out) == nil {
					found = true
					for i := range w {
						for j := range w[i].Stack {
							if len(w[i].Stack[j].Lines) != len(out[i].Stack[j].Lines) {
								t.Fatalf("%s: lines added with symbolization disabled", kind)
							}
						}
					}
				}
			}
			if !found {
				t.Fatalf("%s delivered a request that matches none sent", kind)
			}
		}
	}
	check("otlp grpc", sk.received())
	check("otlp http", hs.got)
	if hs.headers[0].Get("X-Tenant") != "t1" || hs.headers[0].Get("Content-Encoding") != "gzip" {
		t.Fatalf("otlp http headers %v", hs.headers[0])
	}
	files, _ := filepath.Glob(filepath.Join(outDir, "*.otlp.pb"))
	var fromFiles []pprofile.Profiles
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
		if err != nil {
			t.Fatal(err)
		}
		fromFiles = append(fromFiles, pd)
	}
	check("file", fromFiles)

	bad := otlptest.Generate(r)
	bad.Dictionary().LocationTable().At(1).SetMappingIndex(4000)
	err := g.send(context.Background(), bad)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "location_table[1].mapping_index: 4000") {
		t.Fatalf("malformed request: %v; want InvalidArgument naming location_table[1].mapping_index", err)
	}

	for path, want := range map[string]string{
		"/healthz": "ok",
		"/readyz":  "ready",
		"/metrics": `profsym_gateway_requests_total{outcome="invalid",transport="grpc"} 1`,
	} {
		code, body := getAdmin(t, g, path)
		if code != 200 || !strings.Contains(string(body), want) {
			t.Fatalf("%s: %d %q lacks %q", path, code, body, want)
		}
		if path == "/metrics" {
			for _, m := range []string{"profsym_gateway_samples_received_total", "profsym_gateway_samples_exported_total",
				"profsym_gateway_locations_seen_total", "profsym_gateway_locations_unresolved_total", "profsym_gateway_queue_bytes"} {
				if !strings.Contains(string(body), m) {
					t.Fatalf("metrics lack %s", m)
				}
			}
		}
	}
}

// TestAdminPprof: runtime profiles are served on the admin address only when asked for.
func TestAdminPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		g := startGateway(t, server.Config{AdminPprof: on, OutputDir: t.TempDir()})
		code, body := getAdmin(t, g, "/debug/pprof/goroutine?debug=1")
		served := code == http.StatusOK && strings.Contains(string(body), "goroutine profile")
		if served != on {
			t.Fatalf("--admin-pprof=%v: %d %.80q", on, code, body)
		}
	}
}

func TestGzipLevelChecked(t *testing.T) {
	_, err := server.New(server.Config{OTLPGzipLevel: 12, OutputDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "--otlp-gzip-level: gzip level 12: want 1 (fastest) to 9 (smallest)") {
		t.Fatalf("level 12: %v", err)
	}
}

// getAdmin GETs path from the gateway's admin address.
func getAdmin(t *testing.T, g *gateway, path string) (int, []byte) {
	t.Helper()
	return testsupport.Get(t, "http://"+g.adminAddr+path)
}
