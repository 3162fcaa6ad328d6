package pipeline

import (
	"debug/elf"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpattr"
)

// TextSegment returns the executable PT_LOAD of the ELF file at path.
func TextSegment(path string) (elf.ProgHeader, error) {
	f, err := elf.Open(path)
	if err != nil {
		return elf.ProgHeader{}, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return p.ProgHeader, nil
		}
	}
	return elf.ProgHeader{}, fmt.Errorf("%s: no executable PT_LOAD", path)
}

// ProfilerRequest builds a request shaped like the OpenTelemetry eBPF profiler's: one sample
// per address (ELF virtual addresses of the binary at path), one frame each, the mapping the
// binary's executable PT_LOAD in ELF virtual-address space, named by its htlhash and, when
// ids has one, its GNU build ID; native frame types, and a timestamp instead of a value.
// resource attributes are added to the request's resource.
func ProfilerRequest(path string, ids buildid.IDs, addrs []uint64, resource map[string]string) (pprofile.Profiles, error) {
	text, err := TextSegment(path)
	if err != nil {
		return pprofile.Profiles{}, err
	}
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	st := d.StringTable()
	for _, s := range []string{"", otlpattr.FrameType, otlpattr.BuildIDHTLHash, otlpattr.BuildIDGNU, "samples", "count", path} {
		st.Append(s)
	}
	at := d.AttributeTable()
	at.AppendEmpty()
	native := at.AppendEmpty()
	native.SetKeyStrindex(1)
	native.Value().SetStr(otlpattr.FrameTypeNative)
	htl := at.AppendEmpty()
	htl.SetKeyStrindex(2)
	htl.Value().SetStr(ids.HTLHash)
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	m := d.MappingTable().AppendEmpty()
	m.SetMemoryStart(text.Vaddr)
	m.SetMemoryLimit(text.Vaddr + text.Memsz)
	m.SetFileOffset(text.Off)
	m.SetFilenameStrindex(6)
	m.AttributeIndices().Append(2)
	if ids.GNU != "" {
		gnu := at.AppendEmpty()
		gnu.SetKeyStrindex(3)
		gnu.Value().SetStr(ids.GNU)
		m.AttributeIndices().Append(int32(at.Len() - 1))
	}

	rp := pd.ResourceProfiles().AppendEmpty()
	for k, v := range resource {
		rp.Resource().Attributes().PutStr(k, v)
	}
	prof := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(4)
	prof.SampleType().SetUnitStrindex(5)
	now := uint64(time.Now().UnixNano())
	prof.SetTime(pcommon.Timestamp(now))
	for _, a := range addrs {
		loc := d.LocationTable().AppendEmpty()
		loc.SetMappingIndex(1)
		loc.SetAddress(a)
		loc.AttributeIndices().Append(1)
		stk := d.StackTable().AppendEmpty()
		stk.LocationIndices().Append(int32(d.LocationTable().Len() - 1))
		s := prof.Samples().AppendEmpty()
		s.SetStackIndex(int32(d.StackTable().Len() - 1))
		s.TimestampsUnixNano().Append(now)
	}
	return pd, nil
}

// FuncRange returns the ELF virtual address range [lo, hi) of the function symbol name.
func FuncRange(path, name string) (lo, hi uint64, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	for _, s := range syms {
		if s.Name == name && s.Size > 0 {
			return s.Value, s.Value + s.Size, nil
		}
	}
	return 0, 0, fmt.Errorf("%s: no function symbol %s", path, name)
}
