// Package tracing sets up the OpenTelemetry traces of profsym's own work (the symbolizer's
// handlers, index loads and builds, store, Redis and debuginfod calls; the collector's exports
// and uploads) from the standard OTEL_* environment, and gives the packages that make spans
// one way to start them.
//
// Traces are off unless an OTLP endpoint is configured: then the global TracerProvider stays
// OpenTelemetry's no-op one, no exporter runs, and a span costs a context lookup. The
// exporters read OTEL_EXPORTER_OTLP_* themselves (endpoint, headers, TLS, timeout,
// compression), the SDK reads OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_* and OTEL_RESOURCE_ATTRIBUTES;
// this package only decides whether to export and over which protocol.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// The environment variables Setup reads itself; the rest are read by the SDK and exporters.
const (
	envExporter       = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envSDKDisabled    = "OTEL_SDK_DISABLED"
)

// Propagator is what every profsym process injects and extracts: W3C trace context and
// baggage, the OpenTelemetry defaults, so a trace crosses the processor -> symbolizer hop.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// Export says where traces go, as decided from the environment.
type Export struct {
	// Enabled is false when traces are off.
	Enabled bool
	// Protocol is grpc or http/protobuf.
	Protocol string
	// Endpoint is the configured endpoint as written (the exporter's default when empty).
	Endpoint string
}

// FromEnv decides from the environment whether and how traces are exported: on when
// OTEL_TRACES_EXPORTER is otlp, or unset with OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT set; off
// with OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true. Other exporters are refused by
// name, as is a protocol other than grpc and http/protobuf.
func FromEnv(getenv func(string) string) (Export, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return Export{}, nil
	}
	endpoint := strings.TrimSpace(getenv(envTracesEndpoint))
	if endpoint == "" {
		endpoint = strings.TrimSpace(getenv(envEndpoint))
	}
	switch exp := strings.TrimSpace(getenv(envExporter)); exp {
	case "none":
		return Export{}, nil
	case "":
		if endpoint == "" {
			return Export{}, nil
		}
	case "otlp":
	default:
		return Export{}, fmt.Errorf("%s=%q: only otlp and none are supported", envExporter, exp)
	}
	protocol := strings.TrimSpace(getenv(envTracesProtocol))
	if protocol == "" {
		protocol = strings.TrimSpace(getenv(envProtocol))
	}
	switch protocol {
	case "":
		// The OTLP exporter specification's default.
		protocol = "http/protobuf"
	case "grpc", "http/protobuf":
	default:
		return Export{}, fmt.Errorf("OTLP protocol %q: want grpc or http/protobuf (http/json is not supported)", protocol)
	}
	return Export{Enabled: true, Protocol: protocol, Endpoint: endpoint}, nil
}

// Setup installs the W3C propagator and, when the environment configures an export (see
// FromEnv), a TracerProvider exporting by OTLP in batches, naming the process service unless
// OTEL_SERVICE_NAME does. It logs one line saying where traces go. shutdown flushes what is
// buffered within its context's deadline; it is never nil.
func Setup(ctx context.Context, service string, log *slog.Logger) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(Propagator)
	noop := func(context.Context) error { return nil }
	exp, err := FromEnv(os.Getenv)
	if err != nil {
		return noop, fmt.Errorf("traces: %w", err)
	}
	if !exp.Enabled {
		log.Info("traces off (set OTEL_EXPORTER_OTLP_ENDPOINT to export them)")
		return noop, nil
	}
	var exporter sdktrace.SpanExporter
	if exp.Protocol == "grpc" {
		exporter, err = otlptracegrpc.New(ctx)
	} else {
		exporter, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return noop, fmt.Errorf("traces: OTLP %s exporter: %w", exp.Protocol, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil && res == nil {
		return noop, errors.Join(fmt.Errorf("traces: resource: %w", err), exporter.Shutdown(ctx))
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (parent-based always-on by default), so a
	// call the processor sampled is traced here too.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("traces", "err", err) }))
	log.Info("traces exported by OTLP", "protocol", exp.Protocol, "endpoint", redact(exp.Endpoint), "service", serviceName(res, service))
	return tp.Shutdown, nil
}

// Install is Setup for a process's main: stop flushes what is buffered within 5 s, logging a
// failure to, and is never nil.
func Install(ctx context.Context, service string, log *slog.Logger) (stop func(), err error) {
	shutdown, err := Setup(ctx, service, log)
	if err != nil {
		return func() {}, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	}, nil
}

// redact drops user information from an endpoint written into a log line.
func redact(endpoint string) string {
	if endpoint == "" {
		return "(exporter default)"
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.User == nil {
		return endpoint
	}
	u.User = nil
	return u.String()
}

func serviceName(res *resource.Resource, fallback string) string {
	if v, ok := res.Set().Value("service.name"); ok {
		return v.AsString()
	}
	return fallback
}

// Tracer returns the named tracer of the global provider, under ChildOnly: its spans start only
// under a span already in the context, so background work (coverage writes, lease renewals)
// does not open traces of its own.
func Tracer(name string) trace.Tracer { return ChildOnly(otel.GetTracerProvider()).Tracer(name) }

// Start starts a span of tr named name with attrs.
func Start(ctx context.Context, tr trace.Tracer, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return tr.Start(ctx, name, trace.WithAttributes(attrs...))
}

// ChildOnly returns tp whose tracers start a span only under a valid span in the context;
// without one they return the context as it is and a non-recording span. Instrumentation that
// runs for background work as well as for requests (Redis, HTTP clients) goes through it, so
// the inner calls of a request stay in that request's trace and nothing else makes traces.
func ChildOnly(tp trace.TracerProvider) trace.TracerProvider { return childOnlyProvider{tp: tp} }

type childOnlyProvider struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (p childOnlyProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childOnlyTracer{t: p.tp.Tracer(name, opts...)}
}

type childOnlyTracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (t childOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.t.Start(ctx, name, opts...)
}

// End ends span, recording err (when not nil) as the span's error status.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
