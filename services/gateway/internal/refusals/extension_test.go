package refusals

import (
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.uber.org/zap/zapcore"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// httpReceiverStandIn answers like the OTLP receiver: 405 for a method other than POST, 415 for a
// content type other than protobuf or JSON, 400 (an OTLP status in protobuf) for a body it
// cannot read or decode, and then status.
func httpReceiverStandIn(status int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "405 method not allowed, supported: [POST]", http.StatusMethodNotAllowed)
			return
		}
		if r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "415 unsupported media type", http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err == nil && bytes.HasPrefix(body, []byte("garbage")) {
			err = errors.New("proto: illegal wireType 7")
		}
		if err != nil {
			b, _ := proto.Marshal(&spb.Status{Code: 3, Message: err.Error()})
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(b)
			return
		}
		w.WriteHeader(status)
	})
}

// TestHTTPRefusals runs the wrapper the way confighttp does (inside its body size limit and
// decompression) around a handler that answers like the OTLP receiver.
func TestHTTPRefusals(t *testing.T) {
	h := newHarness(t, createDefaultConfig())
	status := http.StatusOK
	wrap, err := h.ext.GetHTTPHandler(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inner, err := wrap(context.Background(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpReceiverStandIn(status).ServeHTTP(w, r)
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") == "deflate" {
			r.Body = flate.NewReader(r.Body)
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64)
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	do := func(method, ct, enc string, body []byte) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+"/v1development/profiles", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	pb := "application/x-protobuf"
	for range 3 {
		if code := do(http.MethodPost, pb, "", []byte("garbage")); code != http.StatusBadRequest {
			t.Fatalf("garbage: %d", code)
		}
	}
	if code := do(http.MethodPost, "text/plain", "", nil); code != http.StatusUnsupportedMediaType {
		t.Fatalf("content type: %d", code)
	}
	if code := do(http.MethodGet, pb, "", nil); code != http.StatusMethodNotAllowed {
		t.Fatalf("method: %d", code)
	}
	if code := do(http.MethodPost, pb, "", make([]byte, 100)); code != http.StatusBadRequest {
		t.Fatalf("too large: %d", code)
	}
	if code := do(http.MethodPost, pb, "deflate", []byte("\xff\xff not deflate")); code != http.StatusBadRequest {
		t.Fatalf("corrupt deflate: %d", code)
	}
	if code := do(http.MethodPost, pb, "", []byte("ok")); code != http.StatusOK {
		t.Fatalf("well-formed: %d", code)
	}
	status = http.StatusServiceUnavailable
	if code := do(http.MethodPost, pb, "", []byte("ok")); code != http.StatusServiceUnavailable {
		t.Fatalf("pushback: %d", code)
	}
	want := map[string]int64{"http/undecodable": 3, "http/bad_content_type": 1, "http/bad_method_or_path": 1,
		"http/too_large": 1, "http/bad_encoding": 1, "http/pushback": 1}
	h.waitCounts(t, want)
	starts := h.logs.FilterMessage("Refusing requests").All()
	if len(starts) != len(want) {
		t.Fatalf("%d start lines, want one per reason (%d)", len(starts), len(want))
	}
	for _, l := range starts {
		f := l.ContextMap()
		if f["reason"] == "undecodable" && f["error"] != "proto: illegal wireType 7" {
			t.Fatalf("undecodable: error %q, want the OTLP status's message", f["error"])
		}
		if !strings.HasPrefix(fmt.Sprint(f["peer"]), "127.0.0.1:") {
			t.Fatalf("start line %v has no peer", f)
		}
	}
}

// TestEpisodeLogs: a WARN when refusals of a reason start, one summary per interval while they
// go on (not a line per request), an INFO when a whole interval passes without one.
func TestEpisodeLogs(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.LogInterval = 10 * time.Second
	h := newHarness(t, cfg)
	tr := h.ext.tracker
	for i := range 100 {
		tr.refused(GRPC, Pushback, fmt.Sprintf("10.0.0.%d:4000", i%3), "sending queue is full")
		h.clk.advance(100 * time.Millisecond) // 100 refusals over 10 s
		tr.tick(h.clk.now())
	}
	h.clk.advance(5 * time.Second)
	tr.tick(h.clk.now())
	h.clk.advance(10 * time.Second)
	tr.tick(h.clk.now())
	var got []string
	for _, l := range h.logs.All() {
		got = append(got, l.Level.String()+" "+l.Message)
	}
	want := []string{"warn Refusing requests", "warn Still refusing requests", "info Stopped refusing requests"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("log lines %q, want %q", got, want)
	}
	sum := h.logs.All()[1].ContextMap()
	if sum["refused_since_last_log"] != int64(99) || sum["last_peer"] != "10.0.0.0:4000" || sum["last_error"] != "sending queue is full" {
		t.Fatalf("summary %v", sum)
	}
	end := h.logs.All()[2].ContextMap()
	if end["refused"] != int64(100) {
		t.Fatalf("end line %v, want 100 refused", end)
	}
	if h.logs.All()[2].Level != zapcore.InfoLevel {
		t.Fatal("the end of an episode is not INFO")
	}
	// A new refusal after the end starts a new episode.
	tr.refused(GRPC, Pushback, "10.0.0.9:1", "again")
	if n := h.logs.FilterMessage("Refusing requests").Len(); n != 2 {
		t.Fatalf("%d start lines, want 2", n)
	}
}

// TestReadiness: 503 until the pipelines run, 503 for the window after a pushback, 200
// otherwise, 503 again once the Collector announces the receivers stop.
func TestReadiness(t *testing.T) {
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A free port for the extension to listen on.
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := createDefaultConfig()
	cfg.Readiness.Endpoint = addr
	cfg.Readiness.PushbackWindow = 5 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	if err := h.ext.Start(t.Context(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.ext.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	probe := func(path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := probe("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("before the pipelines run: %d, want 503", code)
	}
	if err := h.ext.Ready(); err != nil {
		t.Fatal(err)
	}
	if code, _ := probe("/readyz"); code != http.StatusOK {
		t.Fatalf("running: %d, want 200", code)
	}
	if code, _ := probe("/other"); code != http.StatusNotFound {
		t.Fatalf("another path: %d, want 404", code)
	}
	h.ext.tracker.refused(HTTP, Undecodable, "10.0.0.1:1", "bad")
	if code, _ := probe("/readyz"); code != http.StatusOK {
		t.Fatalf("after a refusal that is not pushback: %d, want 200", code)
	}
	h.ext.tracker.refused(GRPC, Pushback, "10.0.0.1:1", "sending queue is full")
	h.clk.advance(4 * time.Second)
	if code, body := probe("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "pushed back") {
		t.Fatalf("4 s after a pushback: %d %q, want 503 naming the pushback", code, body)
	}
	h.clk.advance(2 * time.Second)
	if code, _ := probe("/readyz"); code != http.StatusOK {
		t.Fatalf("6 s after a pushback (window 5 s): %d, want 200", code)
	}
	if err := h.ext.NotReady(); err != nil {
		t.Fatal(err)
	}
	if code, _ := probe("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("receivers stopping: %d, want 503", code)
	}
}

func TestFactoryAndConfig(t *testing.T) {
	f := NewFactory()
	if f.Type() != Type {
		t.Fatalf("type %v", f.Type())
	}
	cfg := f.CreateDefaultConfig()
	if err := componenttest.CheckConfigStruct(cfg); err != nil {
		t.Fatal(err)
	}
	c, ok := cfg.(*Config)
	if !ok {
		t.Fatalf("default config %T", cfg)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	ext, err := f.Create(context.Background(), extensiontest.NewNopSettings(Type), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := ext.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	bad := createDefaultConfig()
	bad.LogInterval = 0
	bad.Readiness = ReadinessConfig{Endpoint: "127.0.0.1:1", Path: "readyz"}
	err = bad.Validate()
	for _, want := range []string{"log_interval", "readiness::path", "readiness::pushback_window"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v, want it to name %s", err, want)
		}
	}

	// A taken port is a start error that names the endpoint.
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := createDefaultConfig()
	taken.Readiness.Endpoint = ln.Addr().String()
	ext, err = f.Create(context.Background(), extensiontest.NewNopSettings(Type), taken)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("start on a taken port: %v", err)
	}
}
