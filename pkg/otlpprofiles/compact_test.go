package otlpprofiles_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

// request is one sample over one location with lines, a mapping and attributes, plus an
// unreferenced entry in every table.
func request() pprofile.Profiles {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("", "orphan", "samples", "count", "main", "main.c", "/bin/app", "thread.name", "ms")
	at := d.AttributeTable()
	at.AppendEmpty()
	o := at.AppendEmpty() // 1: orphan
	o.SetKeyStrindex(1)
	o.Value().SetStr("x")
	kv := at.AppendEmpty() // 2: thread.name=w with a unit
	kv.SetKeyStrindex(7)
	kv.Value().SetStr("w")
	kv.SetUnitStrindex(8)
	mt := d.MappingTable()
	mt.AppendEmpty()
	mt.AppendEmpty().SetFilenameStrindex(1) // 1: orphan
	m := mt.AppendEmpty()                   // 2
	m.SetFilenameStrindex(6)
	m.SetMemoryStart(0x1000)
	m.SetMemoryLimit(0x2000)
	ft := d.FunctionTable()
	ft.AppendEmpty()
	ft.AppendEmpty().SetNameStrindex(1) // 1: orphan
	f := ft.AppendEmpty()               // 2
	f.SetNameStrindex(4)
	f.SetFilenameStrindex(5)
	lt := d.LocationTable()
	lt.AppendEmpty()
	lt.AppendEmpty().SetMappingIndex(1) // 1: orphan, the only user of mapping 1
	l := lt.AppendEmpty()               // 2
	l.SetMappingIndex(2)
	l.SetAddress(0x1234)
	l.AttributeIndices().Append(2)
	ln := l.Lines().AppendEmpty()
	ln.SetFunctionIndex(2)
	ln.SetLine(7)
	stt := d.StackTable()
	stt.AppendEmpty()
	stt.AppendEmpty().LocationIndices().Append(1) // 1: orphan
	stt.AppendEmpty().LocationIndices().Append(2) // 2
	lk := d.LinkTable()
	lk.AppendEmpty()
	lk.AppendEmpty().SetTraceID([16]byte{1}) // 1: orphan
	lk.AppendEmpty().SetTraceID([16]byte{2}) // 2
	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("process.executable.path", "/bin/app")
	rp.Resource().Attributes().PutInt("process.pid", 7)
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(2)
	p.SampleType().SetUnitStrindex(3)
	s := p.Samples().AppendEmpty()
	s.SetStackIndex(2)
	s.SetLinkIndex(2)
	s.AttributeIndices().Append(2)
	s.Values().Append(3)
	return pd
}

func TestCompact(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(pd pprofile.Profiles)
		want  otlpprofiles.CompactStats
		clean bool // no orphans afterwards
	}{
		{name: "one orphan per table", edit: func(pprofile.Profiles) {},
			want:  otlpprofiles.CompactStats{Strings: 1, Attributes: 1, Mappings: 1, Functions: 1, Locations: 1, Stacks: 1, Links: 1},
			clean: true},
		{name: "nothing to drop", edit: func(pd pprofile.Profiles) {
			s := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().AppendEmpty()
			s.SetStackIndex(1)
			s.SetLinkIndex(1)
			s.AttributeIndices().Append(1)
			s.Values().Append(1)
			pd.Dictionary().LocationTable().At(1).Lines().AppendEmpty().SetFunctionIndex(1)
		}, want: otlpprofiles.CompactStats{}, clean: true},
		{name: "an attribute value that may hide a string reference keeps the strings", edit: func(pd pprofile.Profiles) {
			// An empty value is what pdata shows for a string_value_strindex.
			pcommon.NewValueEmpty().CopyTo(pd.Dictionary().AttributeTable().At(2).Value())
		}, want: otlpprofiles.CompactStats{Attributes: 1, Mappings: 1, Functions: 1, Locations: 1, Stacks: 1, Links: 1, StringsKept: true}},
		{name: "an index outside its table leaves the request alone", edit: func(pd pprofile.Profiles) {
			pd.Dictionary().LocationTable().At(2).SetMappingIndex(99)
		}, want: otlpprofiles.CompactStats{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd := request()
			tc.edit(pd)
			in := pprofile.NewProfiles()
			pd.CopyTo(in)
			before := otlptest.Resolve(in)
			got := otlpprofiles.Compact(pd)
			if got != tc.want {
				t.Fatalf("compact %+v, want %+v", got, tc.want)
			}
			if tc.want.Locations+tc.want.Mappings > 0 {
				// Strict: no lines or attributes gained either.
				if err := otlptest.Compare(before, otlptest.Resolve(pd)); err != nil {
					t.Fatal(err)
				}
				a, b := otlptest.Resolve(in), otlptest.Resolve(pd)
				if len(a[0].Stack) != 1 || len(b[0].Stack[0].Lines) != len(a[0].Stack[0].Lines) {
					t.Fatalf("stack changed: %+v -> %+v", a, b)
				}
			}
			if err := otlpprofiles.Orphans(pd); (err == nil) != tc.clean {
				t.Fatalf("orphans after compaction: %v, want clean=%v", err, tc.clean)
			}
		})
	}
}

