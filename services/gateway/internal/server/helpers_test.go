package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
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

	"github.com/profsym/profsym/services/gateway/internal/server"
)

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
