package otlpprofiles_test

import (
	"context"
	"math/rand/v2"
	"net"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

// received is pdata's own OTLP/gRPC server, recording requests as it hands them on.
type received struct {
	pprofileotlp.UnimplementedGRPCServer
	got chan pprofile.Profiles
}

func (r *received) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	r.got <- req.Profiles()
	return pprofileotlp.NewExportResponse(), nil
}

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// viaGRPC sends body, an encoded request, to pdata's gRPC server over loopback and returns what
// the server hands on.
func viaGRPC(t testing.TB, body []byte) pprofile.Profiles {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &received{got: make(chan pprofile.Profiles, 1)}
	s := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(s, r)
	go func() { _ = s.Serve(l) }()
	defer s.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var resp []byte
	if err := conn.Invoke(t.Context(), "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
		&body, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		t.Fatal(err)
	}
	return <-r.got
}

// TestResolveReferences: resource and scope attributes sent as string-table references (as
// pdata's marshaler and the OTel eBPF profiler write them) come out of pdata's gRPC server as
// references, which the pdata API shows as empty keys; after ResolveReferences they read as
// sent, and the string table holds what it held on the wire.
func TestResolveReferences(t *testing.T) {
	pd := otlptest.Generate(rand.New(rand.NewPCG(9, 9)))
	rp := pd.ResourceProfiles().At(0)
	rp.Resource().Attributes().PutStr("process.executable.path", "/usr/bin/app")
	rp.Resource().Attributes().PutEmptyMap("nested").PutStr("k", "v")
	rp.ScopeProfiles().At(0).Scope().Attributes().PutStr("scope.key", "scope.value")
	want := otlptest.Resolve(pd)
	body, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(body)
	if err != nil {
		t.Fatal(err)
	}
	tableLen := wire.Dictionary().StringTable().Len()

	got := viaGRPC(t, body)
	if err := otlptest.Compare(want, otlptest.Resolve(got)); err == nil {
		t.Log("this pdata's gRPC server resolves references itself")
	}
	if err := otlpprofiles.ResolveReferences(got); err != nil {
		t.Fatal(err)
	}
	if err := otlptest.Compare(want, otlptest.Resolve(got)); err != nil {
		t.Fatal(err)
	}
	if n := got.Dictionary().StringTable().Len(); n != tableLen {
		t.Fatalf("string table has %d entries, %d on the wire", n, tableLen)
	}
	// Plain attributes are left alone.
	if err := otlpprofiles.ResolveReferences(got); err != nil {
		t.Fatal(err)
	}
}

// TestResolveReferencesOutsideTable: a key reference outside the string table is an error that
// says where.
func TestResolveReferencesOutsideTable(t *testing.T) {
	pd := pprofile.NewProfiles()
	pd.Dictionary().StringTable().Append("", "host.name", "node-1")
	pd.ResourceProfiles().AppendEmpty().Resource().Attributes().PutStr("host.name", "node-1")
	body, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	// The key's reference (key_strindex, field 3 of KeyValue, varint 1) is pointed past the
	// table.
	i := strings.Index(string(body), "\x18\x01")
	if i < 0 {
		t.Fatalf("no key_strindex 1 in %x", body)
	}
	body[i+1] = 9
	got := viaGRPC(t, body)
	err = otlpprofiles.ResolveReferences(got)
	if err == nil || !strings.Contains(err.Error(), "resource_profiles[0].resource.attributes: key_strindex") {
		t.Fatalf("got %v, want an error naming the resource attribute", err)
	}
}

// BenchmarkResolveReferences is what a request whose resource attributes arrive as references
// (the OTel eBPF profiler's, through the Collector's gRPC receiver) costs on top: the round
// trip through pdata's wire format, on the 500-location benchmark request.
func BenchmarkResolveReferences(b *testing.B) {
	pd := otlptest.Realistic(500, 20)
	attrs := pd.ResourceProfiles().At(0).Resource().Attributes()
	attrs.PutStr("host.name", "node-1")
	attrs.PutStr("process.executable.path", "/usr/bin/app")
	attrs.PutInt("process.pid", 4242)
	body, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		b.Fatal(err)
	}
	wire := viaGRPC(b, body)
	reqs := make([]pprofile.Profiles, b.N)
	for i := range reqs {
		reqs[i] = pprofile.NewProfiles()
		wire.CopyTo(reqs[i])
	}
	b.ResetTimer()
	for i := range b.N {
		if err := otlpprofiles.ResolveReferences(reqs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if _, ok := reqs[0].ResourceProfiles().At(0).Resource().Attributes().Get("host.name"); !ok {
		b.Fatal("references not resolved")
	}
}
