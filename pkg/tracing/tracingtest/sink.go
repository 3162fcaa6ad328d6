// Package tracingtest is a trace sink for tests: an OTLP/HTTP receiver on a loopback port that
// keeps what processes export to it, so a test can follow spans across them.
package tracingtest

import (
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Sink answers OTLP/HTTP trace exports (POST /v1/traces, protobuf) and keeps the spans.
type Sink struct {
	// URL is the base URL to set as OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	mu       sync.Mutex
	requests int
	spans    []*tracepb.Span
	services []string
}

// Start runs a Sink until the test ends.
func Start(t testing.TB) *Sink {
	t.Helper()
	s := &Sink{}
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", s.export)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.URL = "http://" + ln.Addr().String()
	return s
}

func (s *Sink) export(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests++
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				s.services = append(s.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			s.spans = append(s.spans, ss.GetSpans()...)
		}
	}
	s.mu.Unlock()
	b, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

// Spans returns the spans received so far.
func (s *Sink) Spans() []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.spans)
}

// Services returns the service.name of every resource received, in order.
func (s *Sink) Services() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.services)
}

// Requests counts the export requests received.
func (s *Sink) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}
