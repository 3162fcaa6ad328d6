package symbolizeprocessor

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/pkg/tracing/tracingtest"
)

// serverSpans returns the symbolizers' Symbolize server spans by their parent span ID.
func serverSpans(s *tracingtest.Sink) map[string]*tracepb.Span {
	out := map[string]*tracepb.Span{}
	for _, sp := range s.Spans() {
		if sp.GetName() == symbolizeMethod && sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			out[hex.EncodeToString(sp.GetParentSpanId())] = sp
		}
	}
	return out
}

const symbolizeMethod = "profsym.symbolizer.v1.SymbolizerService/Symbolize"

// TestTracesCrossToSymbolizers: with affinity over two real symbolizer replicas that export
// their traces, one batch is one symbolize span from the Collector's TracerProvider with a
// client span per Symbolize call under it, and every call's server span in the replica is the
// child of that client span in the same trace: the W3C trace context crossed the hop through
// the router's per-replica clients.
func TestTracesCrossToSymbolizers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two symbolizers and compiles test binaries")
	}
	sink := tracingtest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	bins := otlptest.Binaries(t)
	paths := make([]string, len(bins))
	for i, b := range bins {
		paths[i] = b.Path
	}
	var addrs []string
	for range 2 {
		sym := testsupport.StartSymbolizer(t, "")
		sym.Upload(t, paths...)
		addrs = append(addrs, strings.TrimPrefix(sym.URL(), "http://"))
	}
	cfg := createDefaultConfig()
	cfg.Endpoint = "http://" + addrs[0]
	cfg.CacheEntries = 0
	cfg.Affinity.Enabled = true
	cfg.Affinity.Endpoints = addrs
	p := start(t, cfg)
	pd, _ := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
	if err := p.proc.ConsumeProfiles(t.Context(), pd); err != nil {
		t.Fatal(err)
	}

	var batch trace.SpanContext
	var calls []trace.SpanContext
	for _, s := range p.tel.SpanRecorder.Ended() {
		if s.Name() == "symbolize" {
			batch = s.SpanContext()
		}
	}
	if !batch.IsValid() {
		t.Fatal("no symbolize span from the Collector's TracerProvider")
	}
	for _, s := range p.tel.SpanRecorder.Ended() {
		if s.Name() == symbolizeMethod && s.SpanKind() == trace.SpanKindClient {
			if s.Parent().SpanID() != batch.SpanID() {
				t.Errorf("client span %s is not under the symbolize span", s.SpanContext().SpanID())
			}
			calls = append(calls, s.SpanContext())
		}
	}
	if len(calls) == 0 {
		t.Fatal("no Symbolize client span")
	}
	// The replicas export in batches every 100 ms: wait for each call's server span.
	for deadline := time.Now().Add(time.Minute); ; {
		servers := serverSpans(sink)
		missing := 0
		for _, c := range calls {
			sp, ok := servers[c.SpanID().String()]
			if !ok {
				missing++
				continue
			}
			if hex.EncodeToString(sp.GetTraceId()) != batch.TraceID().String() {
				t.Fatalf("server span of call %s in trace %x, want the batch's %s", c.SpanID(), sp.GetTraceId(), batch.TraceID())
			}
		}
		if missing == 0 {
			t.Logf("%d Symbolize calls, each continued by a replica's server span in trace %s", len(calls), batch.TraceID())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls have no server span under them in the replicas' traces", missing, len(calls))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
