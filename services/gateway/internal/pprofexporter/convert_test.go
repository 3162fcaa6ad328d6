package pprofexporter_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/services/gateway/internal/pprofexporter"
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

	pp, err := pprofexporter.ToPprof(d, rp.Resource(), p)
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

// burnProfile is a profile of a PIE program, burn_o2_pie, that spends its time in libburn.so:
// the leaf is in the library, which is also the first mapping in the table, while the
// outermost frames (main, _start) are in the executable. Frame types as the OTel eBPF
// profiler sends them; stacks leaf first.
func burnProfile(exeStart, libStart uint64, outerKernel bool) (pprofile.Profiles, pprofile.Profile) {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("", "samples", "count", "/usr/lib/libburn.so", "/opt/burn/burn_o2_pie", otlpattr.FrameType, otlpattr.FrameTypeNative, otlpattr.FrameTypeKernel)
	at := d.AttributeTable()
	at.AppendEmpty()
	kv := at.AppendEmpty() // 1: native
	kv.SetKeyStrindex(5)
	kv.Value().SetStr(otlpattr.FrameTypeNative)
	kv = at.AppendEmpty() // 2: kernel
	kv.SetKeyStrindex(5)
	kv.Value().SetStr(otlpattr.FrameTypeKernel)
	mt := d.MappingTable()
	mt.AppendEmpty()
	for _, m := range []struct {
		file  int32
		start uint64
	}{{3, libStart}, {4, exeStart}, {4, exeStart + 0x10000}} { // 1: lib, 2 and 3: executable segments
		e := mt.AppendEmpty()
		e.SetFilenameStrindex(m.file)
		e.SetMemoryStart(m.start)
		e.SetMemoryLimit(m.start + 0x8000)
	}
	lt := d.LocationTable()
	lt.AppendEmpty()
	for _, l := range []struct {
		mapping int32
		addr    uint64
		typ     int32
	}{{1, libStart + 0x1100, 1}, {3, exeStart + 0x10200, 1}, {2, exeStart + 0x1050, 1}, {0, 0xffffffff81000000, 2}} {
		e := lt.AppendEmpty()
		e.SetMappingIndex(l.mapping)
		e.SetAddress(l.addr)
		e.AttributeIndices().Append(l.typ)
	}
	st := d.StackTable()
	st.AppendEmpty()
	full := st.AppendEmpty().LocationIndices() // 1: burn (lib) <- main <- _start (both in the executable)
	full.Append(1, 2, 3)
	if outerKernel {
		full.Append(4)
	}
	st.AppendEmpty().LocationIndices().Append(1) // 2: the library alone, the stack cut short
	st.AppendEmpty().LocationIndices().Append(4) // 3: the kernel alone
	rp := pd.ResourceProfiles().AppendEmpty()
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(1)
	p.SampleType().SetUnitStrindex(2)
	return pd, p
}

func TestToPprofMainMapping(t *testing.T) {
	const exe, lib = "/opt/burn/burn_o2_pie", "/usr/lib/libburn.so"
	for _, tc := range []struct {
		name     string
		resource map[string]any
		stacks   []int32 // stack of each sample, in order
		// ELF virtual addresses (both near 0) rather than process addresses.
		elfVA, outerKernel bool
		want               string
		wantStart          uint64
	}{
		{name: "resource path", resource: map[string]any{otlpattr.ProcessExecutablePath: exe}, stacks: []int32{2, 1}, want: exe, wantStart: 0x5555_5555_0000},
		{name: "resource path seen from another mount namespace", resource: map[string]any{otlpattr.ProcessExecutablePath: "/proc/7/root/opt/burn/burn_o2_pie"}, stacks: []int32{2, 1}, want: exe, wantStart: 0x5555_5555_0000},
		{name: "resource name", resource: map[string]any{otlpattr.ProcessExecutableName: "burn_o2_pie"}, stacks: []int32{2, 1}, elfVA: true, want: exe, wantStart: 0x1000},
		{name: "resource names a binary no sample reaches", resource: map[string]any{otlpattr.ProcessExecutablePath: "/bin/other"}, stacks: []int32{1}, elfVA: true, want: exe, wantStart: 0x1000},
		{name: "first sample's outermost native frame", stacks: []int32{1, 2}, elfVA: true, want: exe, wantStart: 0x1000},
		{name: "outermost frame is the kernel's", stacks: []int32{1}, elfVA: true, outerKernel: true, want: exe, wantStart: 0x1000},
		{name: "first sample cut short: its outermost frame still decides", stacks: []int32{2, 1}, want: lib, wantStart: 0x7f00_0000_0000},
		{name: "first sample in the kernel only: lowest address", stacks: []int32{3, 2, 1}, want: exe, wantStart: 0x5555_5555_0000},
		{name: "one mapping only", stacks: []int32{2}, want: lib, wantStart: 0x7f00_0000_0000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exeStart, libStart := uint64(0x5555_5555_0000), uint64(0x7f00_0000_0000)
			if tc.elfVA {
				exeStart, libStart = 0x1000, 0x0
			}
			pd, p := burnProfile(exeStart, libStart, tc.outerKernel)
			if err := pd.ResourceProfiles().At(0).Resource().Attributes().FromRaw(tc.resource); err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.stacks {
				e := p.Samples().AppendEmpty()
				e.SetStackIndex(s)
				e.Values().Append(1)
			}
			pp, err := pprofexporter.ToPprof(pd.Dictionary(), pd.ResourceProfiles().At(0).Resource(), p)
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
			if m := back.Mapping[0]; m.File != tc.want || m.Start != tc.wantStart || m.ID != 1 {
				t.Fatalf("first mapping %d %s at %#x, want %s at %#x", m.ID, m.File, m.Start, tc.want, tc.wantStart)
			}
			// Samples still reach the same frames.
			for i, s := range back.Sample {
				if tc.stacks[i] == 3 {
					continue
				}
				if got := s.Location[0].Mapping.File; got != lib {
					t.Fatalf("leaf of sample %d in %s, want %s", i, got, lib)
				}
			}
		})
	}
}

// TestPprofTopNamesMainBinary: go tool pprof reports the executable as the profile's file.
func TestPprofTopNamesMainBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	pd, p := burnProfile(0x5555_5555_0000, 0x7f00_0000_0000, false)
	pd.ResourceProfiles().At(0).Resource().Attributes().PutStr(otlpattr.ProcessExecutablePath, "/opt/burn/burn_o2_pie")
	for range 3 {
		s := p.Samples().AppendEmpty()
		s.SetStackIndex(1)
		s.Values().Append(1)
	}
	pp, err := pprofexporter.ToPprof(pd.Dictionary(), pd.ResourceProfiles().At(0).Resource(), p)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "burn.pb.gz")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := pp.Write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "go", "tool", "pprof", "-top", file)
	// No binaries to find: pprof must report what the profile says.
	cmd.Env = append(os.Environ(), "PPROF_BINARY_PATH="+dir, "PPROF_TOOLS="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "File: burn_o2_pie\n") {
		t.Fatalf("go tool pprof -top does not name burn_o2_pie as the file:\n%s", out)
	}
}
