package symbolize_test

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize/symbolizetest"
)

// kernelRequest is request(addrs...) with every location a kernel frame named by the node
// (one line: a function with a name and nothing else, as kallsyms gives), optionally with
// the mapping moved out of ELF space or the name given a line number.
func kernelRequest(nonZeroMapping, withLine bool, addrs ...uint64) pprofile.Profiles {
	pd := request(addrs...)
	d := pd.Dictionary()
	if nonZeroMapping {
		m := d.MappingTable().At(1)
		m.SetMemoryStart(0x1000)
		m.SetMemoryLimit(0x100000)
	}
	d.StringTable().Append(otlpattr.FrameType, otlpattr.FrameTypeKernel, "do_work")
	n := int32(d.StringTable().Len())
	kv := d.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(n - 3)
	kv.Value().SetStr(otlpattr.FrameTypeKernel)
	if d.FunctionTable().Len() == 0 {
		d.FunctionTable().AppendEmpty()
	}
	fn := d.FunctionTable().AppendEmpty()
	fn.SetNameStrindex(n - 1)
	for i := 1; i < d.LocationTable().Len(); i++ {
		loc := d.LocationTable().At(i)
		loc.AttributeIndices().Append(int32(d.AttributeTable().Len() - 1))
		l := loc.Lines().AppendEmpty()
		l.SetFunctionIndex(int32(d.FunctionTable().Len() - 1))
		if withLine {
			l.SetLine(12)
		}
	}
	return pd
}

// TestKernelFrames: a kernel frame named by the node gets the symbolizer's lines and inline
// chain where its debuginfo answers, and keeps its name, unchanged, where it does not;
// frames that are not addresses of the file their build ID names, or that carry lines of
// their own, are not asked about.
func TestKernelFrames(t *testing.T) {
	client := symbolizetest.Client(t, &symbolizetest.Synthetic{})
	s := symbolize.New(symbolize.Config{Client: client, CacheEntries: -1})

	in := kernelRequest(false, false, 0x31, 0x33, 0x37) // 0x37: no frames in the answer
	pd := kernelRequest(false, false, 0x31, 0x33, 0x37)
	rep := s.Process(t.Context(), pd)
	if rep.Seen != 3 || rep.Symbolized != 2 || rep.Unresolved[symbolize.ReasonNoFrames] != 1 {
		t.Fatalf("report %+v, want 3 seen, 2 symbolized, 1 without frames", rep)
	}
	want, got := otlptest.Resolve(in), otlptest.Resolve(pd)
	for i, addr := range []uint64{0x31, 0x33} {
		lines := got[0].Stack[i].Lines
		frames := symbolizetest.Frames(addr)
		if len(lines) != len(frames) {
			t.Fatalf("frame %#x: %d lines, want the answer's %d", addr, len(lines), len(frames))
		}
		for k, f := range frames {
			if lines[k].Function != f.Function || lines[k].File != f.File || lines[k].Line != int64(f.Line) {
				t.Errorf("frame %#x line %d = %+v, want %+v", addr, k, lines[k], f)
			}
		}
	}
	if l := got[0].Stack[2].Lines; len(l) != 1 || l[0] != want[0].Stack[2].Lines[0] {
		t.Errorf("frame without an answer: lines %+v, want the node's %+v", l, want[0].Stack[2].Lines)
	}

	for _, tc := range []struct {
		name string
		pd   func() pprofile.Profiles
	}{
		{"runtime addresses", func() pprofile.Profiles { return kernelRequest(true, false, 0x1031) }},
		{"lines of their own", func() pprofile.Profiles { return kernelRequest(false, true, 0x31) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, pd := tc.pd(), tc.pd()
			if rep := s.Process(t.Context(), pd); rep.Seen != 0 || rep.Symbolized != 0 {
				t.Fatalf("report %+v, want the frame left alone", rep)
			}
			if err := otlptest.Compare(otlptest.Resolve(in), otlptest.Resolve(pd)); err != nil {
				t.Fatal(err)
			}
			if l := otlptest.Resolve(pd)[0].Stack[0].Lines; len(l) != 1 || l[0].Function != "do_work" {
				t.Fatalf("lines %+v", l)
			}
		})
	}
}
