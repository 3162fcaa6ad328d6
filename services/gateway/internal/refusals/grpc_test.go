package refusals

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// garbage is not a protobuf message: 0xff 0xff ... is a varint tag that never ends.
var garbage = []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffnot protobuf")

// exportRecorder stands for the OTLP receiver behind pdata's gRPC handler (serveExport): it
// records what it is handed and answers err.
type exportRecorder struct {
	mu       sync.Mutex
	err      error
	discard  bool
	received []pprofile.Profiles
}

func (f *exportRecorder) export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return pprofileotlp.NewExportResponse(), f.err
	}
	if f.discard {
		return pprofileotlp.NewExportResponse(), nil
	}
	c := pprofile.NewProfiles()
	req.Profiles().CopyTo(c)
	f.received = append(f.received, c)
	return pprofileotlp.NewExportResponse(), nil
}

func (f *exportRecorder) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *exportRecorder) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.received)
}

// clock is a settable time for the tracker and the readiness window.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

type harness struct {
	ext  *Extension
	tel  *componenttest.Telemetry
	logs *observer.ObservedLogs
	clk  *clock
}

func newHarness(t testing.TB, cfg *Config) *harness {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	core, logs := observer.New(zapcore.InfoLevel)
	set := extensiontest.NewNopSettings(Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	set.Logger = zap.New(core)
	clk := newClock()
	ext, err := newExtension(set, cfg, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{ext: ext, tel: tel, logs: logs, clk: clk}
}

// counts reads otelcol_refused_requests as "transport/reason" -> value.
func (h *harness) counts(t testing.TB) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, err := h.tel.GetMetric(MetricName)
	if err != nil {
		return out
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T, want a Sum[int64]", MetricName, m.Data)
	}
	for _, dp := range sum.DataPoints {
		tr, _ := dp.Attributes.Value("transport")
		r, _ := dp.Attributes.Value("reason")
		out[tr.AsString()+"/"+r.AsString()] = dp.Value
	}
	return out
}

// waitCounts waits until the counts are want: the server counts an RPC in its stats handler
// after the client has its answer.
func (h *harness) waitCounts(t testing.TB, want map[string]int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := h.counts(t)
		if fmt.Sprint(c) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts %v, want %v", c, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitNoPending waits until the codec holds no decode failure (the end of an RPC, which drops
// one left behind, runs after the client has its answer).
func waitNoPending(t testing.TB, ext *Extension, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for ext.codec.pending.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d decode failures left in the codec's map %s", ext.codec.pending.Load(), when)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startGRPC serves a exportRecorder with the extension's options after extra (which stand for the
// receiver's own, such as its authentication interceptor).
func startGRPC(t *testing.T, ext *Extension, maxRecv int, extra ...grpc.ServerOption) (*exportRecorder, *grpc.ClientConn) {
	t.Helper()
	opts, err := ext.GetGRPCServerOptions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	opts = append(append(extra, grpc.MaxRecvMsgSize(maxRecv)), opts...)
	srv := grpc.NewServer(opts...)
	fr := &exportRecorder{}
	serveExport(srv, fr)
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return fr, cc
}

func sendRaw(ctx context.Context, cc *grpc.ClientConn, method string, body []byte) error {
	var reply []byte
	return cc.Invoke(ctx, method, &body, &reply, grpc.ForceCodecV2(otlptest.RawCodec{}))
}

func wellFormed(t testing.TB) (pprofile.Profiles, []byte) {
	t.Helper()
	pd := pprofile.NewProfiles()
	dic := pd.Dictionary()
	dic.StringTable().Append("", "cpu", "nanoseconds", "main")
	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("service.name", "refusals-test")
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.SetProfileID(pprofile.ProfileID{1, 2, 3})
	p.SampleType().SetTypeStrindex(1)
	p.SampleType().SetUnitStrindex(2)
	s := p.Samples().AppendEmpty()
	s.Values().Append(42)
	req := pprofileotlp.NewExportRequestFromProfiles(pd)
	b, err := req.MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return pd, b
}

// TestGRPCUndecodableIsInvalidArgument: garbage to the OTLP Export method is answered
// InvalidArgument naming the problem, the receiver never sees it, it is counted and logged
// once with the sender's address; a well-formed request passes unchanged.
func TestGRPCUndecodableIsInvalidArgument(t *testing.T) {
	h := newHarness(t, createDefaultConfig())
	fr, cc := startGRPC(t, h.ext, 4<<20)
	for range 5 {
		err := sendRaw(t.Context(), cc, otlptest.ExportMethod, garbage)
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("garbage: %v, want InvalidArgument", err)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "not a valid protobuf message") || !strings.Contains(msg, otlptest.ExportMethod) {
			t.Fatalf("garbage: message %q does not name the problem", msg)
		}
	}
	if fr.count() != 0 {
		t.Fatalf("the receiver was handed %d undecodable requests", fr.count())
	}
	pd, body := wellFormed(t)
	if err := sendRaw(t.Context(), cc, otlptest.ExportMethod, body); err != nil {
		t.Fatalf("well-formed request: %v", err)
	}
	if fr.count() != 1 {
		t.Fatalf("receiver got %d requests, want 1", fr.count())
	}
	got, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(fr.received[0])
	if err != nil {
		t.Fatal(err)
	}
	want, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("the well-formed request reached the receiver changed")
	}
	h.waitCounts(t, map[string]int64{"grpc/undecodable": 5})
	warns := h.logs.FilterMessage("Refusing requests").All()
	if len(warns) != 1 {
		t.Fatalf("%d start lines for 5 refusals, want 1", len(warns))
	}
	f := warns[0].ContextMap()
	if f["reason"] != "undecodable" || !strings.HasPrefix(fmt.Sprint(f["peer"]), "127.0.0.1:") || !strings.Contains(fmt.Sprint(f["error"]), "not a valid protobuf") {
		t.Fatalf("start line %v lacks the reason, the peer or the error", f)
	}
	waitNoPending(t, h.ext, "after the undecodable requests")
}

// TestGRPCNoLeftoverFailures: a failure the interceptor never picks up (an earlier interceptor
// refuses, or a second message on a unary RPC) is dropped at the end of the RPC.
func TestGRPCNoLeftoverFailures(t *testing.T) {
	h := newHarness(t, createDefaultConfig())
	refuseAll := grpc.ChainUnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.Unauthenticated, "no credentials")
	})
	_, cc := startGRPC(t, h.ext, 4<<20, refuseAll)
	if err := sendRaw(t.Context(), cc, otlptest.ExportMethod, garbage); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("garbage behind an authenticator: %v, want Unauthenticated", err)
	}
	waitNoPending(t, h.ext, "after the authenticator refused")
	h.waitCounts(t, map[string]int64{"grpc/unauthenticated": 1})

	h2 := newHarness(t, createDefaultConfig())
	_, cc2 := startGRPC(t, h2.ext, 4<<20)
	_, body := wellFormed(t)
	for _, msgs := range [][][]byte{{body, garbage}, {garbage, garbage}} {
		st, err := cc2.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true}, otlptest.ExportMethod, grpc.ForceCodecV2(otlptest.RawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := st.SendMsg(&m); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var reply []byte
		if err := st.RecvMsg(&reply); status.Code(err) != codes.Internal {
			t.Fatalf("two messages on a unary method: %v, want Internal (cardinality violation)", err)
		}
	}
	waitNoPending(t, h2.ext, "after a second message")
}

