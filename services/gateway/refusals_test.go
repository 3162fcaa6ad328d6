package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

// unknownCompressor is a compression the gateway does not have (it is registered in this test
// process only).
type unknownCompressor struct{}

func (unknownCompressor) Compress(w io.Writer) (io.WriteCloser, error) { return nopCloser{w}, nil }
func (unknownCompressor) Decompress(r io.Reader) (io.Reader, error)    { return r, nil }
func (unknownCompressor) Name() string                                 { return "x-test-unknown" }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func init() { encoding.RegisterCompressor(unknownCompressor{}) }

// logLine is one JSON line of the gateway's log.
type logLine map[string]any

// logLines reads the gateway's JSON log lines whose message is msg.
func (g *gateway) logLines(t *testing.T, msg string) []logLine {
	t.Helper()
	f, err := os.Open(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		if l["msg"] == msg {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// refusalLines are the lines with msg about refusals of transport and reason.
func (g *gateway) refusalLines(t *testing.T, msg, transport, reason string) []logLine {
	t.Helper()
	var out []logLine
	for _, l := range g.logLines(t, msg) {
		if l["transport"] == transport && l["reason"] == reason {
			out = append(out, l)
		}
	}
	return out
}

// waitLog waits until the log has a line with msg about transport and reason.
func (g *gateway) waitLog(t *testing.T, msg, transport, reason string, timeout time.Duration) logLine {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if ls := g.refusalLines(t, msg, transport, reason); len(ls) > 0 {
			return ls[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q line for %s/%s after %v", msg, transport, reason, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readiness is the status code of the refusals extension's readiness endpoint.
func (g *gateway) readiness(t *testing.T) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, g.ports.ReadinessURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("readiness: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestRefusalsAnsweredCountedLogged sends the gateway binary what it must refuse, over both
// transports: each gets the answer that names it (gRPC InvalidArgument for bytes that do not
// decode, not Internal), is counted under its reason in /metrics, and is logged once per
// episode with the sender's address, not once per request; a well-formed request in between
// comes out at the downstream as it went in, plus symbols.
func TestRefusalsAnsweredCountedLogged(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, the symbolizer and a downstream")
	}
	b, sym, sk := startWithOneBinary(t)
	g := startGateway(t, gwConfig{Symbolizer: sym.URL(), Downstream: sk.addr, JSONLogs: true, RefusalLogInterval: time.Second})
	cc, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	raw := func(method string, body []byte, opts ...grpc.CallOption) error {
		var reply []byte
		return cc.Invoke(t.Context(), method, &body, &reply, append(opts, grpc.ForceCodecV2(otlptest.RawCodec{}))...)
	}

	garbage := []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffnot an OTLP request")
	for range 5 {
		err := raw(otlptest.ExportMethod, garbage)
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("gRPC garbage: %v, want InvalidArgument", err)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "not a valid protobuf message") || !strings.Contains(msg, "ProfilesService/Export") {
			t.Fatalf("gRPC garbage: message %q does not name the problem", msg)
		}
	}
	if err := raw(otlptest.ExportMethod, make([]byte, 17<<20)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("gRPC 17 MiB (limit 16 MiB): %v, want ResourceExhausted", err)
	}
	if err := raw(otlptest.ExportMethod, garbage, grpc.UseCompressor(unknownCompressor{}.Name())); status.Code(err) != codes.Unimplemented {
		t.Fatalf("gRPC with a compression the gateway lacks: %v, want Unimplemented", err)
	}
	if err := raw("/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Import", nil); status.Code(err) != codes.Unimplemented {
		t.Fatalf("gRPC unknown method: %v, want Unimplemented", err)
	}

	const path = "/v1development/profiles"
	for range 3 {
		if code := g.post(t, http.MethodPost, path, "application/x-protobuf", garbage); code != http.StatusBadRequest {
			t.Fatalf("HTTP garbage: %d, want 400", code)
		}
	}
	if code := g.post(t, http.MethodPost, path, "text/plain", garbage); code != http.StatusUnsupportedMediaType {
		t.Fatalf("HTTP text/plain: %d, want 415", code)
	}
	if code := g.post(t, http.MethodGet, path, "application/x-protobuf", nil); code != http.StatusMethodNotAllowed {
		t.Fatalf("HTTP GET: %d, want 405", code)
	}
	if code := g.post(t, http.MethodPost, "/v1/nothing", "application/x-protobuf", garbage); code != http.StatusNotFound {
		t.Fatalf("HTTP unknown path: %d, want 404", code)
	}

	// A well-formed request still goes through whole.
	pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
	in := pprofile.NewProfiles()
	pd.CopyTo(in)
	if err := g.send(t.Context(), pd); err != nil {
		t.Fatalf("well-formed request: %v", err)
	}
	sk.settle(t, int64(len(cases)), 30*time.Second)
	out := otlptest.Resolve(sk.received()[0])
	if err := otlptest.Compare(otlptest.Resolve(in), out); err != nil {
		t.Fatal(err)
	}
	otlptest.CheckFrames(t, out, cases)

	m := g.metrics(t)
	for _, c := range []struct {
		transport, reason string
		want              float64
	}{
		{"grpc", "undecodable", 5},
		{"grpc", "too_large", 1},
		{"grpc", "bad_encoding", 1},
		{"grpc", "bad_method_or_path", 1},
		{"http", "undecodable", 3},
		{"http", "bad_content_type", 1},
		{"http", "bad_method_or_path", 2},
	} {
		if got := m.sum("otelcol_refused_requests", `transport="`+c.transport+`"`, `reason="`+c.reason+`"`); got != c.want {
			var have []string
			for _, x := range m {
				if strings.HasPrefix(x.name, "otelcol_refused") {
					have = append(have, fmt.Sprintf("%s%s=%v", x.name, x.labels, x.value))
				}
			}
			t.Errorf("otelcol_refused_requests{%s,%s} = %v, want %v; have %v", c.transport, c.reason, got, c.want, have)
		}
	}
	if got := m.sum("otelcol_refused_requests", `reason="pushback"`) + m.sum("otelcol_refused_requests", `reason="other"`); got != 0 {
		t.Errorf("%v refusals counted as pushback or other, want none", got)
	}

	// One WARN per reason for the whole run of refusals, with the sender's address and the
	// error; an INFO once a log interval passes without one.
	for _, c := range []struct{ transport, reason, errText string }{
		{"grpc", "undecodable", "not a valid protobuf message"},
		{"grpc", "too_large", "larger than max"},
		{"http", "undecodable", ""},
		{"http", "bad_content_type", "unsupported media type"},
	} {
		starts := g.refusalLines(t, "Refusing requests", c.transport, c.reason)
		if len(starts) != 1 {
			t.Fatalf("%d start lines for %s/%s, want 1", len(starts), c.transport, c.reason)
		}
		if l := starts[0]; l["level"] != "warn" || !strings.HasPrefix(fmt.Sprint(l["peer"]), "127.0.0.1:") || !strings.Contains(fmt.Sprint(l["error"]), c.errText) {
			t.Fatalf("start line for %s/%s: %v; want WARN with the peer and an error with %q", c.transport, c.reason, l, c.errText)
		}
		end := g.waitLog(t, "Stopped refusing requests", c.transport, c.reason, 10*time.Second)
		if end["level"] != "info" {
			t.Fatalf("end line %v is not INFO", end)
		}
	}
	if l := g.waitLog(t, "Stopped refusing requests", "grpc", "undecodable", time.Second); l["refused"] != float64(5) {
		t.Fatalf("end line %v, want refused 5", l)
	}
	if l := g.waitLog(t, "Stopped refusing requests", "http", "undecodable", time.Second); l["refused"] != float64(3) {
		t.Fatalf("end line %v, want refused 3", l)
	}
}
