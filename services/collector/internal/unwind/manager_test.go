//go:build linux

package unwind

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/profsym/profsym/services/collector/internal/bpfprog"
	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

// testMaps creates maps shaped like the kernel program's, with rows rows.
func testMaps(t *testing.T, rows uint32) bpfprog.UnwindMaps {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for BPF maps")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Logf("memlock: %v", err)
	}
	mk := func(spec *ebpf.MapSpec) *ebpf.Map {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatalf("create map %s: %v", spec.Name, err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	return bpfprog.UnwindMaps{
		Rows:  mk(&ebpf.MapSpec{Name: "rows", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(unsafe.Sizeof(row{})), MaxEntries: rows}),
		Files: mk(&ebpf.MapSpec{Name: "files", Type: ebpf.Array, KeySize: 4, ValueSize: 24, MaxEntries: 8}),
		Procs: mk(&ebpf.MapSpec{Name: "procs", Type: ebpf.Hash, KeySize: 4, ValueSize: 16 + maxProcMaps*40, MaxEntries: 64, Flags: 1 /* BPF_F_NO_PREALLOC */}),
	}
}

// program compiles a C program with n functions, so each has a table of its own size.
func program(t *testing.T, dir string, n int) string {
	t.Helper()
	var src strings.Builder
	for i := range n {
		fmt.Fprintf(&src, "__attribute__((noinline)) int f%d(int x) { return x * %d + %d; }\n", i, i+3, i)
	}
	src.WriteString("int main(int c, char **v) { int s = 0;\n")
	for i := range n {
		fmt.Fprintf(&src, "s += f%d(c);\n", i)
	}
	src.WriteString("return s; }\n")
	c := filepath.Join(dir, fmt.Sprintf("p%d.c", n))
	bin := filepath.Join(dir, fmt.Sprintf("p%d", n))
	if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), "gcc", "-O2", "-o", bin, c).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

func mapping(t *testing.T, path string, start uint64) procmaps.Mapping {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	key, err := procmaps.KeyOf(st)
	if err != nil {
		t.Fatal(err)
	}
	return procmaps.Mapping{Start: start, End: start + 0x10000, Bias: start, Path: path, OpenPath: path, File: &procmaps.FileInfo{Key: key}}
}

