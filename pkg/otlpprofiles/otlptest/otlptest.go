// Package otlptest builds OTLP profiles requests for tests (random valid ones, and ones shaped
// like the OTel eBPF profiler's and pprof's over test binaries it compiles) and resolves
// requests into a plain, index-free form, so tests can compare what went into the gateway or
// the Collector processor with what came out, sample by sample.
package otlptest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
)

// Line is a resolved Location.lines entry.
type Line struct {
	Function, SystemName, File string
	StartLine, Line, Column    int64
}

// Frame is a resolved location.
type Frame struct {
	Address uint64
	// Mapping fields; MappingAttrs are sorted "key=value" strings.
	Start, Limit, Offset uint64
	Filename             string
	MappingAttrs         []string
	Attrs                []string
	Lines                []Line
}

// Sample is a resolved sample with everything around it that must survive the gateway.
type Sample struct {
	Resource, Scope, Profile string
	Values                   []int64
	Timestamps               []uint64
	Attrs                    []string
	Link                     string
	Stack                    []Frame
}

func attrs(d pprofile.ProfilesDictionary, idx pcommon.Int32Slice) []string {
	var out []string
	otlpprofiles.Attr(d, idx, func(k string, kv pprofile.KeyValueAndUnit) {
		out = append(out, fmt.Sprintf("%s=%s(%s)[%s]", k, kv.Value().Type(), kv.Value().AsString(), otlpprofiles.Str(d, kv.UnitStrindex())))
	})
	sort.Strings(out)
	return out
}

func mapAttrs(m pcommon.Map) string {
	var kv []string
	for k, v := range m.All() {
		kv = append(kv, k+"="+v.Type().String()+"("+v.AsString()+")")
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// Resolve flattens pd into samples, in request order. pd must have passed validation.
func Resolve(pd pprofile.Profiles) []Sample {
	d := pd.Dictionary()
	var out []Sample
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		rp := rps.At(i)
		res := fmt.Sprintf("%s|%s|%d", mapAttrs(rp.Resource().Attributes()), rp.SchemaUrl(), rp.Resource().DroppedAttributesCount())
		sps := rp.ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			sp := sps.At(j)
			sc := sp.Scope()
			scope := fmt.Sprintf("%s|%s|%s|%s", sc.Name(), sc.Version(), mapAttrs(sc.Attributes()), sp.SchemaUrl())
			ps := sp.Profiles()
			for k := 0; k < ps.Len(); k++ {
				p := ps.At(k)
				prof := fmt.Sprintf("%s/%s %s/%s t=%d d=%d period=%d id=%x attrs=%v dropped=%d fmt=%s payload=%x",
					otlpprofiles.Str(d, p.SampleType().TypeStrindex()), otlpprofiles.Str(d, p.SampleType().UnitStrindex()),
					otlpprofiles.Str(d, p.PeriodType().TypeStrindex()), otlpprofiles.Str(d, p.PeriodType().UnitStrindex()),
					p.Time(), p.DurationNano(), p.Period(), p.ProfileID(), attrs(d, p.AttributeIndices()),
					p.DroppedAttributesCount(), p.OriginalPayloadFormat(), p.OriginalPayload().AsRaw())
				ss := p.Samples()
				for n := 0; n < ss.Len(); n++ {
					s := ss.At(n)
					rs := Sample{Resource: res, Scope: scope, Profile: prof,
						Values: s.Values().AsRaw(), Timestamps: s.TimestampsUnixNano().AsRaw(),
						Attrs: attrs(d, s.AttributeIndices())}
					if lt := d.LinkTable(); s.LinkIndex() > 0 && int(s.LinkIndex()) < lt.Len() {
						l := lt.At(int(s.LinkIndex()))
						rs.Link = fmt.Sprintf("%s/%s", l.TraceID(), l.SpanID())
					}
					for _, li := range otlpprofiles.Stack(d, s.StackIndex()) {
						rs.Stack = append(rs.Stack, frame(d, li))
					}
					out = append(out, rs)
				}
			}
		}
	}
	return out
}

