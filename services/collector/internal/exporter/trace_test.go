package exporter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/pkg/tracing"
	"github.com/profsym/profsym/services/collector/internal/otlpsinktest"
)

// TestExportSpans: with traces on, one buffered request that the gateway first refuses
// (UNAVAILABLE) and then accepts is one collector.export span counting its attempts (the
// retries plus one), with a gRPC client span per attempt under it, and the accepted request carries the W3C trace
// context of its attempt to the gateway.
func TestExportSpans(t *testing.T) {
	rec := recorder()
	seen := len(rec.Ended())

	sink, err := otlpsinktest.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Stop()
	sink.FailWith(status.Error(codes.Unavailable, "gateway busy"))
	m := NewMetrics(prometheus.NewRegistry())
	e, err := New(Options{Endpoint: sink.Addr, Insecure: true, InitialBackoff: 20 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, Timeout: 5 * time.Second}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	e.Enqueue(request(t, "r1", 100))
	for i := 0; val(t, m.Retries) == 0; i++ {
		if i > 1000 {
			t.Fatal("the refused attempt was not retried")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sink.FailWith(nil)
	select {
	case <-sink.Arrived():
	case <-time.After(30 * time.Second):
		t.Fatal("the request did not arrive once the gateway accepted")
	}
	for i := 0; val(t, m.Requests.WithLabelValues("success")) != 1; i++ {
		if i > 1000 {
			t.Fatal("the delivery was not counted")
		}
		time.Sleep(10 * time.Millisecond)
	}

	var export sdktrace.ReadOnlySpan
	var attempts []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended()[seen:] {
		switch {
		case s.Name() == "collector.export":
			export = s
		case s.SpanKind() == trace.SpanKindClient:
			attempts = append(attempts, s)
		}
	}
	if export == nil {
		t.Fatalf("no collector.export span among %d", len(rec.Ended()))
	}
	// The refusal may have been answered more than once before the sink accepted again.
	want := int(val(t, m.Retries)) + 1
	if got := attr(export.Attributes(), "profsym.export.attempts"); want < 2 || got != fmt.Sprint(want) {
		t.Errorf("export attempts = %s, want %d (retries + 1, at least 2)", got, want)
	}
	if len(attempts) != want {
		t.Fatalf("%d gRPC client spans, want one per attempt (%d)", len(attempts), want)
	}
	for _, a := range attempts {
		if a.Parent().SpanID() != export.SpanContext().SpanID() {
			t.Errorf("attempt span %s is not under the export span", a.Name())
		}
	}
	parents := sink.Traceparents()
	last := attempts[len(attempts)-1].SpanContext()
	wantParent := fmt.Sprintf("00-%s-%s-01", last.TraceID(), last.SpanID())
	if len(parents) != 1 || parents[0] != wantParent {
		t.Errorf("gateway got traceparent %q, want %q (the accepted attempt's span)", parents, wantParent)
	}
}

// recorder installs, once per test binary, a global provider recording every span: the
// package's tracers were taken from the global provider, which hands over to the first
// provider set and never to a later one.
var recorder = sync.OnceValue(func() *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	otel.SetTextMapPropagator(tracing.Propagator)
	return rec
})

func attr(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}
