package server_test

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/gateway/internal/server"
)

// symbolizerDir holds the symbolizer binary once built; TestMain removes it.
var symbolizerDir string

// symbolizerBin is the real symbolizer, built once per test run.
var symbolizerBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "gateway-test-symbolizer-")
	if err != nil {
		return "", err
	}
	symbolizerDir = dir
	out := filepath.Join(dir, "symbolizer")
	// Built once for the whole test binary, so no single test's context applies.
	cmd := exec.CommandContext(context.Background(), "go", "build", "-o", out, "github.com/profsym/profsym/services/symbolizer")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build symbolizer: %w\n%s", err, b)
	}
	return out, nil
})

// realSymbolizer is `symbolizer serve` as a child process, stopped and started on the same
// port and store for the fault drills.
type realSymbolizer struct {
	bin, storeDir, token, redisURL string
	extra                          []string // more flags for serve
	port                           int
	cmd                            *exec.Cmd
	logs                           *os.File
	// t and ctx belong to the test that owns the server: restarts in the drills live as long
	// as that test, not as the subtest that restarts them.
	t   *testing.T
	ctx context.Context
}

func startSymbolizer(t *testing.T, redisURL string, extra ...string) *realSymbolizer {
	t.Helper()
	bin, err := symbolizerBin()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &realSymbolizer{bin: bin, storeDir: filepath.Join(dir, "store"), token: "gateway-test-token", redisURL: redisURL,
		extra: extra, t: t, ctx: t.Context()}
	s.logs, err = os.Create(filepath.Join(dir, "symbolizer.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.port = testsupport.FreePort(t)
	s.Start(t)
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(s.logs.Name())
			t.Logf("symbolizer log:\n%s", b[max(0, len(b)-4000):])
		}
		s.logs.Close()
	})
	return s
}

func (s *realSymbolizer) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.port) }

// Start runs the server and waits for /readyz; a port taken meanwhile by someone else gets a
// new port.
func (s *realSymbolizer) Start(t *testing.T) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		args := []string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", s.port), "--store-dir", s.storeDir,
			"--upload-token", s.token, "--log-level", "warn"}
		if s.redisURL != "" {
			args = append(args, "--redis-url", s.redisURL, "--redis-timeout", "100ms")
		}
		args = append(args, s.extra...)
		cmd := exec.CommandContext(s.ctx, s.bin, args...)
		cmd.Stdout, cmd.Stderr = s.logs, s.logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		// An early exit shows through exited; the log says why.
		go func() { _ = cmd.Wait(); close(exited) }()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				if attempt < 3 {
					s.port = testsupport.FreePort(t)
					goto retry
				}
				t.Fatal("symbolizer exited during start; see its log")
			default:
			}
			req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, s.URL()+"/readyz", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					s.cmd = cmd
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Errorf("kill symbolizer: %v", err)
		}
		t.Fatal("symbolizer not ready after 20s")
	retry:
	}
}

// Stop kills the server (SIGKILL: the drills want an abrupt outage) and waits for it.
func (s *realSymbolizer) Stop() {
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Errorf("kill symbolizer: %v", err)
	}
	for range 200 {
		if s.cmd.ProcessState != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd = nil
}

// Upload sends files with the real upload client; flags such as --type may stand among the
// paths.
func (s *realSymbolizer) Upload(t *testing.T, paths ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), s.bin, append([]string{"upload", "--server", s.URL(), "--token", s.token, "--progress", "plain"}, paths...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("symbolizer upload: %v\n%s", err, b)
	}
}

// sink is a downstream OTLP/gRPC endpoint that records what it receives; it can be stopped
// and started on the same port.
type sink struct {
	pprofileotlp.UnimplementedGRPCServer
	mu       sync.Mutex
	addr     string
	srv      *grpc.Server
	requests []pprofile.Profiles
	samples  atomic.Int64
	reject   atomic.Bool
}

