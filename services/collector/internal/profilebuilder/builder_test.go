package profilebuilder

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/services/collector/internal/kallsyms"
	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

func attrMap(p pprofile.Profiles, idx interface {
	Len() int
	At(int) int32
}) map[string]string {
	d := p.Dictionary()
	out := map[string]string{}
	for i := 0; i < idx.Len(); i++ {
		kv := d.AttributeTable().At(int(idx.At(i)))
		out[d.StringTable().At(int(kv.KeyStrindex()))] = kv.Value().AsString()
	}
	return out
}

func TestBuilderRealProcess(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := uint32(cmd.Process.Pid)
	time.Sleep(100 * time.Millisecond) // let the exec finish
	tab := procmaps.NewTable("/proc", procmaps.NewFileCache(16), nil)
	p := tab.Process(pid)
	if len(p.Mappings) == 0 {
		t.Fatalf("no executable mappings for sleep: %+v", p)
	}
	m := p.Mappings[0]
	pc1, pc2 := m.Start+0x10, m.Start+0x20
	ks, err := kallsyms.Parse(strings.NewReader("ffffffff81000000 T _stext\nffffffff81000100 t do_work\nffffffffc0300000 t ext4_read\t[ext4]\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := New(Options{FrequencyHz: 19, HostAttributes: map[string]string{otlpattr.HostName: "node-1"}, ScopeName: "profsym-collector"}, tab, ks)
	t0 := time.Now()
	for i := 0; i < 3; i++ {
		b.Add(&Sample{Time: t0.Add(time.Duration(i) * time.Millisecond), PID: pid, TID: pid, Comm: "sleep",
			Kernel: []uint64{0xffffffff81000105, 0xffffffffc0300011}, User: []uint64{pc1, pc2}})
	}
	// Another process that cannot be resolved (pid 0 does not exist in /proc).
	b.Add(&Sample{Time: t0, PID: 999999999, Comm: "ghost", User: []uint64{0x1234}})
	out := b.Finish(t0, t0.Add(10*time.Second))
	if err := otlpprofiles.ValidateStrict(out); err != nil {
		t.Fatalf("ValidateStrict: %v", err)
	}
	if b.Len() != 4 || out.ResourceProfiles().Len() != 2 {
		t.Fatalf("samples %d, resources %d", b.Len(), out.ResourceProfiles().Len())
	}
	rp := out.ResourceProfiles().At(0)
	res := rp.Resource().Attributes()
	if v, _ := res.Get(otlpattr.ProcessPID); v.Int() != int64(pid) {
		t.Errorf("process.pid = %v", v.AsString())
	}
	if v, _ := res.Get(otlpattr.ProcessExecutableName); v.Str() != "sleep" {
		t.Errorf("process.executable.name = %q", v.Str())
	}
	if v, _ := res.Get(otlpattr.HostName); v.Str() != "node-1" {
		t.Errorf("host.name = %q", v.Str())
	}
	prof := rp.ScopeProfiles().At(0).Profiles().At(0)
	d := out.Dictionary()
	if got := d.StringTable().At(int(prof.SampleType().TypeStrindex())) + "/" + d.StringTable().At(int(prof.SampleType().UnitStrindex())); got != "samples/count" {
		t.Errorf("sample type %s", got)
	}
	if prof.Period() != int64(time.Second)/19 {
		t.Errorf("period %d", prof.Period())
	}
	if prof.Samples().Len() != 1 {
		t.Fatalf("identical stacks not aggregated: %d samples", prof.Samples().Len())
	}
	smp := prof.Samples().At(0)
	if smp.Values().Len() != 3 || smp.TimestampsUnixNano().Len() != 3 {
		t.Errorf("values %d, timestamps %d; want 3 and 3", smp.Values().Len(), smp.TimestampsUnixNano().Len())
	}
	if a := attrMap(out, smp.AttributeIndices()); a[otlpattr.ThreadName] != "sleep" {
		t.Errorf("sample attributes %v", a)
	}
	locs := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
	if locs.Len() != 4 {
		t.Fatalf("stack of %d locations, want 4", locs.Len())
	}
	// Kernel frames: symbolized, leaf unadjusted, return address minus one.
	wantKernel := []struct {
		addr uint64
		fn   string
		mod  string
	}{{0xffffffff81000105, "do_work", "vmlinux"}, {0xffffffffc0300010, "ext4_read", "ext4"}}
	for i, w := range wantKernel {
		loc := d.LocationTable().At(int(locs.At(i)))
		if loc.Address() != w.addr || loc.Lines().Len() != 1 {
			t.Errorf("kernel frame %d: address %#x, %d lines", i, loc.Address(), loc.Lines().Len())
			continue
		}
		fn := d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex()))
		if got := d.StringTable().At(int(fn.NameStrindex())); got != w.fn {
			t.Errorf("kernel frame %d: function %q, want %q", i, got, w.fn)
		}
		if a := attrMap(out, loc.AttributeIndices()); a[otlpattr.FrameType] != "kernel" {
			t.Errorf("kernel frame %d: attributes %v", i, a)
		}
		if got := d.StringTable().At(int(d.MappingTable().At(int(loc.MappingIndex())).FilenameStrindex())); got != w.mod {
			t.Errorf("kernel frame %d: mapping %q, want %q", i, got, w.mod)
		}
	}
	// User frames: ELF virtual addresses, mapping in ELF space, build IDs of the file.
	ids, err := buildid.FromFile(m.Path)
	if err != nil {
		t.Fatal(err)
	}
	for i, pc := range []uint64{pc1, pc2 - 1} {
		loc := d.LocationTable().At(int(locs.At(2 + i)))
		if want := m.ELFAddress(pc); loc.Address() != want {
			t.Errorf("user frame %d: address %#x, want %#x", i, loc.Address(), want)
		}
		if loc.Lines().Len() != 0 {
			t.Errorf("user frame %d symbolized on the node", i)
		}
		mp := d.MappingTable().At(int(loc.MappingIndex()))
		el := m.ELFMapping()
		if mp.MemoryStart() != el.Start || mp.MemoryLimit() != el.Limit || mp.FileOffset() != el.Offset {
			t.Errorf("mapping [%#x,%#x)@%#x, want %+v", mp.MemoryStart(), mp.MemoryLimit(), mp.FileOffset(), el)
		}
		a := attrMap(out, mp.AttributeIndices())
		if a[otlpattr.BuildIDHTLHash] != ids.HTLHash || a[otlpattr.BuildIDGNU] != ids.GNU {
			t.Errorf("mapping attributes %v, want %+v", a, ids)
		}
		if got := d.StringTable().At(int(mp.FilenameStrindex())); got != m.Path {
			t.Errorf("mapping filename %q, want %q", got, m.Path)
		}
	}
	// Dictionary deduplication: each string once.
	seen := map[string]bool{}
	for i := 0; i < d.StringTable().Len(); i++ {
		s := d.StringTable().At(i)
		if seen[s] {
			t.Errorf("string %q twice in the string table", s)
		}
		seen[s] = true
	}
}