// TestGRPCReasons: over-size, unknown method and pushback are counted under their reasons,
// and pushback makes the readiness endpoint answer 503 for the window.
func TestGRPCReasons(t *testing.T) {
	h := newHarness(t, createDefaultConfig())
	fr, cc := startGRPC(t, h.ext, 1024)
	if err := sendRaw(t.Context(), cc, otlptest.ExportMethod, make([]byte, 4096)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over-size: %v, want ResourceExhausted", err)
	}
	if err := sendRaw(t.Context(), cc, "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Nope", nil); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v, want Unimplemented", err)
	}
	if err := sendRaw(t.Context(), cc, "/no.Such/Service", nil); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown service: %v, want Unimplemented", err)
	}
	fr.setErr(status.Error(codes.Unavailable, "sending queue is full"))
	_, body := wellFormed(t)
	if err := sendRaw(t.Context(), cc, otlptest.ExportMethod, body); status.Code(err) != codes.Unavailable {
		t.Fatalf("pushback: %v, want Unavailable", err)
	}
	fr.setErr(errors.New("permanent"))
	if err := sendRaw(t.Context(), cc, otlptest.ExportMethod, body); status.Code(err) != codes.Unknown {
		t.Fatalf("other: %v, want Unknown", err)
	}
	want := map[string]int64{"grpc/too_large": 1, "grpc/bad_method_or_path": 2, "grpc/pushback": 1, "grpc/other": 1}
	h.waitCounts(t, want)
	if !h.ext.tracker.pushbackSince(h.clk.now().Add(-time.Second)) {
		t.Fatal("the pushback is not remembered for readiness")
	}
}

