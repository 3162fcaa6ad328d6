// Package server wires the gateway: receivers -> validation -> symbolization -> export queues,
// plus the admin endpoints (/healthz, /readyz, Prometheus /metrics).
package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/services/gateway/internal/exporter"
	"github.com/profsym/profsym/services/gateway/internal/gzipcodec"
	"github.com/profsym/profsym/services/gateway/internal/queue"
	"github.com/profsym/profsym/services/gateway/internal/receiver"
)

// Config is everything the gateway needs; main fills it from flags.
type Config struct {
	GRPCListen, HTTPListen, AdminListen string
	// AdminPprof serves net/http/pprof on the admin listener, which carries no request data
	// and is not meant to be exposed beyond the cluster.
	AdminPprof bool
	// TLSCert and TLSKey, when both set, make both receivers serve TLS.
	TLSCert, TLSKey string
	// TLSClientCA, a PEM bundle, makes both receivers require a client certificate signed by
	// one of its CAs (mutual TLS): without it anyone who reaches the port may send profiles.
	TLSClientCA     string
	MaxRequestBytes int64

	// SymbolizerURL is the symbolizer's base URL; empty disables symbolization.
	SymbolizerURL        string
	SymbolizerToken      string
	SymbolizeTimeout     time.Duration
	SymbolizeBatch       int
	SymbolizeConcurrency int
	SymbolCacheEntries   int

	OTLPGRPCEndpoint       string
	OTLPHTTPEndpoint       string
	OTLPHeaders            map[string]string
	OTLPInsecure           bool
	OTLPCAFile             string
	OTLPInsecureSkipVerify bool
	OTLPGzip               bool
	// OTLPGzipLevel is the gzip level of exports, 1 (fastest) to 9 (smallest); 0 means
	// gzipcodec.DefaultLevel. It is process-wide: gRPC's compressors are.
	OTLPGzipLevel int
	ExportTimeout time.Duration
	OutputDir     string
	PprofDir      string
	// OutputKeepFiles bounds the files kept in each of OutputDir and PprofDir (0: all).
	OutputKeepFiles int
	QueueBytes      int64
	ExportWorkers   int
	// RetryMinBackoff and RetryMaxBackoff bound the delay between export attempts.
	RetryMinBackoff, RetryMaxBackoff time.Duration
}

// Server is a running gateway.
type Server struct {
	cfg       Config
	metrics   *Metrics
	sym       *symbolize.Symbolizer
	group     *queue.Group
	exporters []exporter.Exporter

	grpcSrv   *grpc.Server
	httpSrv   *http.Server
	adminSrv  *http.Server
	listeners []net.Listener
	ready     atomic.Bool
	wg        sync.WaitGroup
}