func TestBuilderMaxSamples(t *testing.T) {
	b := New(Options{FrequencyHz: 99, MaxSamples: 2}, nil, nil)
	now := time.Now()
	for i := 0; i < 5; i++ {
		b.Add(&Sample{Time: now, PID: 1, User: []uint64{uint64(0x1000 + i)}})
	}
	b.Add(&Sample{Time: now, PID: 1, User: []uint64{0x1000}})
	if b.Len() != 3 || b.Dropped() != 3 {
		t.Errorf("Len %d, Dropped %d; want 3 and 3", b.Len(), b.Dropped())
	}
	out := b.Finish(now.Add(time.Second), now.Add(2*time.Second))
	if err := otlpprofiles.ValidateStrict(out); err != nil {
		t.Errorf("time range not widened to the samples: %v", err)
	}
}

func TestStrictValidationRejects(t *testing.T) {
	b := New(Options{FrequencyHz: 19}, nil, nil)
	now := time.Now()
	b.Add(&Sample{Time: now, PID: 1, User: []uint64{0x1000}})
	good := b.Finish(now, now.Add(time.Second))
	if err := otlpprofiles.ValidateStrict(good); err != nil {
		t.Fatal(err)
	}
	tests := map[string]func(p pprofile.Profiles){
		"stack out of range": func(p pprofile.Profiles) {
			p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).SetStackIndex(99)
		},
		"timestamp outside": func(p pprofile.Profiles) {
			p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).TimestampsUnixNano().SetAt(0, 1)
		},
		"location index 0 not zero": func(p pprofile.Profiles) { p.Dictionary().LocationTable().At(0).SetAddress(5) },
		"string 0 not empty":        func(p pprofile.Profiles) { p.Dictionary().StringTable().SetAt(0, "x") },
		"values mismatch": func(p pprofile.Profiles) {
			p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).Values().Append(1)
		},
	}
	for name, mutate := range tests {
		p := pprofile.NewProfiles()
		good.CopyTo(p)
		mutate(p)
		if err := otlpprofiles.ValidateStrict(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestBuilderOffCPU: off-CPU samples go to a second profile of their process, in the same
// scope, typed events/nanoseconds, one value per blocking; CPU samples of the same stack stay
// counts in the CPU profile.
func TestBuilderOffCPU(t *testing.T) {
	b := New(Options{FrequencyHz: 19, ScopeName: "profsym-collector"}, nil, nil)
	t0 := time.Unix(1_700_000_000, 0)
	stack := []uint64{0x1000, 0x2000}
	b.Add(&Sample{Time: t0, PID: 7, TID: 8, Comm: "w", User: stack})
	b.Add(&Sample{Time: t0.Add(time.Millisecond), PID: 7, TID: 8, Comm: "w", User: stack, OffCPU: 20 * time.Millisecond})
	b.Add(&Sample{Time: t0.Add(2 * time.Millisecond), PID: 7, TID: 8, Comm: "w", User: stack, OffCPU: 30 * time.Millisecond})
	b.Add(&Sample{Time: t0.Add(3 * time.Millisecond), PID: 7, TID: 8, Comm: "w", User: stack})
	out := b.Finish(t0, t0.Add(time.Second))
	if err := otlpprofiles.ValidateStrict(out); err != nil {
		t.Fatalf("ValidateStrict: %v", err)
	}
	if n := out.ResourceProfiles().Len(); n != 1 {
		t.Fatalf("%d resources, want 1", n)
	}
	d := out.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	profs := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles()
	if profs.Len() != 2 {
		t.Fatalf("%d profiles, want the CPU and the off-CPU one", profs.Len())
	}
	type want struct {
		typ, unit string
		values    []int64
	}
	for i, w := range []want{{"samples", "count", []int64{1, 1}}, {"events", "nanoseconds", []int64{20e6, 30e6}}} {
		p := profs.At(i)
		if got := str(p.SampleType().TypeStrindex()) + "/" + str(p.SampleType().UnitStrindex()); got != w.typ+"/"+w.unit {
			t.Errorf("profile %d: sample type %s, want %s/%s", i, got, w.typ, w.unit)
		}
		if p.Samples().Len() != 1 {
			t.Fatalf("profile %d: %d samples, want 1 (one stack)", i, p.Samples().Len())
		}
		s := p.Samples().At(0)
		if got := s.Values().AsRaw(); !slices.Equal(got, w.values) {
			t.Errorf("profile %d: values %v, want %v", i, got, w.values)
		}
		if s.TimestampsUnixNano().Len() != len(w.values) {
			t.Errorf("profile %d: %d timestamps for %d values", i, s.TimestampsUnixNano().Len(), len(w.values))
		}
		if !p.Time().AsTime().Equal(t0) || p.DurationNano() != uint64(time.Second) {
			t.Errorf("profile %d: time %v + %v, want %v + 1s", i, p.Time().AsTime(), p.DurationNano(), t0)
		}
	}
	if profs.At(0).Samples().At(0).StackIndex() != profs.At(1).Samples().At(0).StackIndex() {
		t.Error("the same stack has two entries in the stack table")
	}
	if profs.At(0).ProfileID() == profs.At(1).ProfileID() {
		t.Error("the two profiles share an ID")
	}
}
