package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// traceSink is the Collector's own OTLP receiver, serving OTLP/HTTP on a loopback port, with
// every span it receives kept in memory: a real trace backend's front door.
type traceSink struct {
	url  string // the OTLP/HTTP base URL
	sink *consumertest.TracesSink
}

func startTraceSink(t *testing.T) *traceSink {
	t.Helper()
	f := otlpreceiver.NewFactory()
	cfg, ok := f.CreateDefaultConfig().(*otlpreceiver.Config)
	if !ok {
		t.Fatalf("otlpreceiver config of type %T", f.CreateDefaultConfig())
	}
	httpCfg := *cfg.Protocols.HTTP.GetOrInsertDefault()
	s := &traceSink{sink: new(consumertest.TracesSink)}
	for attempt := 0; ; attempt++ {
		port := testsupport.FreePort(t)
		httpCfg.ServerConfig.NetAddr.Endpoint = fmt.Sprintf("127.0.0.1:%d", port)
		cfg.Protocols.HTTP = configoptional.Some(httpCfg)
		cfg.Protocols.GRPC = configoptional.None[configgrpc.ServerConfig]()
		r, err := f.CreateTraces(t.Context(), receivertest.NewNopSettings(f.Type()), cfg, s.sink)
		if err != nil {
			t.Fatal(err)
		}
		// A port picked free may be taken before the receiver binds it: pick another.
		if err := r.Start(t.Context(), componenttest.NewNopHost()); err != nil {
			if attempt < 3 && strings.Contains(err.Error(), "address already in use") {
				continue
			}
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := r.Shutdown(context.Background()); err != nil {
				t.Errorf("stop trace sink: %v", err)
			}
		})
		s.url = fmt.Sprintf("http://127.0.0.1:%d", port)
		return s
	}
}

// span is one received span with what the assertions read.
type span struct {
	name, service, scope string
	kind                 ptrace.SpanKind
	trace                pcommon.TraceID
	id, parent           pcommon.SpanID
	start, end           pcommon.Timestamp
	attrs                pcommon.Map
}

func (s *traceSink) spans() []span {
	var out []span
	for _, td := range s.sink.AllTraces() {
		for i := range td.ResourceSpans().Len() {
			rs := td.ResourceSpans().At(i)
			svc := ""
			if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
				svc = v.Str()
			}
			for j := range rs.ScopeSpans().Len() {
				ss := rs.ScopeSpans().At(j)
				for k := range ss.Spans().Len() {
					sp := ss.Spans().At(k)
					out = append(out, span{name: sp.Name(), service: svc, scope: ss.Scope().Name(), kind: sp.Kind(),
						trace: sp.TraceID(), id: sp.SpanID(), parent: sp.ParentSpanID(),
						start: sp.StartTimestamp(), end: sp.EndTimestamp(), attrs: sp.Attributes()})
				}
			}
		}
	}
	return out
}

func (s span) String() string {
	return fmt.Sprintf("%s/%s %q (%s) trace %s span %s parent %s", s.service, s.scope, s.name, s.kind, s.trace, s.id, s.parent)
}

// child returns the first span of spans that is a child of parent and matches.
func child(spans []span, parent span, match func(span) bool) (span, bool) {
	for _, s := range spans {
		if s.trace == parent.trace && s.parent == parent.id && match(s) {
			return s, true
		}
	}
	return span{}, false
}

// descends reports whether s is below ancestor in spans' tree.
func descends(spans []span, s, ancestor span) bool {
	byID := map[pcommon.SpanID]span{}
	for _, x := range spans {
		byID[x.id] = x
	}
	for range len(spans) {
		if s.parent == ancestor.id && s.trace == ancestor.trace {
			return true
		}
		p, ok := byID[s.parent]
		if !ok {
			return false
		}
		s = p
	}
	return false
}

func named(name string) func(span) bool { return func(s span) bool { return s.name == name } }

