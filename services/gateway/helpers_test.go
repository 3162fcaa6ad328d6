package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
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

	// The OTLP exporter compresses with gzip by default; the sink, like a backend, decompresses.
	_ "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/demo/pipeline"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// TestMain removes what the shared fixtures left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, remove := range []func() error{otlptest.RemoveFixtures, testsupport.RemoveFixtures, removeGatewayBinary} {
		if err := remove(); err != nil {
			fmt.Fprintf(os.Stderr, "remove test fixtures: %v\n", err)
		}
	}
	os.Exit(code)
}

var gatewayDir string

// gatewayBin is this package built once per test binary: the tests run the gateway as it ships,
// a separate process that can be killed with SIGKILL.
var gatewayBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "test-gateway-")
	if err != nil {
		return "", err
	}
	gatewayDir = dir
	out := filepath.Join(dir, "gateway")
	// Built once for the whole test binary, so no single test's context applies.
	cmd := exec.CommandContext(context.Background(), "go", "build", "-o", out, ".")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build gateway: %w\n%s", err, b)
	}
	return out, nil
})

func removeGatewayBinary() error {
	if gatewayDir == "" {
		return nil
	}
	return os.RemoveAll(gatewayDir)
}

// sink is a downstream OTLP/gRPC endpoint that records what it receives; it can be stopped
// and started again on the same port.
type sink struct {
	mu       sync.Mutex
	addr     string
	srv      *grpc.Server
	requests []pprofile.Profiles
	samples  atomic.Int64
}

func startSink(t *testing.T) *sink {
	t.Helper()
	s := &sink{addr: "127.0.0.1:0"}
	s.Start(t)
	t.Cleanup(s.Stop)
	return s
}

func (s *sink) Start(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	var lc net.ListenConfig
	// The port of a stopped sink may still be held for a moment: retry.
	for range 50 {
		if ln, err = lc.Listen(t.Context(), "tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("sink listen: %v", err)
	}
	s.addr = ln.Addr().String()
	srv := otlptest.NewProfilesServer(s.Export)
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() {
		// Serve outlives the calling test's body, so its failure is logged, not reported to t.
		if err := srv.Serve(ln); err != nil {
			slog.Error("test sink stopped serving", "addr", s.addr, "err", err)
		}
	}()
}

func (s *sink) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// GracefulStop stops the sink after answering the requests it is serving: a downstream that
// goes away between requests. (Stop cuts them off; a request the sink recorded but could not
// answer is sent again, which is at-least-once delivery, not loss.)
func (s *sink) GracefulStop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.GracefulStop()
	}
}

func (s *sink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	c := pprofile.NewProfiles()
	req.Profiles().CopyTo(c)
	s.mu.Lock()
	s.requests = append(s.requests, c)
	s.mu.Unlock()
	s.samples.Add(int64(c.SampleCount()))
	return pprofileotlp.NewExportResponse(), nil
}

func (s *sink) received() []pprofile.Profiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pprofile.Profiles(nil), s.requests...)
}

