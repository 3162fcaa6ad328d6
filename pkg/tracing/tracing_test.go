package tracing

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/profsym/profsym/pkg/tracing/tracingtest"
)

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Export
		err  string
	}{
		{name: "nothing set: off", env: nil, want: Export{}},
		{name: "endpoint: on over http/protobuf", env: map[string]string{envEndpoint: "http://collector:4318"},
			want: Export{Enabled: true, Protocol: "http/protobuf", Endpoint: "http://collector:4318"}},
		{name: "traces endpoint wins", env: map[string]string{envEndpoint: "http://a:4318", envTracesEndpoint: "http://b:4318/v1/traces"},
			want: Export{Enabled: true, Protocol: "http/protobuf", Endpoint: "http://b:4318/v1/traces"}},
		{name: "grpc", env: map[string]string{envEndpoint: "http://a:4317", envProtocol: "grpc"},
			want: Export{Enabled: true, Protocol: "grpc", Endpoint: "http://a:4317"}},
		{name: "traces protocol wins", env: map[string]string{envEndpoint: "http://a:4317", envProtocol: "http/protobuf", envTracesProtocol: "grpc"},
			want: Export{Enabled: true, Protocol: "grpc", Endpoint: "http://a:4317"}},
		{name: "otlp exporter with the default endpoint", env: map[string]string{envExporter: "otlp"},
			want: Export{Enabled: true, Protocol: "http/protobuf"}},
		{name: "exporter none beats an endpoint", env: map[string]string{envExporter: "none", envEndpoint: "http://a:4318"}, want: Export{}},
		{name: "SDK disabled beats an endpoint", env: map[string]string{envSDKDisabled: "true", envEndpoint: "http://a:4318"}, want: Export{}},
		{name: "other exporter refused", env: map[string]string{envExporter: "zipkin"}, err: `OTEL_TRACES_EXPORTER="zipkin"`},
		{name: "http/json refused", env: map[string]string{envEndpoint: "http://a:4318", envProtocol: "http/json"}, err: `"http/json"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromEnv(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// clearEnv unsets every variable FromEnv reads, for the test's duration.
func clearEnv(t *testing.T) {
	for _, k := range []string{envExporter, envEndpoint, envTracesEndpoint, envProtocol, envTracesProtocol, envSDKDisabled, "OTEL_SERVICE_NAME"} {
		t.Setenv(k, "")
	}
}

// resetGlobal leaves OpenTelemetry's global provider a no-op one after a test that set one.
func resetGlobal(t *testing.T) {
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
}

func TestSetupExportsToEndpoint(t *testing.T) {
	resetGlobal(t)
	clearEnv(t)
	sink := tracingtest.Start(t)
	t.Setenv(envEndpoint, sink.URL)
	t.Setenv("OTEL_SERVICE_NAME", "profsym-test")
	var logs strings.Builder
	shutdown, err := Setup(t.Context(), "profsym-default", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); !ok {
		t.Fatalf("global provider %T, want the SDK's", otel.GetTracerProvider())
	}
	tr := Tracer("test")
	// No span in the context: the child-only tracer makes none.
	if _, sp := tr.Start(context.Background(), "orphan"); sp.IsRecording() {
		t.Fatal("a span without a parent was recorded")
	}
	ctx, root := otel.Tracer("test").Start(context.Background(), "request")
	_, inner := Start(ctx, tr, "inner")
	End(inner, io.ErrUnexpectedEOF)
	root.End()
	// Shutdown flushes the batch: nothing is waited for by time.
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := sink.Spans()
	if len(spans) != 2 {
		t.Fatalf("sink got %d spans, want 2 (request, inner)", len(spans))
	}
	byName := map[string]*tracepb.Span{}
	for _, s := range spans {
		byName[s.GetName()] = s
	}
	req, in := byName["request"], byName["inner"]
	if req == nil || in == nil {
		t.Fatalf("spans %v, want request and inner", byName)
	}
	if string(in.GetParentSpanId()) != string(req.GetSpanId()) || string(in.GetTraceId()) != string(req.GetTraceId()) {
		t.Error("inner is not the child of request")
	}
	if in.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(in.GetStatus().GetMessage(), "unexpected EOF") {
		t.Errorf("inner status %v, want the error", in.GetStatus())
	}
	for _, svc := range sink.Services() {
		if svc != "profsym-test" {
			t.Errorf("service.name %q, want OTEL_SERVICE_NAME's profsym-test", svc)
		}
	}
	if !strings.Contains(logs.String(), "traces exported by OTLP") || !strings.Contains(logs.String(), sink.URL) {
		t.Errorf("start log %q does not say where traces go", logs.String())
	}
}

func TestSetupOffExportsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"no variables", nil},
		{"exporter none", map[string]string{envExporter: "none"}},
		{"SDK disabled", map[string]string{envSDKDisabled: "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resetGlobal(t)
			clearEnv(t)
			sink := tracingtest.Start(t)
			// The exporter's own default endpoint is not this sink; setting the endpoint
			// here beside a switch that turns traces off shows the switch wins.
			if tc.env != nil {
				t.Setenv(envEndpoint, sink.URL)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			before := otel.GetTracerProvider()
			var logs strings.Builder
			shutdown, err := Setup(t.Context(), "profsym-test", slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if otel.GetTracerProvider() != before {
				t.Fatalf("global provider replaced by %T with traces off", otel.GetTracerProvider())
			}
			ctx, root := otel.Tracer("test").Start(context.Background(), "request")
			_, inner := Start(ctx, Tracer("test"), "inner")
			if root.IsRecording() || inner.IsRecording() || trace.SpanContextFromContext(ctx).IsSampled() {
				t.Error("spans record with traces off")
			}
			inner.End()
			root.End()
			if err := shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
			if n := sink.Requests(); n != 0 {
				t.Errorf("sink got %d export requests with traces off", n)
			}
			if !strings.Contains(logs.String(), "traces off") {
				t.Errorf("start log %q does not say traces are off", logs.String())
			}
		})
	}
}

func TestSetupRefusesUnknownExporter(t *testing.T) {
	resetGlobal(t)
	clearEnv(t)
	t.Setenv(envExporter, "console")
	if _, err := Setup(t.Context(), "profsym-test", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "console") {
		t.Fatalf("err = %v, want one naming the exporter", err)
	}
}
