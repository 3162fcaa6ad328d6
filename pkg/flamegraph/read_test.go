package flamegraph

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
)

// otlpRequest is one request with two samples: main -> compute with square inlined (a
// location of two lines, values 3), and an unsymbolized address in libfoo.so (timestamps only,
// 2 of them), as the node collector leaves a frame it could not symbolize.
func otlpRequest(t testing.TB) []byte {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	for _, s := range []string{"", otlpattr.FrameType, "cpu", "nanoseconds", "main", "compute", "square", "/src/prog.c", "/src/math.h", "/usr/lib/libfoo.so"} {
		d.StringTable().Append(s)
	}
	d.AttributeTable().AppendEmpty()
	a := d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(1)
	a.Value().SetStr("native")
	d.MappingTable().AppendEmpty()
	m := d.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(9)
	d.FunctionTable().AppendEmpty()
	for _, f := range [][2]int32{{4, 7}, {5, 7}, {6, 8}} {
		fn := d.FunctionTable().AppendEmpty()
		fn.SetNameStrindex(f[0])
		fn.SetFilenameStrindex(f[1])
	}
	d.LocationTable().AppendEmpty()
	inl := d.LocationTable().AppendEmpty() // 1: square inlined into compute
	inl.SetAddress(0x1010)
	inl.AttributeIndices().Append(1)
	for _, l := range [][2]int64{{3, 4}, {2, 12}} {
		ln := inl.Lines().AppendEmpty()
		ln.SetFunctionIndex(int32(l[0]))
		ln.SetLine(l[1])
	}
	mainLoc := d.LocationTable().AppendEmpty() // 2: main
	mainLoc.SetAddress(0x1100)
	ln := mainLoc.Lines().AppendEmpty()
	ln.SetFunctionIndex(1)
	ln.SetLine(30)
	unsym := d.LocationTable().AppendEmpty() // 3
	unsym.SetMappingIndex(1)
	unsym.SetAddress(0x2345)
	d.StackTable().AppendEmpty()
	s1 := d.StackTable().AppendEmpty()
	s1.LocationIndices().FromRaw([]int32{1, 2})
	s2 := d.StackTable().AppendEmpty()
	s2.LocationIndices().FromRaw([]int32{3, 2})
	prof := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(2)
	prof.SampleType().SetUnitStrindex(3)
	smp := prof.Samples().AppendEmpty()
	smp.SetStackIndex(1)
	smp.Values().Append(3)
	smp = prof.Samples().AppendEmpty()
	smp.SetStackIndex(2)
	smp.TimestampsUnixNano().FromRaw([]uint64{1, 2})
	b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantOTLPStacks() []Stack {
	native := func(f Frame) Frame { f.Kind = "native"; return f }
	mainF := Frame{Function: "main", File: "/src/prog.c", Line: 30, Address: 0x1100}
	return []Stack{
		{Value: 3, Frames: []Frame{
			native(Frame{Function: "square", File: "/src/math.h", Line: 4, Inlined: true, Address: 0x1010}),
			native(Frame{Function: "compute", File: "/src/prog.c", Line: 12, Address: 0x1010}),
			mainF}},
		{Value: 2, Frames: []Frame{{Module: "/usr/lib/libfoo.so", Address: 0x2345}, mainF}},
	}
}

// pprofProfile is the same program as a pprof profile.
func pprofProfile() *profile.Profile {
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x500000, File: "/usr/lib/libfoo.so"}
	mainFn := &profile.Function{ID: 1, Name: "main", Filename: "/src/prog.c"}
	compute := &profile.Function{ID: 2, Name: "compute", Filename: "/src/prog.c"}
	square := &profile.Function{ID: 3, Name: "square", Filename: "/src/math.h"}
	inl := &profile.Location{ID: 1, Address: 0x1010, Line: []profile.Line{{Function: square, Line: 4}, {Function: compute, Line: 12}}}
	mainLoc := &profile.Location{ID: 2, Address: 0x1100, Line: []profile.Line{{Function: mainFn, Line: 30}}}
	unsym := &profile.Location{ID: 3, Mapping: m, Address: 0x2345}
	return &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{inl, mainLoc}, Value: []int64{3, 30}},
			{Location: []*profile.Location{unsym, mainLoc}, Value: []int64{2, 20}},
		},
		Mapping:  []*profile.Mapping{m},
		Location: []*profile.Location{inl, mainLoc, unsym},
		Function: []*profile.Function{mainFn, compute, square},
	}
}