func TestClassifyGRPC(t *testing.T) {
	for _, c := range []struct {
		code codes.Code
		msg  string
		want Reason
		ok   bool
	}{
		{codes.Canceled, "context canceled", 0, false},
		{codes.ResourceExhausted, "grpc: received message larger than max (5 vs. 4)", TooLarge, true},
		{codes.ResourceExhausted, "grpc: message after decompression larger than max (5 vs. 4)", TooLarge, true},
		{codes.ResourceExhausted, "quota", Pushback, true},
		{codes.Unimplemented, `grpc: Decompressor is not installed for grpc-encoding "x"`, BadEncoding, true},
		{codes.Unimplemented, "unknown method", BadMethodOrPath, true},
		{codes.Internal, "grpc: failed to decompress the message: EOF", BadEncoding, true},
		{codes.Internal, "grpc: failed to unmarshal the received message: x", Undecodable, true},
		{codes.Internal, "boom", Other, true},
		{codes.Unauthenticated, "", Unauthenticated, true},
		{codes.PermissionDenied, "", Unauthenticated, true},
		{codes.Unavailable, "data refused due to high memory usage", Pushback, true},
		{codes.InvalidArgument, "from the pipeline", Other, true},
		{codes.DeadlineExceeded, "", Other, true},
	} {
		r, ok := classifyGRPC(&rpcState{}, status.New(c.code, c.msg))
		if r != c.want || ok != c.ok {
			t.Errorf("%v %q: %v %v, want %v %v", c.code, c.msg, r, ok, c.want, c.ok)
		}
	}
}

// requestType and responseType are the message types pdata's generated gRPC handler decodes
// a profiles Export into and answers with (pdata's internal ExportProfilesServiceRequest and
// Response, the types of ExportRequest's and ExportResponse's first field): what the OTLP
// receiver hands the codec.
var (
	requestType  = reflect.TypeOf(pprofileotlp.NewExportRequest()).Field(0).Type
	responseType = reflect.TypeOf(pprofileotlp.NewExportResponse()).Field(0).Type
)

// pdataMessage is how pdata's registered "proto" codec encodes its own messages.
type pdataMessage interface {
	SizeProto() int
	MarshalProto([]byte) int
}

