package server_test

import (
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
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

	"connectrpc.com/connect"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/services/gateway/internal/server"
)

// localSymbolizer answers the Symbolize API from binaries on disk with pkg/debuginfo, the
// engine the symbolizer service runs, served by the generated Connect handler on a port that
// survives Stop/Start (for the fault drills).
type localSymbolizer struct {
	symbolizerv1connect.UnimplementedSymbolizerServiceHandler
	mu    sync.Mutex
	bins  map[string]*localBin
	addr  string
	srv   *http.Server
	calls atomic.Int64
}

type localBin struct {
	ix    *index.Index
	loads []addrmap.Load
}

func startLocalSymbolizer(t *testing.T) *localSymbolizer {
	t.Helper()
	l := &localSymbolizer{bins: map[string]*localBin{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.addr = ln.Addr().String()
	l.serve(ln)
	t.Cleanup(l.Stop)
	return l
}

func (l *localSymbolizer) serve(ln net.Listener) {
	mux := http.NewServeMux()
	mux.Handle(symbolizerv1connect.NewSymbolizerServiceHandler(l))
	srv := &http.Server{Handler: mux}
	l.mu.Lock()
	l.srv = srv
	l.mu.Unlock()
	go srv.Serve(ln)
}

func (l *localSymbolizer) URL() string { return "http://" + l.addr }

// Stop closes the listener and every connection.
func (l *localSymbolizer) Stop() {
	l.mu.Lock()
	srv := l.srv
	l.srv = nil
	l.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Start listens again on the same address.
func (l *localSymbolizer) Start(t *testing.T) {
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", l.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("restart symbolizer: %v", err)
	}
	l.serve(ln)
}

func (l *localSymbolizer) Upload(t *testing.T, path string) {
	t.Helper()
	b, err := debuginfo.Open(path, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := b.Index()
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	lb := &localBin{ix: ix, loads: addrmap.LoadsOf(ef)}
	ids := b.IDs()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range []string{ids.GNU, ids.Go, ids.HTLHash} {
		if id != "" {
			l.bins[id] = lb
		}
	}
}

func (l *localSymbolizer) Symbolize(_ context.Context, req *connect.Request[symbolizerv1.SymbolizeRequest]) (*connect.Response[symbolizerv1.SymbolizeResponse], error) {
	l.calls.Add(1)
	resp := &symbolizerv1.SymbolizeResponse{}
	for _, m := range req.Msg.GetModules() {
		l.mu.Lock()
		var b *localBin
		for _, id := range []string{m.GetGnuBuildId(), m.GetGoBuildId(), m.GetHtlhash()} {
			if b == nil && id != "" {
				b = l.bins[id]
			}
		}
		l.mu.Unlock()
		r := &symbolizerv1.ModuleResult{Locations: make([]*symbolizerv1.Location, len(m.GetAddresses()))}
		resp.Modules = append(resp.Modules, r)
		if b == nil {
			r.Status = symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND
			continue
		}
		r.Status = symbolizerv1.ModuleStatus_MODULE_STATUS_OK
		r.Fidelity = symbolizerv1.Fidelity(b.ix.Fidelity())
		mp := addrmap.Mapping{Start: m.GetMemoryStart(), Limit: m.GetMemoryLimit(), Offset: m.GetFileOffset()}
		for i, a := range m.GetAddresses() {
			loc := &symbolizerv1.Location{}
			r.Locations[i] = loc
			va, err := addrmap.Normalize(a, mp, b.loads)
			if err != nil {
				continue
			}
			for _, f := range b.ix.Lookup(va) {
				loc.Frames = append(loc.Frames, &symbolizerv1.Frame{FunctionName: f.Function, LinkageName: f.LinkageName,
					File: f.File, Line: f.Line, Column: f.Column, StartLine: f.StartLine})
			}
		}
	}
	return connect.NewResponse(resp), nil
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
	for range 50 {
		if ln, err = net.Listen("tcp", s.addr); err == nil {
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
	go srv.Serve(ln)
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
		cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return g
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
	cmd := exec.Command("llvm-symbolizer", "--output-style=JSON", "--inlining", "--obj="+path)
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

func compile(t *testing.T, src string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	srcPath := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "prog")
	cmd := exec.Command("gcc", append([]string{"-o", out, srcPath}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return out
}

func buildGo(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gwtest\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "gwtest")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}
