package server

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/tracing"
	"github.com/profsym/profsym/pkg/tracing/tracingtest"
)

// recorder records every span of the test binary, with the W3C propagator the symbolizer's
// clients and handlers use.
func recorder() *tracetest.SpanRecorder {
	otel.SetTextMapPropagator(tracing.Propagator)
	return tracingtest.Recorder()
}

// TestTraceOfDebuginfodFetch: a traced Symbolize call of a binary the store lacks is, in the
// symbolizer, a server span continuing the caller's client span, with a debuginfod.fetch span
// (found) under it, the HTTP GET to the real upstream debuginfod and the stored file's
// store.put under that; the index, built while the file was stored, is then read from memory.
func TestTraceOfDebuginfodFetch(t *testing.T) {
	rec := recorder()
	bin, up := upstreamOf(t)
	r := start(t, "--debuginfod-url", up.URL(), "--debuginfod-timeout", "10s")

	clientTraces, err := otelconnect.NewInterceptor(otelconnect.WithoutMetrics())
	if err != nil {
		t.Fatal(err)
	}
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url, connect.WithInterceptors(clientTraces))
	ctx, root := otel.Tracer("test").Start(context.Background(), "caller")
	resp, err := client.Symbolize(ctx, connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{
		{GnuBuildId: bin.ids.GNU, Addresses: bin.addrs}}}))
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.Msg.Modules[0].Status; s != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		t.Fatalf("fetched module: %v", s)
	}

	var spans []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
			spans = append(spans, s)
		}
	}
	find := func(parent trace.SpanContext, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
		for _, s := range spans {
			if s.Parent().SpanID() == parent.SpanID() && match(s) {
				return s
			}
		}
		return nil
	}
	name := func(n string, kind trace.SpanKind) func(sdktrace.ReadOnlySpan) bool {
		return func(s sdktrace.ReadOnlySpan) bool { return s.Name() == n && s.SpanKind() == kind }
	}
	const method = "profsym.symbolizer.v1.SymbolizerService/Symbolize"
	call := find(root.SpanContext(), name(method, trace.SpanKindClient))
	if call == nil {
		t.Fatalf("no client span among %d spans of the trace", len(spans))
	}
	server := find(call.SpanContext(), name(method, trace.SpanKindServer))
	if server == nil {
		t.Fatal("the server span is not the child of the caller's client span")
	}
	fetch := find(server.SpanContext(), name("debuginfod.fetch", trace.SpanKindInternal))
	if fetch == nil {
		t.Fatal("no debuginfod.fetch span under the server span")
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range fetch.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if !attrs["profsym.debuginfod.found"].AsBool() || attrs["profsym.build_id"].AsString() != bin.ids.GNU {
		t.Errorf("debuginfod.fetch attributes %v: want found and the build ID", attrs)
	}
	get := find(fetch.SpanContext(), func(s sdktrace.ReadOnlySpan) bool { return s.SpanKind() == trace.SpanKindClient })
	if get == nil {
		t.Fatal("no HTTP client span under debuginfod.fetch")
	}
	if find(fetch.SpanContext(), name("store.put", trace.SpanKindInternal)) == nil {
		t.Error("the fetched file's store.put is not under debuginfod.fetch")
	}
	// Storing the fetched file verified it and built its index, which the server holds: the
	// lookup finds it in memory and makes no index span of its own.
	if idx := find(server.SpanContext(), name("index", trace.SpanKindInternal)); idx != nil {
		t.Error("an index span for an index held in memory since the fetch")
	}
}