func frame(d pprofile.ProfilesDictionary, li int32) Frame {
	var f Frame
	loc, ok := otlpprofiles.Location(d, li)
	if !ok {
		return f
	}
	f.Address = loc.Address()
	f.Attrs = attrs(d, loc.AttributeIndices())
	if m, ok := otlpprofiles.Mapping(d, loc.MappingIndex()); ok {
		f.Start, f.Limit, f.Offset = m.MemoryStart(), m.MemoryLimit(), m.FileOffset()
		f.Filename = otlpprofiles.Str(d, m.FilenameStrindex())
		f.MappingAttrs = attrs(d, m.AttributeIndices())
	}
	for i := 0; i < loc.Lines().Len(); i++ {
		ln := loc.Lines().At(i)
		l := Line{Line: ln.Line(), Column: ln.Column()}
		if fn, ok := otlpprofiles.Function(d, ln.FunctionIndex()); ok {
			l.Function = otlpprofiles.Str(d, fn.NameStrindex())
			l.SystemName = otlpprofiles.Str(d, fn.SystemNameStrindex())
			l.File = otlpprofiles.Str(d, fn.FilenameStrindex())
			l.StartLine = fn.StartLine()
		}
		f.Lines = append(f.Lines, l)
	}
	return f
}

// IsHasAttr reports whether a resolved attribute is one of the pprof.mapping.has_* the gateway
// may add.
func IsHasAttr(a string) bool {
	for _, k := range []string{otlpattr.MappingHasFunctions, otlpattr.MappingHasFilenames, otlpattr.MappingHasLineNumbers, otlpattr.MappingHasInlineFrames} {
		if strings.HasPrefix(a, k+"=") {
			return true
		}
	}
	return false
}