// settle waits until the sink has sent samples, then a little longer to see that no more come
// (duplicates would be a broken promise too).
func (s *sink) settle(t *testing.T, sent int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for s.samples.Load() < sent {
		if time.Now().After(deadline) {
			t.Fatalf("sink has %d samples after %v, want %d", s.samples.Load(), timeout, sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if got := s.samples.Load(); got != sent {
		t.Fatalf("%d samples in, %d out", sent, got)
	}
}

// gwConfig is what a test varies in the gateway's configuration.
type gwConfig = pipeline.GatewayConfig

// gateway is the gateway binary running as a child process.
type gateway struct {
	t                              *testing.T
	proc                           *pipeline.Proc
	configPath, logPath            string
	ports                          pipeline.GatewayPorts
	grpcAddr, httpAddr, metricsURL string
	client                         pprofileotlp.GRPCClient
}

func startGateway(t *testing.T, cfg gwConfig) *gateway {
	t.Helper()
	bin, err := gatewayBin()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	dir := t.TempDir()
	g := &gateway{t: t, configPath: filepath.Join(dir, "config.yaml"), logPath: filepath.Join(dir, "gateway.log")}
	proc, ports, err := pipeline.StartGateway(t.Context(), bin, g.configPath, g.logPath, cfg, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g.proc, g.ports = proc, ports
	g.grpcAddr, g.httpAddr, g.metricsURL = ports.GRPCAddr(), ports.HTTPAddr(), ports.MetricsURL()
	cc, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	g.client = pprofileotlp.NewGRPCClient(cc)
	t.Cleanup(func() {
		if err := cc.Close(); err != nil {
			t.Errorf("close gateway client: %v", err)
		}
		if err := g.proc.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Errorf("stop gateway: %v", err)
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.proc.Tail(60))
		}
	})
	return g
}

// kill ends the gateway with SIGKILL: no shutdown, no flush.
func (g *gateway) kill() {
	g.t.Helper()
	if err := g.proc.Stop(syscall.SIGKILL, 5*time.Second); err != nil {
		g.t.Fatalf("kill gateway: %v", err)
	}
}

// restart starts the gateway again with the same configuration and ports.
func (g *gateway) restart() {
	g.t.Helper()
	bin, err := gatewayBin()
	if err != nil {
		g.t.Fatal(err)
	}
	proc, err := pipeline.RestartGateway(g.t.Context(), bin, g.configPath, g.logPath+".restarted", g.ports, 60*time.Second)
	if err != nil {
		g.t.Fatal(err)
	}
	g.proc = proc
}

func (g *gateway) send(ctx context.Context, pd pprofile.Profiles) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := g.client.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd))
	return err
}

// sendRetry sends until the gateway accepts, as an OTLP client does on UNAVAILABLE, and returns
// how many times it was pushed back.
func (g *gateway) sendRetry(t *testing.T, pd pprofile.Profiles) int {
	t.Helper()
	pushedBack := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := g.send(t.Context(), pd)
		if err == nil {
			return pushedBack
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("send: %v (pushed back %d times)", err, pushedBack)
		}
		pushedBack++
		time.Sleep(50 * time.Millisecond)
	}
}

// series is one line of a Prometheus text exposition.
type series struct {
	name, labels string
	value        float64
}

// scrape is what /metrics said at one moment.
type scrape []series

// sum adds the values of the series named name whose labels contain every one of labels
// (written as they appear, such as `exporter="otlp_grpc"`).
func (s scrape) sum(name string, labels ...string) float64 {
	v := 0.0
next:
	for _, x := range s {
		if x.name != name {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(x.labels, l) {
				continue next
			}
		}
		v += x.value
	}
	return v
}

// pipelineSeries lists the receiver and exporter series, for a failure message.
func (s scrape) pipelineSeries() []string {
	var out []string
	for _, x := range s {
		if (strings.HasPrefix(x.name, "otelcol_receiver_") || strings.HasPrefix(x.name, "otelcol_exporter_")) && !strings.Contains(x.name, "_bucket") {
			out = append(out, fmt.Sprintf("%s%s=%v", x.name, x.labels, x.value))
		}
	}
	return out
}

// metrics scrapes the gateway's /metrics.
func (g *gateway) metrics(t *testing.T) scrape {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, g.metricsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", g.metricsURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", g.metricsURL, resp.Status)
	}
	var out scrape
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		x := series{name: line[:sp], value: v}
		if i := strings.IndexByte(x.name, '{'); i >= 0 {
			x.name, x.labels = x.name[:i], x.name[i:]
		}
		out = append(out, x)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scrape %s: %v", g.metricsURL, err)
	}
	return out
}

// post sends body to the OTLP/HTTP receiver.
func (g *gateway) post(t *testing.T, method, path, contentType string, body []byte) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+g.httpAddr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// postProfiles sends pd to the OTLP/HTTP receiver as protobuf and returns the status code.
func (g *gateway) postProfiles(t *testing.T, pd pprofile.Profiles) int {
	t.Helper()
	body, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	return g.post(t, http.MethodPost, "/v1development/profiles", "application/x-protobuf", body)
}

// startWithOneBinary starts a symbolizer holding the first of the shared test binaries, and a
// downstream sink: what most drills run a gateway between.
func startWithOneBinary(t *testing.T) ([]otlptest.Binary, *testsupport.Symbolizer, *sink) {
	t.Helper()
	b := otlptest.Binaries(t)[:1]
	sym := testsupport.StartSymbolizer(t, "")
	sym.Upload(t, b[0].Path)
	return b, sym, startSink(t)
}