// New builds the gateway's parts; Start binds and serves.
func New(cfg Config) (*Server, error) {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 16 << 20
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 256 << 20
	}
	if cfg.OTLPGzipLevel == 0 {
		cfg.OTLPGzipLevel = gzipcodec.DefaultLevel
	}
	if err := gzipcodec.SetLevel(cfg.OTLPGzipLevel); err != nil {
		return nil, fmt.Errorf("--otlp-gzip-level: %w", err)
	}
	s := &Server{cfg: cfg, metrics: newMetrics()}

	scfg := symbolize.Config{
		Timeout:        cfg.SymbolizeTimeout,
		BatchAddresses: cfg.SymbolizeBatch,
		Concurrency:    cfg.SymbolizeConcurrency,
		CacheEntries:   cfg.SymbolCacheEntries,
		OnCall: func(d time.Duration, err error) {
			outcome := "ok"
			if err != nil {
				outcome = strings.ToLower(connect.CodeOf(err).String())
			}
			s.metrics.SymbolizerLatency.WithLabelValues(outcome).Observe(d.Seconds())
		},
	}
	if cfg.SymbolizerURL != "" {
		hc := &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConns:        64,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}}
		scfg.Client = symbolize.NewClient(hc, cfg.SymbolizerURL, cfg.SymbolizerToken)
	}
	s.sym = symbolize.New(scfg)

	ocfg := exporter.OTLPConfig{
		Headers: cfg.OTLPHeaders, Insecure: cfg.OTLPInsecure, CAFile: cfg.OTLPCAFile,
		InsecureSkipVerify: cfg.OTLPInsecureSkipVerify, Gzip: cfg.OTLPGzip, Timeout: cfg.ExportTimeout,
	}
	if cfg.OTLPGRPCEndpoint != "" {
		c := ocfg
		c.Endpoint = cfg.OTLPGRPCEndpoint
		e, err := exporter.NewGRPC(c)
		if err != nil {
			return nil, err
		}
		s.exporters = append(s.exporters, e)
	}
	if cfg.OTLPHTTPEndpoint != "" {
		c := ocfg
		c.Endpoint = cfg.OTLPHTTPEndpoint
		e, err := exporter.NewHTTP(c)
		if err != nil {
			return nil, err
		}
		s.exporters = append(s.exporters, e)
	}
	if cfg.OutputDir != "" {
		e, err := exporter.NewFile(cfg.OutputDir)
		if err != nil {
			return nil, err
		}
		e.KeepFiles(cfg.OutputKeepFiles)
		s.exporters = append(s.exporters, e)
	}
	if cfg.PprofDir != "" {
		e, err := exporter.NewPprof(cfg.PprofDir)
		if err != nil {
			return nil, err
		}
		e.KeepFiles(cfg.OutputKeepFiles)
		s.exporters = append(s.exporters, e)
	}
	if len(s.exporters) == 0 {
		return nil, errors.New("no exporter configured: set --otlp-grpc-endpoint, --otlp-http-endpoint, --output-dir or --pprof-dir")
	}
	var queues []*queue.Queue
	for _, e := range s.exporters {
		name := e.Name()
		q := queue.New(queue.Config{
			Name: name, MaxBytes: cfg.QueueBytes, Workers: cfg.ExportWorkers,
			MinBackoff: cfg.RetryMinBackoff, MaxBackoff: cfg.RetryMaxBackoff,
			Hooks: queue.Hooks{
				Sent: func(it queue.Item) { s.metrics.SamplesOut.WithLabelValues(name).Add(float64(it.Samples)) },
				Failed: func(it queue.Item, _ error, permanent bool) {
					kind := "retryable"
					if permanent {
						kind = "permanent"
						s.metrics.SamplesLost.WithLabelValues(name, "rejected").Add(float64(it.Samples))
					}
					s.metrics.ExportFailures.WithLabelValues(name, kind).Inc()
				},
				Lost: func(it queue.Item) { s.metrics.SamplesLost.WithLabelValues(name, "shutdown").Add(float64(it.Samples)) },
			},
		}, func(ctx context.Context, it queue.Item) error { return e.Export(ctx, it.Profiles) })
		s.metrics.watchQueue(q)
		queues = append(queues, q)
	}
	s.group = queue.NewGroup(queues...)
	return s, nil
}

// Metrics returns the gateway's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Symbolizer returns the gateway's symbolizer client.
func (s *Server) Symbolizer() *symbolize.Symbolizer { return s.sym }

// Consume validates, symbolizes and queues one request. It implements receiver.Consumer.
func (s *Server) Consume(ctx context.Context, pd pprofile.Profiles, transport string) error {
	start := time.Now()
	if !s.ready.Load() {
		s.metrics.Requests.WithLabelValues(transport, "unavailable").Inc()
		return fmt.Errorf("%w: gateway is shutting down", receiver.ErrUnavailable)
	}
	if err := otlpprofiles.Validate(pd); err != nil {
		s.metrics.Requests.WithLabelValues(transport, "invalid").Inc()
		return fmt.Errorf("%w: %w", receiver.ErrInvalid, err)
	}
	samples := pd.SampleCount()
	rep := s.sym.Process(ctx, pd)
	s.metrics.LocationsSeen.Add(float64(rep.Seen))
	s.metrics.LocationsSymbol.Add(float64(rep.Symbolized))
	s.metrics.CacheHits.Add(float64(rep.CacheHits))
	for reason, n := range rep.Unresolved {
		s.metrics.LocationsUnres.WithLabelValues(reason).Add(float64(n))
	}
	// Several exporters read the same request concurrently; read-only makes the marshalers
	// copy before they rewrite attributes into string-table references.
	pd.MarkReadOnly()
	size := int64((&pprofile.ProtoMarshaler{}).ProfilesSize(pd))
	if err := s.group.Offer(queue.Item{Profiles: pd, Bytes: size, Samples: samples}); err != nil {
		s.metrics.Requests.WithLabelValues(transport, "unavailable").Inc()
		return fmt.Errorf("%w: %w", receiver.ErrUnavailable, err)
	}
	s.metrics.SamplesIn.Add(float64(samples))
	s.metrics.Requests.WithLabelValues(transport, "ok").Inc()
	s.metrics.RequestLatency.WithLabelValues(transport).Observe(time.Since(start).Seconds())
	return nil
}

