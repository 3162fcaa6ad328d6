// Package downstreamwatch is a Collector extension, used as a middleware of the OTLP
// exporters' gRPC and HTTP clients, that tells in the logs when a downstream degrades and when
// it recovers: one WARN when exports to an endpoint start failing, a summary at most once per
// summary_interval while they go on (failed attempts, the last error), one INFO when an export
// succeeds again, with how long the outage lasted; and a gauge,
// otelcol_downstream_degraded{endpoint}, 1 while it lasts.
//
// The exporters' sending queues and retries keep the data meanwhile; the Collector itself logs
// every retry attempt (sampled), which says that something fails but not when it started or
// ended.
package downstreamwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap/exp/zapslog"
	"google.golang.org/grpc"

	"github.com/profsym/profsym/pkg/degraded"
)

// Type is the extension's name in a Collector configuration.
var Type = component.MustNewType("downstream_watch")

// MetricName is the gauge that is 1 while exports to an endpoint fail.
const MetricName = "otelcol_downstream_degraded"

// Config is the extension's configuration.
type Config struct {
	// SummaryInterval is the least time between two summaries of one outage.
	SummaryInterval time.Duration `mapstructure:"summary_interval"`

	// prevent unkeyed literals
	_ struct{}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	if c.SummaryInterval <= 0 {
		return fmt.Errorf("summary_interval %v: must be positive", c.SummaryInterval)
	}
	return nil
}

// NewFactory returns the extension's factory.
func NewFactory() extension.Factory {
	return extension.NewFactory(Type, func() component.Config { return &Config{SummaryInterval: time.Minute} },
		func(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
			c, ok := cfg.(*Config)
			if !ok {
				return nil, fmt.Errorf("downstream_watch: config of type %T, want *downstreamwatch.Config", cfg)
			}
			return newWatch(set, c)
		}, component.StabilityLevelAlpha)
}

// Watch is the extension: one degraded.Tracker per downstream endpoint.
type Watch struct {
	cfg   *Config
	log   *slog.Logger
	gauge metric.Int64UpDownCounter

	mu       sync.Mutex
	trackers map[string]*degraded.Tracker
}

var (
	_ extension.Extension            = (*Watch)(nil)
	_ extensionmiddleware.GRPCClient = (*Watch)(nil)
	_ extensionmiddleware.HTTPClient = (*Watch)(nil)
)

func newWatch(set extension.Settings, cfg *Config) (*Watch, error) {
	g, err := set.MeterProvider.Meter("github.com/profsym/profsym/services/gateway/internal/downstreamwatch").
		Int64UpDownCounter(MetricName, metric.WithUnit("1"),
			metric.WithDescription("1 while exports to the endpoint fail (the sending queue holds and retries them), 0 once one succeeds."))
	if err != nil {
		return nil, fmt.Errorf("downstream_watch: metric %s: %w", MetricName, err)
	}
	return &Watch{cfg: cfg, log: slog.New(zapslog.NewHandler(set.Logger.Core())), gauge: g,
		trackers: map[string]*degraded.Tracker{}}, nil
}

// Start implements component.Component.
func (w *Watch) Start(context.Context, component.Host) error { return nil }

// Shutdown implements component.Component.
func (w *Watch) Shutdown(context.Context) error { return nil }

// tracker returns the endpoint's tracker, made on first use.
func (w *Watch) tracker(endpoint string) *degraded.Tracker {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.trackers[endpoint]
	if !ok {
		attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("endpoint", endpoint)))
		w.gauge.Add(context.Background(), 0, attrs)
		t = degraded.New("downstream "+endpoint, "exports are queued and retried", w.cfg.SummaryInterval, w.log).
			OnChange(func(down bool) {
				d := int64(-1)
				if down {
					d = 1
				}
				w.gauge.Add(context.Background(), d, attrs)
			})
		w.trackers[endpoint] = t
	}
	return t
}

// observe records the outcome of one export attempt begun at start. An attempt the exporter
// gave up itself (its context canceled at shutdown) says nothing about the downstream, nor
// does the success of one that was under way when the downstream went away.
func (w *Watch) observe(ctx context.Context, endpoint string, start time.Time, err error) {
	switch {
	case err == nil:
		w.tracker(endpoint).OKStarted(start)
	case errors.Is(ctx.Err(), context.Canceled):
	default:
		w.tracker(endpoint).Fail(err)
	}
}

// GetGRPCClientOptions implements extensionmiddleware.GRPCClient: an interceptor that sees
// every export attempt of the OTLP/gRPC exporter.
func (w *Watch) GetGRPCClientOptions(context.Context) ([]grpc.DialOption, error) {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			start := time.Now()
			err := invoker(ctx, method, req, reply, cc, opts...)
			w.observe(ctx, cc.Target(), start, err)
			return err
		})}, nil
}

// GetHTTPRoundTripper implements extensionmiddleware.HTTPClient: a round tripper that sees
// every export attempt of the OTLP/HTTP exporter. 5xx and 429 answers are failures (the
// exporter retries them); other answers say the downstream is there.
func (w *Watch) GetHTTPRoundTripper(context.Context) (extensionmiddleware.WrapHTTPRoundTripperFunc, error) {
	return func(_ context.Context, base http.RoundTripper) (http.RoundTripper, error) {
		return roundTripper{w: w, base: base}, nil
	}, nil
}

type roundTripper struct {
	w    *Watch
	base http.RoundTripper
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := rt.base.RoundTrip(req)
	if err == nil && (resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests) {
		rt.w.observe(req.Context(), req.URL.Host, start, fmt.Errorf("HTTP %s", resp.Status))
		return resp, nil
	}
	rt.w.observe(req.Context(), req.URL.Host, start, err)
	return resp, err
}