func startSink(t *testing.T) *sink {
	t.Helper()
	s := &sink{addr: "127.0.0.1:0"}
	s.Start(t)
	t.Cleanup(s.Stop)
	return s
}

func (s *sink) Start(t *testing.T) {
	var ln net.Listener
	var err error
	var lc net.ListenConfig
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
	srv := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(srv, s)
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

func (s *sink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	if s.reject.Load() {
		return pprofileotlp.NewExportResponse(), status.Error(codes.Unavailable, "sink busy")
	}
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

func (s *sink) waitSamples(t *testing.T, n int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for s.samples.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("sink has %d samples after %v, want %d", s.samples.Load(), timeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type gateway struct {
	*server.Server
	grpcAddr, httpAddr, adminAddr string
	client                        pprofileotlp.GRPCClient
}

func startGateway(t *testing.T, cfg server.Config) *gateway {
	t.Helper()
	cfg.GRPCListen, cfg.HTTPListen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	if cfg.OTLPGRPCEndpoint != "" {
		cfg.OTLPInsecure = true
		cfg.OTLPGzip = true
	}
	if cfg.RetryMinBackoff == 0 {
		cfg.RetryMinBackoff, cfg.RetryMaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gateway{Server: srv}
	g.grpcAddr, g.httpAddr, g.adminAddr = srv.Addrs()
	cc, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	g.client = pprofileotlp.NewGRPCClient(cc)
	t.Cleanup(func() {
		if err := cc.Close(); err != nil {
			t.Errorf("close gateway client: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return g
}

// post sends an OTLP/HTTP profiles body to url; the caller closes the response body.
func post(ctx context.Context, c *http.Client, url string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	return c.Do(req)
}

func (g *gateway) send(ctx context.Context, pd pprofile.Profiles) error {
	_, err := g.client.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd))
	return err
}

// llvmFrame is one frame of llvm-symbolizer's JSON output.
type llvmFrame struct {
	FunctionName string
	FileName     string
	Line         int64
	Column       int64
}

// llvmSymbolize runs llvm-symbolizer (the reference) on ELF virtual addresses of path.
func llvmSymbolize(t *testing.T, path string, vaddrs []uint64) [][]llvmFrame {
	t.Helper()
	var in strings.Builder
	for _, a := range vaddrs {
		fmt.Fprintf(&in, "0x%x\n", a)
	}
	cmd := exec.CommandContext(t.Context(), "llvm-symbolizer", "--output-style=JSON", "--inlining", "--obj="+path)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	var res [][]llvmFrame
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct{ Symbol []llvmFrame }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("llvm-symbolizer output %q: %v", line, err)
		}
		var fr []llvmFrame
		for _, f := range r.Symbol {
			if f.FunctionName != "" || f.Line != 0 {
				fr = append(fr, f)
			}
		}
		res = append(res, fr)
	}
	if len(res) != len(vaddrs) {
		t.Fatalf("llvm-symbolizer answered %d of %d addresses", len(res), len(vaddrs))
	}
	return res
}

// symbolRange returns the ELF virtual address range of a function symbol.
func symbolRange(t *testing.T, path, name string) (uint64, uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 {
			return s.Value, s.Value + s.Size
		}
	}
	t.Fatalf("%s: no function symbol %s", path, name)
	return 0, 0
}

// execLoad returns the executable PT_LOAD segment of path.
func execLoad(t *testing.T, path string) elf.ProgHeader {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return p.ProgHeader
		}
	}
	t.Fatalf("%s: no executable PT_LOAD", path)
	return elf.ProgHeader{}
}

func ids(t *testing.T, path string) buildid.IDs {
	t.Helper()
	ids, err := buildid.FromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func compile(t *testing.T, dir, src string, args ...string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srcPath := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "prog")
	cmd := exec.CommandContext(t.Context(), "gcc", append([]string{"-o", out, srcPath}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return out
}

func buildGo(t *testing.T, dir, src string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gwtest\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "gwtest")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}