func length32(recs ...[]byte) []byte {
	var b []byte
	for _, r := range recs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(r)))
		b = append(b, r...)
	}
	return b
}

func uvarintDelimited(recs ...[]byte) []byte {
	var b []byte
	for _, r := range recs {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	return b
}

func pprofBytes(t testing.TB, gzipped bool) []byte {
	var b bytes.Buffer
	if gzipped {
		if err := pprofProfile().Write(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	if err := pprofProfile().WriteUncompressed(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestParseFormats(t *testing.T) {
	req := otlpRequest(t)
	twice := append(wantOTLPStacks(), wantOTLPStacks()...)
	pprofWant := func(v0, v1 int64) []Stack {
		s := wantOTLPStacks()
		for i := range s {
			for j := range s[i].Frames {
				s[i].Frames[j].Kind = ""
			}
		}
		s[0].Value, s[1].Value = v0, v1
		return s
	}
	for _, tc := range []struct {
		name       string
		data       []byte
		sampleType string
		format     Format
		unit       string
		want       []Stack
	}{
		{"otlp plain", req, "", FormatOTLP, "cpu", wantOTLPStacks()},
		{"otlp uvarint", uvarintDelimited(req, req), "", FormatOTLPUvarint, "cpu", twice},
		{"otlp length32", length32(req, req), "", FormatOTLPLength32, "cpu", twice},
		{"pprof gzipped, last type", pprofBytes(t, true), "", FormatPprof, "cpu (nanoseconds)", pprofWant(30, 20)},
		{"pprof plain, named type", pprofBytes(t, false), "samples", FormatPprof, "samples (count)", pprofWant(3, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.data, tc.sampleType)
			if err != nil {
				t.Fatal(err)
			}
			if p.Format != tc.format || p.Unit != tc.unit {
				t.Errorf("format %q unit %q, want %q %q", p.Format, p.Unit, tc.format, tc.unit)
			}
			if !reflect.DeepEqual(p.Stacks, tc.want) {
				t.Errorf("stacks\n%+v\nwant\n%+v", p.Stacks, tc.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	req := otlpRequest(t)
	// A stack index past the table: the sample's stack_index field (tag 1 of Sample) is not
	// easy to reach in bytes, so the request is rebuilt with a bad index.
	pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(req)
	if err != nil {
		t.Fatal(err)
	}
	pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).SetStackIndex(99)
	badIndex, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("not a profile"))
	_ = zw.Close()
	for _, tc := range []struct {
		name, want string
		data       []byte
		sampleType string
	}{
		{"empty", "empty file", nil, ""},
		{"text", "neither a pprof profile", []byte("hello, world\n"), ""},
		{"gzipped text", "gzipped, but not a pprof profile", gz.Bytes(), ""},
		{"bad stack index", "stack index 99 outside the table", badIndex, ""},
		{"unknown sample type", `no sample type "alloc"`, pprofBytes(t, true), "alloc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.data, tc.sampleType)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
}

// FuzzParse feeds Parse arbitrary bytes: an error is fine, a panic or a hang is not. The seeds
// are the formats it reads, made here.
func FuzzParse(f *testing.F) {
	req := otlpRequest(f)
	f.Add(req)
	f.Add(uvarintDelimited(req))
	f.Add(length32(req))
	f.Add(pprofBytes(f, false))
	f.Add(pprofBytes(f, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b, "")
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := Render(&out, TreeOf(p.Stacks), Options{}); err != nil {
			t.Fatal(err)
		}
	})
}
