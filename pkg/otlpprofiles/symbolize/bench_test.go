package symbolize_test

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
)

// realistic builds an eBPF-profiler-shaped request: nloc locations over nmap mappings, 200
// stacks of 16 frames.
func realistic(nloc, nmap int) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("", otlpattr.BuildIDGNU, otlpattr.FrameType, otlpattr.FrameTypeNative)
	d.AttributeTable().AppendEmpty()
	ft := d.AttributeTable().AppendEmpty()
	ft.SetKeyStrindex(2)
	ft.Value().SetStr(otlpattr.FrameTypeNative)
	d.MappingTable().AppendEmpty()
	for i := range nmap {
		kv := d.AttributeTable().AppendEmpty()
		kv.SetKeyStrindex(1)
		kv.Value().SetStr(fmt.Sprintf("%040x", i+1))
		m := d.MappingTable().AppendEmpty()
		m.SetMemoryStart(0x1000)
		m.SetMemoryLimit(0x100000)
		m.AttributeIndices().Append(int32(d.AttributeTable().Len() - 1))
	}
	d.LocationTable().AppendEmpty()
	for i := range nloc {
		l := d.LocationTable().AppendEmpty()
		l.SetMappingIndex(int32(1 + i%nmap))
		l.SetAddress(uint64(0x1001 + i*7))
		l.AttributeIndices().Append(1)
	}
	d.StackTable().AppendEmpty()
	p := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	for s := range 200 {
		st := d.StackTable().AppendEmpty()
		for k := range 16 {
			st.LocationIndices().Append(int32(1 + (s*31+k*17)%nloc))
		}
		smp := p.Samples().AppendEmpty()
		smp.SetStackIndex(int32(s + 1))
		smp.TimestampsUnixNano().Append(1, 2)
	}
	return pd
}

// BenchmarkProcessCached is the gateway's own work on a 500-location request whose symbols are
// all in the cache: validation, collection, cache lookups and the dictionary rewrite.
func BenchmarkProcessCached(b *testing.B) {
	h := &synthetic{}
	s := symbolize.New(symbolize.Config{Client: start(b, h)})
	tmpl := realistic(500, 20)
	s.Process(context.Background(), copyOf(tmpl))
	reqs := make([]pprofile.Profiles, b.N)
	for i := range reqs {
		reqs[i] = copyOf(tmpl)
	}
	calls := h.calls.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := otlpprofiles.Validate(reqs[i]); err != nil {
			b.Fatal(err)
		}
		rep := s.Process(context.Background(), reqs[i])
		if rep.Symbolized == 0 {
			b.Fatal("nothing symbolized")
		}
	}
	b.StopTimer()
	if h.calls.Load() != calls {
		b.Fatal("cached request called the symbolizer")
	}
}
