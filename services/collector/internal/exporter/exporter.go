// Package exporter sends the collector's OTLP profiles requests to the gateway over
// OTLP/gRPC with gzip. Requests wait in a bounded buffer: while the gateway is away the
// head request is retried with exponential backoff, new requests queue behind it, and when
// the buffer is full the oldest request is dropped and counted.
package exporter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/pkg/tracing"
)

// tracer makes root spans: an export or an upload is where a collector trace begins.
var tracer = otel.Tracer("github.com/profsym/profsym/services/collector/internal/exporter")

// Options configure the exporter.
type Options struct {
	// Endpoint is the gateway's host:port.
	Endpoint string
	// Insecure sends in plain text; otherwise TLS with the system roots or CAFile.
	Insecure bool
	CAFile   string
	// CertFile and KeyFile are the client certificate for mutual TLS.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
	// InsecureSkipVerify accepts any server certificate (testing only).
	InsecureSkipVerify bool

	// Timeout bounds one export attempt.
	Timeout time.Duration
	// MaxBufferBytes and MaxBufferRequests bound the buffer.
	MaxBufferBytes    int
	MaxBufferRequests int
	// InitialBackoff and MaxBackoff shape the retry intervals.
	InitialBackoff, MaxBackoff time.Duration
}

func (o *Options) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MaxBufferBytes <= 0 {
		o.MaxBufferBytes = 8 << 20
	}
	if o.MaxBufferRequests <= 0 {
		o.MaxBufferRequests = 60
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
}

// Metrics are the exporter's Prometheus metrics.
type Metrics struct {
	Requests      *prometheus.CounterVec // by result: success, rejected, dropped
	Retries       prometheus.Counter
	BufferedReqs  prometheus.Gauge
	BufferedBytes prometheus.Gauge
	SentBytes     prometheus.Counter
}

// NewMetrics registers the exporter metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "profsym_collector", Name: "export_requests_total",
			Help: "OTLP export requests by result: success, rejected (permanent error), dropped (buffer full or shut down).",
		}, []string{"result"}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "profsym_collector", Name: "export_retries_total",
			Help: "Failed export attempts that were retried.",
		}),
		BufferedReqs: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "profsym_collector", Name: "export_buffered_requests",
			Help: "Requests waiting to be exported.",
		}),
		BufferedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "profsym_collector", Name: "export_buffered_bytes",
			Help: "Encoded bytes of the requests waiting to be exported.",
		}),
		SentBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "profsym_collector", Name: "export_sent_bytes_total",
			Help: "Encoded (uncompressed) bytes of requests the gateway accepted.",
		}),
	}
	for _, r := range []string{"success", "rejected", "dropped"} {
		m.Requests.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Retries, m.BufferedReqs, m.BufferedBytes, m.SentBytes)
	}
	return m
}

type item struct {
	data   []byte
	cancel context.CancelFunc // set while the item is being sent
}

// Exporter is safe for concurrent use: Enqueue from the producer, Run on its own goroutine.
type Exporter struct {
	opts    Options
	conn    *grpc.ClientConn
	client  pprofileotlp.GRPCClient
	metrics *Metrics
	log     *slog.Logger

	mu     sync.Mutex
	queue  []*item
	bytes  int
	notify chan struct{}
}

// New creates an exporter. The connection is lazy: a gateway that is down is not an error.
func New(opts Options, metrics *Metrics, log *slog.Logger) (*Exporter, error) {
	opts.defaults()
	if opts.Endpoint == "" {
		return nil, errors.New("exporter: no gateway endpoint")
	}
	if log == nil {
		log = slog.Default()
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	creds, err := transportCredentials(opts)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(opts.Endpoint,
		grpc.WithTransportCredentials(creds),
		// Each attempt is a gRPC client span under the request's export span, carrying W3C
		// trace context on to the gateway.
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tracing.ChildOnly(otel.GetTracerProvider())),
			otelgrpc.WithPropagators(tracing.Propagator))),
		grpc.WithDefaultCallOptions(grpc.UseCompressor(gzip.Name)))
	if err != nil {
		return nil, fmt.Errorf("exporter: dial %s: %w", opts.Endpoint, err)
	}
	return &Exporter{
		opts: opts, conn: conn, client: pprofileotlp.NewGRPCClient(conn), metrics: metrics, log: log,
		notify: make(chan struct{}, 1),
	}, nil
}

