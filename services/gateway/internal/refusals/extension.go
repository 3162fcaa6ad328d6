// Package refusals is a Collector extension, used as a middleware of the OTLP receiver's gRPC
// and HTTP servers, that makes refused requests visible and answered as what they are:
//
//   - an OTLP request over gRPC that does not decode is answered InvalidArgument (grpc-go
//     answers Internal, so the sender cannot tell its payload is bad), as HTTP answers 400;
//   - every refused request is counted by transport and reason (otelcol_refused_requests)
//     and logged per episode (a WARN when refusals of a reason start, a summary at most once
//     per log_interval while they go on, an INFO when they stop), with the sender's address;
//   - an optional readiness endpoint answers 503 while the gateway pushes senders back
//     (memory_limiter, a full sending queue), so a load balancer routes to other replicas.
package refusals

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensioncapabilities"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Type is the extension's name in a Collector configuration.
var Type = component.MustNewType("refusals")

// NewFactory returns the extension's factory.
func NewFactory() extension.Factory {
	return extension.NewFactory(Type, func() component.Config { return createDefaultConfig() },
		func(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
			c, ok := cfg.(*Config)
			if !ok {
				return nil, fmt.Errorf("refusals: config of type %T, want *refusals.Config", cfg)
			}
			return newExtension(set, c, time.Now)
		}, component.StabilityLevelAlpha)
}

// Extension is the refusals extension.
type Extension struct {
	cfg     *Config
	set     extension.Settings
	now     func() time.Time
	codec   *codec
	tracker *tracker

	// pipelinesReady is true between the Collector's Ready and NotReady.
	pipelinesReady atomic.Bool
	server         *http.Server
	serveDone      chan struct{}
}

var (
	_ extension.Extension                   = (*Extension)(nil)
	_ extensionmiddleware.GRPCServer        = (*Extension)(nil)
	_ extensionmiddleware.HTTPServer        = (*Extension)(nil)
	_ extensioncapabilities.PipelineWatcher = (*Extension)(nil)
)

func newExtension(set extension.Settings, cfg *Config, now func() time.Time) (*Extension, error) {
	t, err := newTracker(set.Logger, set.MeterProvider, cfg.LogInterval, now)
	if err != nil {
		return nil, fmt.Errorf("refusals: metric %s: %w", MetricName, err)
	}
	return &Extension{cfg: cfg, set: set, now: now, codec: newCodec(), tracker: t}, nil
}

// GetGRPCServerOptions implements extensionmiddleware.GRPCServer.
func (e *Extension) GetGRPCServerOptions(context.Context) ([]grpc.ServerOption, error) {
	return e.grpcServerOptions(), nil
}

// GetHTTPHandler implements extensionmiddleware.HTTPServer.
func (e *Extension) GetHTTPHandler(context.Context) (extensionmiddleware.WrapHTTPHandlerFunc, error) {
	return e.wrapHTTP, nil
}

// Start starts the log ticker and the readiness endpoint.
func (e *Extension) Start(ctx context.Context, _ component.Host) error {
	if ep := e.cfg.Readiness.Endpoint; ep != "" {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", ep)
		if err != nil {
			return fmt.Errorf("refusals: readiness endpoint %s: %w", ep, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc(e.cfg.Readiness.Path, e.serveReadiness)
		e.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
		e.serveDone = make(chan struct{})
		go func() {
			defer close(e.serveDone)
			if err := e.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				e.set.Logger.Error("Readiness endpoint stopped serving", zap.Error(err))
			}
		}()
	}
	e.tracker.start()
	return nil
}

// Shutdown stops the readiness endpoint and the log ticker.
func (e *Extension) Shutdown(ctx context.Context) error {
	e.tracker.shutdown()
	if e.server == nil {
		return nil
	}
	err := e.server.Shutdown(ctx)
	<-e.serveDone
	e.server = nil
	if err != nil {
		return fmt.Errorf("refusals: stop readiness endpoint: %w", err)
	}
	return nil
}

// Ready implements extensioncapabilities.PipelineWatcher: every pipeline runs.
func (e *Extension) Ready() error {
	e.pipelinesReady.Store(true)
	return nil
}

// NotReady implements extensioncapabilities.PipelineWatcher: the receivers are about to stop.
func (e *Extension) NotReady() error {
	e.pipelinesReady.Store(false)
	return nil
}

// serveReadiness answers 503 before the pipelines run, while they stop and while senders were
// pushed back within the window; 200 otherwise.
func (e *Extension) serveReadiness(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	window := e.cfg.Readiness.PushbackWindow
	switch {
	case !e.pipelinesReady.Load():
		http.Error(w, "not ready: the pipelines are not running", http.StatusServiceUnavailable)
	case e.tracker.pushbackSince(e.now().Add(-window)):
		http.Error(w, fmt.Sprintf("not ready: senders pushed back (UNAVAILABLE, 503 or 429) within the last %v", window), http.StatusServiceUnavailable)
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ready")
	}
}
