package exporter_test

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/services/gateway/internal/exporter"
)

func TestToPprof(t *testing.T) {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	st := d.StringTable()
	st.Append("", "samples", "count", otlpattr.BuildIDHTLHash, "0123456789abcdef0123456789abcdef", "inner", "outer", "a.c",
		"/usr/bin/app", otlpattr.MappingHasInlineFrames, "thread.name", "worker", "thread.id", "tid")
	at := d.AttributeTable()
	at.AppendEmpty()
	kv := at.AppendEmpty() // 1: htlhash
	kv.SetKeyStrindex(3)
	kv.Value().SetStr("0123456789abcdef0123456789abcdef")
	kv = at.AppendEmpty() // 2: has_inline_frames
	kv.SetKeyStrindex(9)
	kv.Value().SetBool(true)
	kv = at.AppendEmpty() // 3: thread.name
	kv.SetKeyStrindex(10)
	kv.Value().SetStr("worker")
	kv = at.AppendEmpty() // 4: thread.id with a unit
	kv.SetKeyStrindex(12)
	kv.Value().SetInt(77)
	kv.SetUnitStrindex(13)
	d.MappingTable().AppendEmpty()
	m := d.MappingTable().AppendEmpty()
	m.SetMemoryStart(0x1000)
	m.SetMemoryLimit(0x9000)
	m.SetFilenameStrindex(8)
	m.AttributeIndices().Append(1, 2)
	d.FunctionTable().AppendEmpty()
	for _, name := range []int32{5, 6} {
		f := d.FunctionTable().AppendEmpty()
		f.SetNameStrindex(name)
		f.SetSystemNameStrindex(name)
		f.SetFilenameStrindex(7)
	}
	d.LocationTable().AppendEmpty()
	l := d.LocationTable().AppendEmpty()
	l.SetMappingIndex(1)
	l.SetAddress(0x1234)
	for i, fn := range []int32{1, 2} {
		ln := l.Lines().AppendEmpty()
		ln.SetFunctionIndex(fn)
		ln.SetLine(int64(10 + i))
	}
	d.StackTable().AppendEmpty()
	d.StackTable().AppendEmpty().LocationIndices().Append(1)
	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("host.name", "n1")
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(1)
	p.SampleType().SetUnitStrindex(2)
	for _, c := range []struct {
		values, timestamps int
	}{{1, 0}, {0, 3}, {0, 0}} {
		s := p.Samples().AppendEmpty()
		s.SetStackIndex(1)
		s.AttributeIndices().Append(3, 4)
		for range c.values {
			s.Values().Append(5)
		}
		for range c.timestamps {
			s.TimestampsUnixNano().Append(1)
		}
	}

	pp, err := exporter.ToPprof(d, rp.Resource(), p)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := pp.Write(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int64{back.Sample[0].Value[0], back.Sample[1].Value[0], back.Sample[2].Value[0]}; got[0] != 5 || got[1] != 3 || got[2] != 1 {
		t.Fatalf("values %v, want [5 3 1] (value, timestamp count, one event)", got)
	}
	mp := back.Mapping[0]
	if mp.BuildID != "0123456789abcdef0123456789abcdef" || !mp.HasInlineFrames || mp.HasFunctions || mp.File != "/usr/bin/app" {
		t.Fatalf("mapping %+v", mp)
	}
	loc := back.Sample[0].Location[0]
	if len(loc.Line) != 2 || loc.Line[0].Function.Name != "inner" || loc.Line[1].Function.Name != "outer" || loc.Line[0].Line != 10 {
		t.Fatalf("inline chain %+v: want inner (innermost) then outer", loc.Line)
	}
	s := back.Sample[0]
	if s.Label["thread.name"][0] != "worker" || s.NumLabel["thread.id"][0] != 77 || s.NumUnit["thread.id"][0] != "tid" {
		t.Fatalf("labels %v %v %v", s.Label, s.NumLabel, s.NumUnit)
	}
	if back.SampleType[0].Type != "samples" || len(back.Comments) != 1 || back.Comments[0] != "host.name=n1" {
		t.Fatalf("sample type %v comments %v", back.SampleType, back.Comments)
	}
}