// within checks that c ran inside p's time: a child that outlives its parent is a broken link.
func within(t *testing.T, c, p span) {
	t.Helper()
	if c.start < p.start || c.end > p.end {
		t.Errorf("%v ran %v..%v, outside its parent %v %v..%v", c, c.start, c.end, p, p.start, p.end)
	}
}

const symbolizeMethod = "profsym.symbolizer.v1.SymbolizerService/Symbolize"

// TestTraceOfSlowExport follows one export whose symbolization is slow (the binary's index is
// not built yet, so the symbolizer builds it from the stored file) through a real trace sink:
// one trace holds the gateway's receiver and symbolize processor spans, the processor's
// Symbolize client span, the symbolizer's server span as its child (W3C trace context crossed
// the hop), the index span with a miss, the stored index's load (not found) and the build, the
// store calls under them, and the Redis calls the call made.
func TestTraceOfSlowExport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, the symbolizer, Redis and a trace sink")
	}
	ts := startTraceSink(t)
	rd := testsupport.StartRedis(t)
	// The symbolizer reads the standard variables; its batches go out every 100 ms.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ts.url)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	bins := otlptest.Binaries(t)[:1]
	sym := testsupport.StartSymbolizer(t, rd.URL(), "--no-hold-uploaded-indexes", "--log-level", "info")
	sym.Upload(t, bins[0].Path)
	// The upload stored the index it built while verifying the file: remove it, so the
	// Symbolize call finds no index anywhere and builds one.
	removed := 0
	err := filepath.WalkDir(sym.StoreDir(), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".index") && !strings.HasSuffix(path, ".strings") {
			return err
		}
		removed++
		return os.Remove(path)
	})
	if err != nil || removed == 0 {
		t.Fatalf("removed %d stored indexes: %v", removed, err)
	}
	sk := startSink(t)
	g := startGateway(t, gwConfig{Symbolizer: sym.URL(), Downstream: sk.addr, Timeout: time.Minute, Deadline: 2 * time.Minute,
		TracesURL: ts.url + "/v1/traces"})
	pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
	if err := g.send(t.Context(), pd); err != nil {
		t.Fatal(err)
	}
	sk.settle(t, int64(len(cases)), time.Minute)

	// Both processes export in batches: wait until the trace is complete (the build's store
	// put is the last span of the symbolizer's part, the processor span the gateway's).
	var spans []span
	var proc, server span
	complete := func() bool {
		spans = ts.spans()
		var ok bool
		for _, s := range spans {
			if s.service == "profsym-symbolizer" && s.name == "index.build" {
				ok = true
			}
			if s.scope == "github.com/profsym/profsym/processor/symbolizeprocessor" && s.name == "symbolize" {
				proc = s
			}
		}
		if !ok || proc.name == "" {
			return false
		}
		for _, s := range spans {
			if s.name == symbolizeMethod && s.kind == ptrace.SpanKindServer && descends(spans, s, proc) {
				server = s
				idx, ok := child(spans, s, named("index"))
				if !ok {
					return false
				}
				b, ok := child(spans, idx, named("index.build"))
				if !ok {
					return false
				}
				_, ok = child(spans, b, named("store.put"))
				return ok
			}
		}
		return false
	}
	for deadline := time.Now().Add(time.Minute); !complete(); {
		if time.Now().After(deadline) {
			for _, s := range spans {
				t.Log(s)
			}
			t.Fatal("the trace of the export did not arrive complete within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The gateway's part: its receiver's server span above the processor's.
	if proc.service == "profsym-symbolizer" || proc.parent.IsEmpty() {
		t.Errorf("processor span %v: want a gateway span under the receiver's", proc)
	}
	client, ok := child(spans, proc, func(s span) bool { return s.name == symbolizeMethod && s.kind == ptrace.SpanKindClient })
	if !ok {
		t.Fatalf("no Symbolize client span under the processor span %v", proc)
	}
	within(t, client, proc)
	if server.parent != client.id || server.trace != client.trace {
		t.Fatalf("symbolizer span %v is not the child of the processor's client span %v", server, client)
	}
	if server.service != "profsym-symbolizer" {
		t.Errorf("server span from service %q, want profsym-symbolizer", server.service)
	}
	within(t, server, client)

	idx, _ := child(spans, server, named("index"))
	within(t, idx, server)
	if v, ok := idx.attrs.Get("profsym.index.cache_hit"); !ok || v.Bool() {
		t.Errorf("index span cache_hit = %v (present %v), want false: the index was in no memory", v.AsString(), ok)
	}
	if v, ok := idx.attrs.Get("profsym.build_id"); !ok || v.Str() == "" {
		t.Errorf("index span without a build ID")
	}
	load, ok := child(spans, idx, named("index.load"))
	if !ok {
		t.Fatal("no index.load span under the index span: the stored index was not looked for")
	}
	open, ok := child(spans, load, named("store.open"))
	if !ok {
		t.Fatal("no store.open span under index.load")
	}
	if v, ok := open.attrs.Get("profsym.store.found"); !ok || v.Bool() {
		t.Errorf("store.open of the removed index: found = %v (present %v), want false", v.AsString(), ok)
	}
	build, _ := child(spans, idx, named("index.build"))
	within(t, build, idx)
	if build.start < load.end {
		t.Errorf("index.build began before index.load ended")
	}
	if v, ok := build.attrs.Get("profsym.index.bytes"); !ok || v.Int() <= 0 {
		t.Errorf("index.build bytes = %v (present %v)", v.AsString(), ok)
	}
	puts := 0
	for _, s := range spans {
		if s.name == "store.put" && s.parent == build.id {
			within(t, s, build)
			if v, ok := s.attrs.Get("profsym.store.bytes"); !ok || v.Int() <= 0 {
				t.Errorf("store.put without bytes: %v", s)
			}
			puts++
		}
	}
	if puts != 2 {
		t.Errorf("%d store.put spans under index.build, want 2 (the index and its string table)", puts)
	}
	redisSpans := 0
	for _, s := range spans {
		if strings.Contains(s.scope, "redisotel") && descends(spans, s, server) {
			redisSpans++
		}
	}
	if redisSpans == 0 {
		t.Error("no Redis span under the symbolizer's server span (result cache, build lease)")
	}
	for _, s := range spans {
		if s.trace != proc.trace && s.service == "profsym-symbolizer" && strings.HasPrefix(s.name, "index") {
			t.Errorf("index span outside the export's trace: %v", s)
		}
	}
	t.Logf("trace %s: index build %.1f ms of the symbolizer's %.1f ms\n%s", proc.trace,
		float64(build.end-build.start)/1e6, float64(server.end-server.start)/1e6, tree(spans, proc.trace))
}

// tree draws the spans of one trace indented under their parents, with their durations.
func tree(spans []span, id pcommon.TraceID) string {
	var b strings.Builder
	kids := map[pcommon.SpanID][]span{}
	known := map[pcommon.SpanID]bool{}
	for _, s := range spans {
		if s.trace == id {
			known[s.id] = true
		}
	}
	var roots []span
	for _, s := range spans {
		switch {
		case s.trace != id:
		case known[s.parent]:
			kids[s.parent] = append(kids[s.parent], s)
		default:
			roots = append(roots, s)
		}
	}
	var draw func(s span, depth int)
	draw = func(s span, depth int) {
		fmt.Fprintf(&b, "%s%s [%s] %.2f ms\n", strings.Repeat("  ", depth), s.name, s.service, float64(s.end-s.start)/1e6)
		for _, k := range kids[s.id] {
			draw(k, depth+1)
		}
	}
	for _, r := range roots {
		draw(r, 0)
	}
	return b.String()
}