// serveExport registers rec as the OTLP profiles service the way pdata's generated handler
// does: a new message of pdata's request type, decoded by the server's codec, handed to the
// interceptor chain, then to rec.
func serveExport(srv *grpc.Server, rec *exportRecorder) {
	handle := func(ctx context.Context, req any) (any, error) {
		m, ok := req.(pdataMessage)
		if !ok {
			return nil, status.Errorf(codes.Internal, "request of type %T", req)
		}
		b := make([]byte, m.SizeProto())
		b = b[:m.MarshalProto(b)]
		r := pprofileotlp.NewExportRequest()
		if err := r.UnmarshalProto(b); err != nil {
			return nil, status.Errorf(codes.Internal, "re-decode request: %v", err)
		}
		if _, err := rec.export(ctx, r); err != nil {
			return nil, err
		}
		return reflect.New(responseType.Elem()).Interface(), nil
	}
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: strings.TrimPrefix(path.Dir(otlptest.ExportMethod), "/"),
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: path.Base(otlptest.ExportMethod),
			Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := reflect.New(requestType.Elem()).Interface()
				if err := dec(in); err != nil {
					return nil, err
				}
				if interceptor == nil {
					return handle(ctx, in)
				}
				return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: otlptest.ExportMethod}, handle)
			},
		}},
	}, nil)
}

// BenchmarkCodecUnmarshal decodes a well-formed request with pdata's codec alone and through
// the wrapper (a new message each time, as gRPC does): the wrapper must add no allocation.
func BenchmarkCodecUnmarshal(b *testing.B) {
	_, body := wellFormed(b)
	if _, ok := reflect.New(requestType.Elem()).Interface().(otlpRequest); !ok {
		b.Fatalf("%v is not an OTLP request to the codec", requestType)
	}
	c := newCodec()
	for _, bc := range []struct {
		name  string
		codec interface {
			Unmarshal(mem.BufferSlice, any) error
		}
	}{{"pdata", c.delegate}, {"wrapped", c}} {
		b.Run(bc.name, func(b *testing.B) {
			data := mem.BufferSlice{mem.SliceBuffer(body)}
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.codec.Unmarshal(data, reflect.New(requestType.Elem()).Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCodecOverhead isolates the wrapper's own cost on success: around a codec that does
// nothing, so the machine's noise on pdata's decode does not hide it.
func BenchmarkCodecOverhead(b *testing.B) {
	msg := reflect.New(requestType.Elem()).Interface()
	data := mem.BufferSlice{mem.SliceBuffer([]byte{})}
	for _, bc := range []struct {
		name  string
		codec interface {
			Unmarshal(mem.BufferSlice, any) error
		}
	}{{"nop", nopCodec{}}, {"wrapped-nop", &codec{delegate: nopCodec{}}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.codec.Unmarshal(data, msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type nopCodec struct{}

func (nopCodec) Marshal(any) (mem.BufferSlice, error) { return nil, nil }
func (nopCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (nopCodec) Name() string                         { return "proto" }

// BenchmarkExportRPC is a whole well-formed Export over loopback, with and without the
// extension's server options (codec, stats handler, interceptors). The Collector's gRPC server
// always has otelgrpc's stats handler, which makes gRPC build its stats events, and the
// receiver's own unary interceptors, which make the generated handler build the interceptor's
// arguments: a no-op stats handler and a pass-through interceptor stand for them in both, so
// the difference is the extension's own.
func BenchmarkExportRPC(b *testing.B) {
	_, body := wellFormed(b)
	for _, with := range []bool{false, true} {
		b.Run(fmt.Sprintf("refusals=%v", with), func(b *testing.B) {
			passThrough := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				return h(ctx, req)
			}
			opts := []grpc.ServerOption{grpc.StatsHandler(nopStats{}), grpc.ChainUnaryInterceptor(passThrough)}
			if with {
				h := newHarness(b, createDefaultConfig())
				o, _ := h.ext.GetGRPCServerOptions(context.Background())
				opts = append(opts, o...)
			}
			srv := grpc.NewServer(opts...)
			serveExport(srv, &exportRecorder{discard: true})
			var lc net.ListenConfig
			ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Stop()
			cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			b.ReportAllocs()
			for b.Loop() {
				if err := sendRaw(context.Background(), cc, otlptest.ExportMethod, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type nopStats struct{}

func (nopStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (nopStats) HandleRPC(context.Context, stats.RPCStats)                         {}
func (nopStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (nopStats) HandleConn(context.Context, stats.ConnStats)                       {}