func TestManagerEvictsLeastRecentlyUsedUnmappedFirst(t *testing.T) {
	dir := t.TempDir()
	bins := []string{program(t, dir, 5), program(t, dir, 40), program(t, dir, 80)}
	sizes := make([]uint32, len(bins))
	for i, b := range bins {
		tab, err := buildTable(b, mapping(t, b, 0).File.Key, &metrics{buildSeconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}), ehFrameBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "y"})})
		if err != nil {
			t.Fatal(err)
		}
		sizes[i] = uint32(len(tab.rows))
	}
	// Room for the [vdso] table and the two larger programs' tables, not for all three.
	probe, err := New(Config{Maps: testMaps(t, 1<<16)})
	if err != nil {
		t.Fatal(err)
	}
	vdsoRows := probe.Stats().RowsUsed
	capacity := vdsoRows + sizes[1] + sizes[2] + sizes[0]/2
	reg := prometheus.NewRegistry()
	m, err := New(Config{Maps: testMaps(t, capacity), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("table rows: vdso %d, programs %v, capacity %d", vdsoRows, sizes, capacity)

	proc := func(pid uint32, paths ...string) *procmaps.Process {
		p := &procmaps.Process{PID: pid, StartStack: 0x7ffc0000 + uint64(pid), Vdso: procmaps.Range{Start: 0x7fff0000, End: 0x7fff2000}}
		for i, path := range paths {
			p.Mappings = append(p.Mappings, mapping(t, path, uint64(0x400000*(i+1))))
		}
		return p
	}
	evictions := func(inUse string) float64 { return testutil.ToFloat64(m.m.evictions.WithLabelValues(inUse)) }

	// Process 1 maps the small program, process 2 the middle one; then process 1 ends.
	m.Update(proc(1, bins[0]))
	m.Update(proc(2, bins[1]))
	m.Flush()
	m.Update(proc(2, bins[1])) // the middle program is now the more recently used
	m.Forget(1)
	m.Flush()
	// The large program needs room: the small one goes first (no process maps it), and its
	// freed rows are packed with the free end of the array (a compaction), not a second
	// eviction.
	m.Update(proc(3, bins[2]))
	m.Flush()
	if got := evictions("false"); got != 1 {
		t.Errorf("evictions of unmapped tables = %v, want 1", got)
	}
	if got := evictions("true"); got != 0 {
		t.Errorf("evictions of mapped tables = %v, want 0", got)
	}
	if m.Stats().FilesLoaded != 3 { // vdso, middle, large
		t.Errorf("tables loaded = %d, want 3", m.Stats().FilesLoaded)
	}
	if got := testutil.ToFloat64(m.m.compactions); got != 1 {
		t.Errorf("compactions = %v, want 1", got)
	}
	// Every loaded table's slot points at rows that are its own after the move: the first
	// row of each table is its CFI's first row.
	for _, f := range m.files {
		if f.kind != mapCFI {
			continue
		}
		var slot fileSlot
		if err := m.maps.Files.Lookup(f.slot, &slot); err != nil {
			t.Fatal(err)
		}
		if slot.RowStart != f.rows.start || slot.RowCount != f.rows.n || slot.Gen != f.gen {
			t.Errorf("slot %d = %+v, manager thinks %+v gen %d", f.slot, slot, f.rows, f.gen)
		}
	}
	for i, b := range bins[1:] {
		tab, err := buildTable(b, mapping(t, b, 0).File.Key, &m.m)
		if err != nil {
			t.Fatal(err)
		}
		f := m.files[mapping(t, b, 0).File.Key]
		for j, want := range tab.rows {
			var got row
			if err := m.maps.Rows.Lookup(f.rows.start+uint32(j), &got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("program %d row %d after compaction = %+v, want %+v", i+1, j, got, want)
			}
		}
	}

	// Process 4 maps the small program again: only a mapped table can make room now, the
	// least recently used one (the middle program's). Process 2's entry then names a
	// generation its slot no longer has, so the kernel finds no table there.
	var before procEntry
	if err := m.maps.Procs.Lookup(uint32(2), &before); err != nil {
		t.Fatal(err)
	}
	m.Update(proc(4, bins[0]))
	m.Flush()
	if got := evictions("true"); got != 1 {
		t.Errorf("evictions of mapped tables = %v, want 1", got)
	}
	var entry procEntry
	if err := m.maps.Procs.Lookup(uint32(2), &entry); err != nil {
		t.Fatal(err)
	}
	var slot fileSlot
	var mid *procMap
	for i := range entry.Count {
		if entry.Maps[i].Start == 0x400000 {
			mid = &entry.Maps[i]
		}
	}
	if mid == nil || mid.Kind != mapCFI {
		t.Fatalf("process 2's entry lacks its program: %+v", entry.Maps[:entry.Count])
	}
	if err := m.maps.Files.Lookup(mid.File, &slot); err != nil {
		t.Fatal(err)
	}
	if slot.Gen == mid.Gen {
		t.Errorf("the evicted table's slot kept generation %d: process 2 would read another file's rows", slot.Gen)
	}

	// Entries are sorted by start with [vdso] in place, and name the [vdso] table.
	if entry.Count != 2 || entry.Maps[1].Start != 0x7fff0000 || entry.Maps[1].Kind != mapCFI {
		t.Errorf("process 2's entry = %+v, want its program then [vdso]", entry.Maps[:entry.Count])
	}

	// An ended process's entry is gone from the kernel.
	m.Forget(3)
	m.Flush()
	if err := m.maps.Procs.Lookup(uint32(3), &entry); err == nil {
		t.Error("process 3's entry outlived Forget")
	}
}

func TestManagerKinds(t *testing.T) {
	dir := t.TempDir()
	c := program(t, dir, 3)
	// A file with no CFI: frame pointers. objcopy removes the sections.
	nocfi := filepath.Join(dir, "nocfi")
	if out, err := exec.CommandContext(t.Context(), "objcopy", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr", "--remove-section=.debug_frame", c, nocfi).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Maps: testMaps(t, 1<<16)})
	if err != nil {
		t.Fatal(err)
	}
	goFile := filepath.Join(dir, "go")
	if out, err := exec.CommandContext(t.Context(), "cp", c, goFile).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	goMap := mapping(t, goFile, 0x800000)
	goMap.File.IsGo = true
	p := &procmaps.Process{PID: 7, StartStack: 1, Mappings: []procmaps.Mapping{
		mapping(t, c, 0x400000), mapping(t, nocfi, 0x500000), mapping(t, garbage, 0x600000), goMap,
	}}
	// More mappings than an entry holds: the first ones by address are kept, counted.
	for i := range maxProcMaps {
		p.Mappings = append(p.Mappings, mapping(t, c, 0x10000000+uint64(i)*0x20000))
	}
	m.Update(p)
	m.Flush()
	var e procEntry
	if err := m.maps.Procs.Lookup(uint32(7), &e); err != nil {
		t.Fatal(err)
	}
	want := []uint32{mapCFI, mapFP, mapNone, mapFP}
	for i, k := range want {
		if e.Maps[i].Kind != k {
			t.Errorf("mapping %d kind = %d, want %d", i, e.Maps[i].Kind, k)
		}
	}
	if e.Count != maxProcMaps {
		t.Errorf("entry holds %d mappings, want %d", e.Count, maxProcMaps)
	}
	if got := testutil.ToFloat64(m.m.procTruncated); got != 1 {
		t.Errorf("truncated updates = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.m.builds.WithLabelValues("error")); got != 1 {
		t.Errorf("failed builds = %v, want 1 (the garbage file)", got)
	}
}
