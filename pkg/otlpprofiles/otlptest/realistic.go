package otlptest

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
)

// Realistic builds an eBPF-profiler-shaped request for benchmarks: nloc native locations
// without lines over nmap mappings with GNU build IDs, 200 stacks of 16 frames, one sample each.
func Realistic(nloc, nmap int) pprofile.Profiles {
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