// Compare checks that out is in plus symbolization: the same samples in the same order, every
// field equal, except that a location without lines may have gained lines and a mapping may
// have gained pprof.mapping.has_* attributes. It returns the first difference.
func Compare(in, out []Sample) error {
	if len(in) != len(out) {
		return fmt.Errorf("%d samples in, %d out", len(in), len(out))
	}
	for i := range in {
		a, b := in[i], out[i]
		if a.Resource != b.Resource || a.Scope != b.Scope || a.Profile != b.Profile || a.Link != b.Link ||
			fmt.Sprint(a.Values) != fmt.Sprint(b.Values) || fmt.Sprint(a.Timestamps) != fmt.Sprint(b.Timestamps) ||
			fmt.Sprint(a.Attrs) != fmt.Sprint(b.Attrs) {
			return fmt.Errorf("sample %d differs outside its stack:\n in: %+v\nout: %+v", i, a, b)
		}
		if len(a.Stack) != len(b.Stack) {
			return fmt.Errorf("sample %d: %d frames in, %d out", i, len(a.Stack), len(b.Stack))
		}
		for j := range a.Stack {
			fa, fb := a.Stack[j], b.Stack[j]
			if fa.Address != fb.Address || fa.Start != fb.Start || fa.Limit != fb.Limit || fa.Offset != fb.Offset ||
				fa.Filename != fb.Filename || fmt.Sprint(fa.Attrs) != fmt.Sprint(fb.Attrs) {
				return fmt.Errorf("sample %d frame %d changed:\n in: %+v\nout: %+v", i, j, fa, fb)
			}
			var added []string
			for _, x := range fb.MappingAttrs {
				if !contains(fa.MappingAttrs, x) {
					added = append(added, x)
				}
			}
			for _, x := range fa.MappingAttrs {
				if !contains(fb.MappingAttrs, x) {
					return fmt.Errorf("sample %d frame %d lost mapping attribute %s", i, j, x)
				}
			}
			for _, x := range added {
				if !IsHasAttr(x) {
					return fmt.Errorf("sample %d frame %d gained mapping attribute %s", i, j, x)
				}
			}
			if len(fa.Lines) > 0 && fmt.Sprint(fa.Lines) != fmt.Sprint(fb.Lines) {
				return fmt.Errorf("sample %d frame %d lines changed:\n in: %+v\nout: %+v", i, j, fa.Lines, fb.Lines)
			}
		}
	}
	return nil
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// Generate builds a random valid request: every table seeded with its zero entry, mappings with
// and without build IDs, locations native, kernel, Go or without frame type, some already with
// lines, samples with values or only timestamps, links, attributes of several types.
func Generate(r *rand.Rand) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	st := d.StringTable()
	st.Append("")
	str := func(s string) int32 { st.Append(s); return int32(st.Len() - 1) }

	at := d.AttributeTable()
	at.AppendEmpty()
	addAttr := func(key string, set func(v pcommon.Value), unit string) int32 {
		kv := at.AppendEmpty()
		kv.SetKeyStrindex(str(key))
		set(kv.Value())
		if unit != "" {
			kv.SetUnitStrindex(str(unit))
		}
		return int32(at.Len() - 1)
	}
	frameTypes := []int32{
		addAttr(otlpattr.FrameType, func(v pcommon.Value) { v.SetStr(otlpattr.FrameTypeNative) }, ""),
		addAttr(otlpattr.FrameType, func(v pcommon.Value) { v.SetStr(otlpattr.FrameTypeKernel) }, ""),
		addAttr(otlpattr.FrameType, func(v pcommon.Value) { v.SetStr(otlpattr.FrameTypeGo) }, ""),
	}
	var sampleAttrs []int32
	for i := range 1 + r.IntN(5) {
		switch r.IntN(3) {
		case 0:
			sampleAttrs = append(sampleAttrs, addAttr(fmt.Sprintf("thread.name.%d", i), func(v pcommon.Value) { v.SetStr(fmt.Sprintf("t%d", r.IntN(9))) }, ""))
		case 1:
			sampleAttrs = append(sampleAttrs, addAttr("thread.id", func(v pcommon.Value) { v.SetInt(r.Int64N(1e6)) }, "count"))
		default:
			sampleAttrs = append(sampleAttrs, addAttr("flag", func(v pcommon.Value) { v.SetBool(r.IntN(2) == 0) }, ""))
		}
	}

	mt := d.MappingTable()
	mt.AppendEmpty()
	for i := range 1 + r.IntN(6) {
		m := mt.AppendEmpty()
		if r.IntN(3) > 0 {
			m.SetMemoryStart(uint64(0x400000 + i*0x100000))
			m.SetMemoryLimit(m.MemoryStart() + 0x80000)
			m.SetFileOffset(uint64(r.IntN(4)) * 0x1000)
		}
		m.SetFilenameStrindex(str(fmt.Sprintf("/usr/lib/lib%d.so", i)))
		switch r.IntN(4) {
		case 0:
			m.AttributeIndices().Append(addAttr(otlpattr.BuildIDGNU, func(v pcommon.Value) { v.SetStr(fmt.Sprintf("%040x", r.Uint64())) }, ""))
		case 1:
			m.AttributeIndices().Append(addAttr(otlpattr.BuildIDHTLHash, func(v pcommon.Value) { v.SetStr(fmt.Sprintf("%032x", r.Uint64())) }, ""))
			m.AttributeIndices().Append(addAttr(otlpattr.BuildIDGo, func(v pcommon.Value) { v.SetStr(fmt.Sprintf("go%d/x", r.IntN(100))) }, ""))
		case 2:
			m.AttributeIndices().Append(addAttr(otlpattr.MappingHasFunctions, func(v pcommon.Value) { v.SetBool(true) }, ""))
			m.AttributeIndices().Append(addAttr(otlpattr.BuildIDGNU, func(v pcommon.Value) { v.SetStr(fmt.Sprintf("%016x", r.Uint64())) }, ""))
		}
	}

	ft := d.FunctionTable()
	ft.AppendEmpty()
	for i := range r.IntN(4) {
		f := ft.AppendEmpty()
		f.SetNameStrindex(str(fmt.Sprintf("existing_%d", i)))
		f.SetFilenameStrindex(str("existing.c"))
		f.SetStartLine(int64(r.IntN(100)))
	}

	lt := d.LocationTable()
	lt.AppendEmpty()
	nloc := 1 + r.IntN(40)
	for range nloc {
		l := lt.AppendEmpty()
		l.SetMappingIndex(int32(r.IntN(mt.Len())))
		l.SetAddress(0x400000 + uint64(r.IntN(64))*0x10)
		switch r.IntN(5) {
		case 0:
			l.AttributeIndices().Append(frameTypes[0])
		case 1:
			l.AttributeIndices().Append(frameTypes[1])
		case 2:
			l.AttributeIndices().Append(frameTypes[2])
		}
		if ft.Len() > 1 && r.IntN(4) == 0 {
			ln := l.Lines().AppendEmpty()
			ln.SetFunctionIndex(int32(1 + r.IntN(ft.Len()-1)))
			ln.SetLine(int64(r.IntN(500)))
		}
	}
	stt := d.StackTable()
	stt.AppendEmpty()
	for range 1 + r.IntN(10) {
		s := stt.AppendEmpty()
		for range 1 + r.IntN(12) {
			s.LocationIndices().Append(int32(1 + r.IntN(nloc)))
		}
	}
	lkt := d.LinkTable()
	lkt.AppendEmpty()
	for range r.IntN(3) {
		l := lkt.AppendEmpty()
		var tid [16]byte
		var sid [8]byte
		for i := range tid {
			tid[i] = byte(r.IntN(256))
		}
		for i := range sid {
			sid[i] = byte(r.IntN(256))
		}
		l.SetTraceID(tid)
		l.SetSpanID(sid)
	}

	for ri := range 1 + r.IntN(2) {
		rp := pd.ResourceProfiles().AppendEmpty()
		rp.Resource().Attributes().PutStr("host.name", fmt.Sprintf("node-%d", ri))
		rp.Resource().Attributes().PutInt("process.pid", int64(1000+ri))
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName("profsym-test")
		sp.Scope().SetVersion("1")
		for k := range 1 + r.IntN(2) {
			p := sp.Profiles().AppendEmpty()
			if k == 0 {
				p.SampleType().SetTypeStrindex(str("samples"))
				p.SampleType().SetUnitStrindex(str("count"))
				p.PeriodType().SetTypeStrindex(str("cpu"))
				p.PeriodType().SetUnitStrindex(str("nanoseconds"))
				p.SetPeriod(52631578)
			} else {
				// An off-CPU profile beside the CPU one, as the collector and the OTel eBPF
				// profiler send it: nanoseconds off the CPU per blocking, no period.
				p.SampleType().SetTypeStrindex(str("events"))
				p.SampleType().SetUnitStrindex(str("nanoseconds"))
			}
			p.SetTime(pcommon.Timestamp(1_700_000_000_000_000_000 + r.Int64N(1e12)))
			p.SetDurationNano(uint64(r.Int64N(1e10)))
			var id [16]byte
			id[0] = byte(r.IntN(256))
			p.SetProfileID(id)
			for range r.IntN(30) {
				s := p.Samples().AppendEmpty()
				s.SetStackIndex(int32(r.IntN(stt.Len())))
				if r.IntN(2) == 0 {
					s.Values().Append(r.Int64N(100))
				}
				for range r.IntN(3) {
					s.TimestampsUnixNano().Append(uint64(r.Int64N(1e18)))
				}
				if lkt.Len() > 1 && r.IntN(2) == 0 {
					s.SetLinkIndex(int32(1 + r.IntN(lkt.Len()-1)))
				}
				for range r.IntN(3) {
					s.AttributeIndices().Append(sampleAttrs[r.IntN(len(sampleAttrs))])
				}
			}
		}
	}
	return pd
}