// Start binds the listeners and serves in the background.
func (s *Server) Start() error {
	var tlsCfg *tls.Config
	if s.cfg.TLSCert != "" || s.cfg.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
		if err != nil {
			return fmt.Errorf("load TLS certificate: %w", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if s.cfg.TLSClientCA != "" {
			pem, err := os.ReadFile(s.cfg.TLSClientCA)
			if err != nil {
				return fmt.Errorf("read client CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("client CA %s: no PEM certificate in it", s.cfg.TLSClientCA)
			}
			tlsCfg.ClientCAs = pool
			tlsCfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	} else if s.cfg.TLSClientCA != "" {
		return errors.New("a client CA needs TLS on the receivers: set --tls-cert and --tls-key too")
	}
	// A bind does not block, so there is nothing for a context to cancel.
	var lc net.ListenConfig
	listen := func(addr string) (net.Listener, error) {
		l, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		s.listeners = append(s.listeners, l)
		return l, nil
	}
	fail := func(err error) error {
		errs := []error{err}
		for _, l := range s.listeners {
			if cerr := l.Close(); cerr != nil {
				errs = append(errs, fmt.Errorf("close listener %s: %w", l.Addr(), cerr))
			}
		}
		return errors.Join(errs...)
	}

	gopts := []grpc.ServerOption{grpc.MaxRecvMsgSize(int(s.cfg.MaxRequestBytes))}
	if tlsCfg != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	s.grpcSrv = grpc.NewServer(gopts...)
	receiver.RegisterGRPC(s.grpcSrv, s)
	gl, err := listen(s.cfg.GRPCListen)
	if err != nil {
		return fail(err)
	}
	hl, err := listen(s.cfg.HTTPListen)
	if err != nil {
		return fail(err)
	}
	al, err := listen(s.cfg.AdminListen)
	if err != nil {
		return fail(err)
	}
	s.httpSrv = &http.Server{Handler: receiver.HTTPHandler(s, s.cfg.MaxRequestBytes), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsCfg}
	admin := http.NewServeMux()
	admin.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	admin.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	admin.Handle("/metrics", promhttp.HandlerFor(s.metrics.Registry, promhttp.HandlerOpts{}))
	if s.cfg.AdminPprof {
		admin.HandleFunc("/debug/pprof/", pprof.Index)
		admin.HandleFunc("/debug/pprof/profile", pprof.Profile)
		admin.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s.adminSrv = &http.Server{Handler: admin, ReadHeaderTimeout: 10 * time.Second}

	s.serve("grpc", func() error { return s.grpcSrv.Serve(gl) })
	s.serve("http", func() error {
		if tlsCfg != nil {
			return s.httpSrv.ServeTLS(hl, "", "")
		}
		return s.httpSrv.Serve(hl)
	})
	s.serve("admin", func() error { return s.adminSrv.Serve(al) })
	s.ready.Store(true)
	slog.Info("gateway listening", "grpc", gl.Addr().String(), "http", hl.Addr().String(), "admin", al.Addr().String(),
		"symbolizer", s.cfg.SymbolizerURL, "exporters", len(s.exporters))
	return nil
}

func (s *Server) serve(name string, fn func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
			slog.Error("listener stopped", "listener", name, "err", err)
		}
	}()
}

// Addrs returns the bound addresses of the gRPC, HTTP and admin listeners.
func (s *Server) Addrs() (grpcAddr, httpAddr, adminAddr string) {
	return s.listeners[0].Addr().String(), s.listeners[1].Addr().String(), s.listeners[2].Addr().String()
}

// Shutdown refuses new requests, finishes those in progress, drains the export queues until
// ctx ends and closes the exporters.
func (s *Server) Shutdown(ctx context.Context) {
	s.ready.Store(false)
	stopped := make(chan struct{})
	go func() { s.grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpcSrv.Stop()
	}
	_ = s.httpSrv.Shutdown(ctx)
	s.group.Close(ctx)
	_ = s.adminSrv.Shutdown(ctx)
	s.wg.Wait()
	for _, e := range s.exporters {
		if err := e.Close(); err != nil {
			slog.Warn("close exporter", "exporter", e.Name(), "err", err)
		}
	}
}
