package plainencoding_test

import (
	"bytes"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/services/gateway/internal/plainencoding"
)

// ebpfShaped is a request as the OTel eBPF profiler sends one: process attributes on the
// resource, plain strings, one of them (the executable's path) also a mapping's file name.
func ebpfShaped(scopeAttrs bool) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("", "samples", "count", "/usr/bin/app")
	d.AttributeTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	m := d.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(3)
	m.SetMemoryStart(0x1000)
	m.SetMemoryLimit(0x5000)
	d.LocationTable().AppendEmpty()
	l := d.LocationTable().AppendEmpty()
	l.SetMappingIndex(1)
	l.SetAddress(0x1234)
	d.StackTable().AppendEmpty()
	d.StackTable().AppendEmpty().LocationIndices().Append(1)
	for i := range 2 {
		rp := pd.ResourceProfiles().AppendEmpty()
		ra := rp.Resource().Attributes()
		ra.PutStr("process.executable.path", "/usr/bin/app")
		ra.PutInt("process.pid", int64(4242+i))
		ra.PutStr("container.id", fmt.Sprintf("c%d", i))
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName("profiler")
		if scopeAttrs {
			sa := sp.Scope().Attributes()
			sa.PutStr("scope.key", "scope.value")
			kv := sa.PutEmptyMap("nested")
			kv.PutStr("inner.key", "inner.value")
			kv.PutStr("path", "/usr/bin/app")
			arr := sa.PutEmptySlice("list")
			arr.AppendEmpty().SetStr("element")
			arr.AppendEmpty().SetInt(3)
		}
		p := sp.Profiles().AppendEmpty()
		p.SampleType().SetTypeStrindex(1)
		p.SampleType().SetUnitStrindex(2)
		p.SetTime(pcommon.Timestamp(1_000))
		p.SetDurationNano(1_000)
		s := p.Samples().AppendEmpty()
		s.SetStackIndex(1)
		s.TimestampsUnixNano().Append(1_500)
	}
	return pd
}

func decode(t *testing.T, b []byte) pprofile.Profiles {
	t.Helper()
	pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
	if err != nil {
		t.Fatal(err)
	}
	return pd
}

func TestMarshal(t *testing.T) {
	for _, tc := range []struct {
		name       string
		scopeAttrs bool
		readOnly   bool
	}{
		{"resource attributes", false, false},
		{"resource and nested scope attributes", true, false},
		{"read-only request", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd := ebpfShaped(tc.scopeAttrs)
			if err := otlpprofiles.Orphans(pd); err != nil {
				t.Fatalf("test request: %v", err)
			}
			in := pprofile.NewProfiles()
			pd.CopyTo(in)
			if tc.readOnly {
				pd.MarkReadOnly()
			}
			// pdata's own marshaler: the defect this guards against.
			cp := pprofile.NewProfiles()
			pd.CopyTo(cp)
			plain, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(cp)
			if err != nil {
				t.Fatal(err)
			}
			if err := otlpprofiles.Orphans(decode(t, plain)); err == nil {
				t.Fatal("pdata's marshaler left no orphan: the test shows nothing")
			}

			b, err := plainencoding.Marshal(pd)
			if err != nil {
				t.Fatal(err)
			}
			back := decode(t, b)
			if err := otlpprofiles.Orphans(back); err != nil {
				t.Fatalf("orphans in the output: %v", err)
			}
			if err := otlptest.Compare(otlptest.Resolve(in), otlptest.Resolve(back)); err != nil {
				t.Fatal(err)
			}
			if got, want := back.Dictionary().StringTable().AsRaw(), in.Dictionary().StringTable().AsRaw(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("string table %q, want %q", got, want)
			}
			// The caller's request keeps its attributes as they were.
			if err := otlptest.Compare(otlptest.Resolve(in), otlptest.Resolve(pd)); err != nil {
				t.Fatalf("Marshal changed its input: %v", err)
			}
			for i := range 2 {
				a := back.ResourceProfiles().At(i).Resource().Attributes().AsRaw()
				if a["process.executable.path"] != "/usr/bin/app" || a["process.pid"] != int64(4242+i) || a["container.id"] != fmt.Sprintf("c%d", i) {
					t.Fatalf("resource %d attributes %v", i, a)
				}
			}
		})
	}
}

// TestMarshalNothingAppended: with no attribute string the dictionary lacks, the bytes are
// pdata's.
func TestMarshalNothingAppended(t *testing.T) {
	pd := ebpfShaped(false)
	d := pd.Dictionary()
	d.StringTable().Append("host.name")
	kv := d.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(int32(d.StringTable().Len() - 1))
	kv.Value().SetStr("n1")
	for i := range 2 {
		rp := pd.ResourceProfiles().At(i)
		rp.ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).AttributeIndices().Append(1)
		rp.Resource().Attributes().Clear()
		rp.Resource().Attributes().PutStr("host.name", "/usr/bin/app")
	}
	if err := otlpprofiles.Orphans(pd); err != nil {
		t.Fatal(err)
	}
	b, err := plainencoding.Marshal(pd)
	if err != nil {
		t.Fatal(err)
	}
	want, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatal("bytes differ from pdata's although the marshaler appended no string")
	}
}

// BenchmarkMarshal: a symbolized 500-location request with process attributes on each of 4
// resources, encoded by pdata's marshaler and by Marshal.
func BenchmarkMarshal(b *testing.B) {
	pd := ebpfShaped(true)
	d := pd.Dictionary()
	for i := range 1000 {
		d.StringTable().Append(fmt.Sprintf("namespace::function_%d", i))
		d.FunctionTable().AppendEmpty().SetNameStrindex(int32(d.StringTable().Len() - 1))
	}
	for i := range 500 {
		l := d.LocationTable().AppendEmpty()
		l.SetMappingIndex(1)
		l.SetAddress(uint64(0x1000 + i))
		for k := range 2 {
			l.Lines().AppendEmpty().SetFunctionIndex(int32(1 + (2*i+k)%1000))
		}
		d.StackTable().AppendEmpty().LocationIndices().Append(int32(d.LocationTable().Len() - 1))
	}
	for range 2 {
		pd.ResourceProfiles().At(0).CopyTo(pd.ResourceProfiles().AppendEmpty())
	}
	pd.MarkReadOnly()
	b.Run("pdata", func(b *testing.B) {
		for range b.N {
			if _, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Marshal", func(b *testing.B) {
		for range b.N {
			if _, err := plainencoding.Marshal(pd); err != nil {
				b.Fatal(err)
			}
		}
	})
}
