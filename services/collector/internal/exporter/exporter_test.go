package exporter

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/services/collector/internal/otlpsinktest"
)

// request encodes a request whose one resource carries tag, padded to about size bytes.
func request(t testing.TB, tag string, size int) []byte {
	t.Helper()
	p := pprofile.NewProfiles()
	d := p.Dictionary()
	d.StringTable().Append("")
	d.StringTable().Append(string(bytes.Repeat([]byte("x"), size)))
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.AttributeTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	rp := p.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("tag", tag)
	rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	b, err := pprofileotlp.NewExportRequestFromProfiles(p).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// val reads a counter's or gauge's value.
func val(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

func tags(ps []pprofile.Profiles) []string {
	var out []string
	for _, p := range ps {
		v, _ := p.ResourceProfiles().At(0).Resource().Attributes().Get("tag")
		out = append(out, v.Str())
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	// The address must be free again: the tests start with the gateway down.
	if err := l.Close(); err != nil {
		t.Fatalf("release %s: %v", addr, err)
	}
	return addr
}

func TestExporterGatewayDownThenUp(t *testing.T) {
	addr := freeAddr(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, err := New(Options{Endpoint: addr, Insecure: true, MaxBufferRequests: 3, MaxBufferBytes: 1 << 20,
		InitialBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Timeout: time.Second}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()

	for _, tag := range []string{"r1", "r2", "r3", "r4", "r5"} {
		e.Enqueue(request(t, tag, 100))
		time.Sleep(30 * time.Millisecond)
	}
	if n, _ := e.Buffered(); n != 3 {
		t.Errorf("buffered %d requests with the gateway down, want 3", n)
	}
	if got := val(t, m.Requests.WithLabelValues("dropped")); got != 2 {
		t.Errorf("dropped = %v, want 2", got)
	}
	time.Sleep(200 * time.Millisecond)
	if val(t, m.Retries) == 0 {
		t.Error("no retries counted while the gateway was down")
	}

	var sink *otlpsinktest.Sink
	for i := 0; ; i++ {
		sink, err = otlpsinktest.Start(t.Context(), addr)
		if err == nil {
			break
		}
		if i > 50 {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer sink.Stop()
	deadline := time.After(10 * time.Second)
	for len(sink.Received()) < 3 {
		select {
		case <-sink.Arrived():
		case <-deadline:
			t.Fatalf("gateway came up but received %d requests", len(sink.Received()))
		}
	}
	if got := tags(sink.Received()); len(got) != 3 || got[0] != "r3" || got[1] != "r4" || got[2] != "r5" {
		t.Errorf("received %v, want the newest three in order [r3 r4 r5]", got)
	}
	// The sink answers before the exporter counts.
	for i := 0; val(t, m.Requests.WithLabelValues("success")) != 3; i++ {
		if i > 200 {
			t.Fatalf("success = %v, want 3", val(t, m.Requests.WithLabelValues("success")))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, b := e.Buffered(); n != 0 || b != 0 || val(t, m.BufferedReqs) != 0 {
		t.Errorf("buffer not empty after delivery: %d requests, %d bytes", n, b)
	}

	// A permanent error rejects the request instead of retrying it forever.
	sink.FailWith(status.Error(codes.InvalidArgument, "bad profile"))
	e.Enqueue(request(t, "bad", 10))
	for i := 0; val(t, m.Requests.WithLabelValues("rejected")) != 1; i++ {
		if i > 200 {
			t.Fatal("permanent error not counted as rejected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	defer scancel()
	e.Shutdown(sctx)
}

func TestExporterBoundedMemory(t *testing.T) {
	addr := freeAddr(t) // nobody listens
	m := NewMetrics(nil)
	const limit = 4 << 20
	e, err := New(Options{Endpoint: addr, Insecure: true, MaxBufferBytes: limit, MaxBufferRequests: 1000,
		InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Run(ctx)
	payload := request(t, "big", 256<<10)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 200; i++ { // 50 MiB offered
		e.Enqueue(bytes.Clone(payload))
	}
	_, b := e.Buffered()
	if b > limit {
		t.Errorf("buffer holds %d bytes, limit %d", b, limit)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grow := int64(after.HeapAlloc) - int64(before.HeapAlloc); grow > 3*limit {
		t.Errorf("heap grew by %d bytes for a %d-byte buffer", grow, limit)
	}
	dropped := val(t, m.Requests.WithLabelValues("dropped"))
	n, _ := e.Buffered()
	if int(dropped)+n != 200 {
		t.Errorf("dropped %v + buffered %d != 200 offered", dropped, n)
	}
	// Oversized: larger than the whole buffer.
	e.Enqueue(make([]byte, limit+1))
	if got := val(t, m.Requests.WithLabelValues("dropped")); got != dropped+1 {
		t.Errorf("oversized request not dropped: %v", got)
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer scancel()
	e.Shutdown(sctx)
	if got := val(t, m.Requests.WithLabelValues("dropped")); int(got) != 201 {
		t.Errorf("after shutdown dropped = %v, want all 201 counted", got)
	}
}

func TestFileWriterRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.pb")
	w, err := NewFileWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	a, b := request(t, "a", 10), request(t, "b", 300)
	if err := w.Write(a); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close output file: %v", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ReadRecords(bytes.NewReader(raw))
	if err != nil || len(recs) != 2 || !bytes.Equal(recs[0], a) || !bytes.Equal(recs[1], b) {
		t.Fatalf("ReadRecords = %d records, %v", len(recs), err)
	}
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(recs[1]); err != nil {
		t.Fatal(err)
	}
	if got := tags([]pprofile.Profiles{req.Profiles()}); got[0] != "b" {
		t.Errorf("record 2 tag %v", got)
	}
	if _, err := ReadRecords(bytes.NewReader(raw[:len(raw)-5])); err == nil {
		t.Error("truncated file read without error")
	}
	if _, err := ReadRecords(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 0x7f})); err == nil {
		t.Error("huge length accepted")
	}
}