func transportCredentials(o Options) (credentials.TransportCredentials, error) {
	if o.Insecure {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName, InsecureSkipVerify: o.InsecureSkipVerify}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("exporter: read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("exporter: CA file %s holds no PEM certificate", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	if o.CertFile != "" || o.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("exporter: load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// Enqueue adds an encoded ExportProfilesServiceRequest. It never blocks: when the buffer is
// full the oldest requests are dropped (and counted) to make room.
func (e *Exporter) Enqueue(data []byte) {
	e.mu.Lock()
	if len(data) > e.opts.MaxBufferBytes {
		e.mu.Unlock()
		e.metrics.Requests.WithLabelValues("dropped").Inc()
		e.log.Warn("export request larger than the whole buffer, dropped", "bytes", len(data), "buffer_bytes", e.opts.MaxBufferBytes)
		return
	}
	e.queue = append(e.queue, &item{data: data})
	e.bytes += len(data)
	dropped := 0
	for len(e.queue) > e.opts.MaxBufferRequests || e.bytes > e.opts.MaxBufferBytes {
		e.dropHeadLocked()
		dropped++
	}
	e.updateGaugesLocked()
	e.mu.Unlock()
	if dropped > 0 {
		e.metrics.Requests.WithLabelValues("dropped").Add(float64(dropped))
		e.log.Warn("export buffer full, dropped oldest requests", "dropped", dropped)
	}
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

func (e *Exporter) dropHeadLocked() {
	it := e.queue[0]
	if it.cancel != nil {
		it.cancel()
	}
	e.queue[0] = nil
	e.queue = e.queue[1:]
	e.bytes -= len(it.data)
}

func (e *Exporter) updateGaugesLocked() {
	e.metrics.BufferedReqs.Set(float64(len(e.queue)))
	e.metrics.BufferedBytes.Set(float64(e.bytes))
}

// Buffered returns the number and encoded size of the waiting requests.
func (e *Exporter) Buffered() (requests, bytes int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.queue), e.bytes
}

// Run sends buffered requests until ctx ends.
func (e *Exporter) Run(ctx context.Context) {
	for {
		e.mu.Lock()
		var it *item
		var sendCtx context.Context
		if len(e.queue) > 0 {
			it = e.queue[0]
			var cancel context.CancelFunc
			sendCtx, cancel = context.WithCancel(ctx)
			it.cancel = cancel
		}
		e.mu.Unlock()
		if it == nil {
			select {
			case <-ctx.Done():
				return
			case <-e.notify:
				continue
			}
		}
		err := e.sendWithRetry(sendCtx, it.data)
		it.cancel()
		e.mu.Lock()
		current := len(e.queue) > 0 && e.queue[0] == it
		if current {
			it.cancel = nil
			if err == nil || isPermanent(err) {
				e.dropHeadLocked()
			}
			e.updateGaugesLocked()
		}
		e.mu.Unlock()
		switch {
		case !current:
			// Dropped while being sent; counted by Enqueue.
		case err == nil:
			e.metrics.Requests.WithLabelValues("success").Inc()
			e.metrics.SentBytes.Add(float64(len(it.data)))
		case isPermanent(err):
			e.metrics.Requests.WithLabelValues("rejected").Inc()
			e.log.Error("gateway rejected export request", "err", err)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

func (e *Exporter) sendWithRetry(ctx context.Context, data []byte) (err error) {
	// One span per buffered request, however many attempts it takes: a slow export shows
	// whether the time went to retries or to one slow answer.
	ctx, span := tracer.Start(ctx, "collector.export", trace.WithAttributes(attribute.Int("profsym.export.bytes", len(data))))
	attempts := 0
	defer func() {
		span.SetAttributes(attribute.Int("profsym.export.attempts", attempts))
		tracing.End(span, err)
	}()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = e.opts.InitialBackoff
	bo.MaxInterval = e.opts.MaxBackoff
	_, err = backoff.Retry(ctx, func() (struct{}, error) {
		attempts++
		// An attempt under way is not cut short by shutdown or eviction: cancelling a
		// request the gateway may already hold only makes Shutdown send it twice. It is
		// bounded by the attempt timeout; ctx ends the waits between attempts.
		err := e.send(context.WithoutCancel(ctx), data)
		if err != nil && isPermanent(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	},
		backoff.WithBackOff(bo),
		// The buffer bounds what waits; the head keeps trying as long as it is buffered.
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, next time.Duration) {
			e.metrics.Retries.Inc()
			e.log.Warn("export failed, retrying", "err", err, "in", next)
		}))
	// backoff.Retry unwraps its own Permanent wrapper and returns our permanentError.
	return err
}

func (e *Exporter) send(ctx context.Context, data []byte) error {
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(data); err != nil {
		return permanentError{fmt.Errorf("decode buffered request: %w", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()
	resp, err := e.client.Export(ctx, req)
	if err != nil {
		if retryable(err) {
			return fmt.Errorf("export to %s: %w", e.opts.Endpoint, err)
		}
		return permanentError{fmt.Errorf("export to %s: %w", e.opts.Endpoint, err)}
	}
	if ps := resp.PartialSuccess(); ps.RejectedProfiles() > 0 {
		e.log.Warn("gateway rejected part of a request", "rejected_profiles", ps.RejectedProfiles(), "message", ps.ErrorMessage())
	}
	return nil
}

// retryable follows the OTLP specification's list of retryable gRPC codes.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// Shutdown tries each buffered request once within ctx, then drops (and counts) the rest.
func (e *Exporter) Shutdown(ctx context.Context) {
	for ctx.Err() == nil {
		e.mu.Lock()
		if len(e.queue) == 0 {
			e.mu.Unlock()
			break
		}
		it := e.queue[0]
		e.mu.Unlock()
		err := e.send(ctx, it.data)
		e.mu.Lock()
		if len(e.queue) > 0 && e.queue[0] == it {
			e.dropHeadLocked()
			e.updateGaugesLocked()
		}
		e.mu.Unlock()
		if err == nil {
			e.metrics.Requests.WithLabelValues("success").Inc()
			e.metrics.SentBytes.Add(float64(len(it.data)))
		} else {
			e.metrics.Requests.WithLabelValues("dropped").Inc()
			e.log.Warn("export at shutdown failed, request dropped", "err", err)
		}
	}
	e.mu.Lock()
	n := len(e.queue)
	e.queue, e.bytes = nil, 0
	e.updateGaugesLocked()
	e.mu.Unlock()
	if n > 0 {
		e.metrics.Requests.WithLabelValues("dropped").Add(float64(n))
	}
	if err := e.conn.Close(); err != nil {
		e.log.Debug("close gateway connection", "err", err)
	}
}
