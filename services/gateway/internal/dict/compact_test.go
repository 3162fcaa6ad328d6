package dict_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/services/gateway/internal/dict"
	"github.com/profsym/profsym/services/gateway/internal/otlptest"
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
		want  dict.CompactStats
		clean bool // no orphans afterwards
	}{
		{name: "one orphan per table", edit: func(pprofile.Profiles) {},
			want:  dict.CompactStats{Strings: 1, Attributes: 1, Mappings: 1, Functions: 1, Locations: 1, Stacks: 1, Links: 1},
			clean: true},
		{name: "nothing to drop", edit: func(pd pprofile.Profiles) {
			s := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().AppendEmpty()
			s.SetStackIndex(1)
			s.SetLinkIndex(1)
			s.AttributeIndices().Append(1)
			s.Values().Append(1)
			pd.Dictionary().LocationTable().At(1).Lines().AppendEmpty().SetFunctionIndex(1)
		}, want: dict.CompactStats{}, clean: true},
		{name: "an attribute value that may hide a string reference keeps the strings", edit: func(pd pprofile.Profiles) {
			// An empty value is what pdata shows for a string_value_strindex.
			pcommon.NewValueEmpty().CopyTo(pd.Dictionary().AttributeTable().At(2).Value())
		}, want: dict.CompactStats{Attributes: 1, Mappings: 1, Functions: 1, Locations: 1, Stacks: 1, Links: 1, StringsKept: true}},
		{name: "an index outside its table leaves the request alone", edit: func(pd pprofile.Profiles) {
			pd.Dictionary().LocationTable().At(2).SetMappingIndex(99)
		}, want: dict.CompactStats{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd := request()
			tc.edit(pd)
			in := pprofile.NewProfiles()
			pd.CopyTo(in)
			before := otlptest.Resolve(in)
			got := dict.Compact(pd)
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
			if err := dict.Orphans(pd); (err == nil) != tc.clean {
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
	dict.Compact(pd)
	if err := dict.Orphans(pd); err != nil {
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
	err = dict.Orphans(back)
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
		cs := dict.Compact(pd)
		dropped += cs.Strings + cs.Locations + cs.Stacks + cs.Mappings + cs.Attributes
		if err := otlptest.Compare(otlptest.Resolve(in), otlptest.Resolve(pd)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if err := dict.Orphans(pd); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if dropped == 0 {
		t.Fatal("no random request had an entry to drop: the test compacts nothing")
	}
}