// TestOrphansSeesMarshalerStrings: pdata's marshaler writes resource attributes as references
// to strings it appends to the string table; profcheck counts no reference from resource
// attributes, and neither does Orphans on the decoded request.
func TestOrphansSeesMarshalerStrings(t *testing.T) {
	pd := request()
	otlpprofiles.Compact(pd)
	if err := otlpprofiles.Orphans(pd); err != nil {
		t.Fatal(err)
	}
	b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	back, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
	if err != nil {
		t.Fatal(err)
	}
	err = otlpprofiles.Orphans(back)
	if err == nil || !strings.Contains(err.Error(), `"process.pid"`) || !strings.Contains(err.Error(), `"process.executable.path"`) {
		t.Fatalf("orphans %v: want the resource attribute keys the marshaler appended", err)
	}
	if strings.Contains(err.Error(), `"/bin/app"`) {
		t.Fatalf("orphans %v: /bin/app is a mapping's file name as well", err)
	}
}

// TestCompactRandom: over random valid requests, compaction leaves no orphans and changes no
// sample.
func TestCompactRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	dropped := 0
	for i := range 300 {
		pd := otlptest.Generate(r)
		in := pprofile.NewProfiles()
		pd.CopyTo(in)
		cs := otlpprofiles.Compact(pd)
		dropped += cs.Strings + cs.Locations + cs.Stacks + cs.Mappings + cs.Attributes
		if err := otlptest.Compare(otlptest.Resolve(in), otlptest.Resolve(pd)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if err := otlpprofiles.Orphans(pd); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if dropped == 0 {
		t.Fatal("no random request had an entry to drop: the test compacts nothing")
	}
}

// BenchmarkCompact: a 500-location request after the rewrite, as the gateway compacts one per
// request: every location with two lines, and a tenth of each table unreferenced.
func BenchmarkCompact(b *testing.B) {
	tmpl := pprofile.NewProfiles()
	d := tmpl.Dictionary()
	d.StringTable().Append("")
	for i := range 1100 {
		d.StringTable().Append(fmt.Sprintf("function_%d", i))
	}
	d.AttributeTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	for i := range 22 {
		m := d.MappingTable().AppendEmpty()
		m.SetFilenameStrindex(int32(1000 + i))
	}
	d.FunctionTable().AppendEmpty()
	for i := range 1000 {
		d.FunctionTable().AppendEmpty().SetNameStrindex(int32(1 + i))
	}
	d.LocationTable().AppendEmpty()
	for i := range 550 {
		l := d.LocationTable().AppendEmpty()
		l.SetMappingIndex(int32(1 + i%20))
		for k := range 2 {
			l.Lines().AppendEmpty().SetFunctionIndex(int32(1 + (2*i+k)%900))
		}
	}
	d.StackTable().AppendEmpty()
	p := tmpl.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	for s := range 220 {
		st := d.StackTable().AppendEmpty()
		for k := range 16 {
			st.LocationIndices().Append(int32(1 + (s*31+k*17)%500))
		}
		if s < 200 {
			smp := p.Samples().AppendEmpty()
			smp.SetStackIndex(int32(s + 1))
			smp.TimestampsUnixNano().Append(1, 2)
		}
	}
	b.ResetTimer()
	for range b.N {
		// A fresh copy each time, made off the clock: Compact changes its request.
		b.StopTimer()
		pd := pprofile.NewProfiles()
		tmpl.CopyTo(pd)
		b.StartTimer()
		if cs := otlpprofiles.Compact(pd); cs.Locations == 0 {
			b.Fatalf("nothing dropped: %+v", cs)
		}
	}
}
