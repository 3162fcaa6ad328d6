package dwarfsym

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// TestEncodedSize reports the serialized index size against the DWARF it came from and checks
// that the encoding answers like the index. With PROFSYM_FUZZ_SEEDS=dir it also writes the
// encodings as Go fuzz corpus files for index.FuzzUnmarshal.
func TestEncodedSize(t *testing.T) {
	dir := t.TempDir()
	seeds := os.Getenv("PROFSYM_FUZZ_SEEDS")
	// Seeds are committed: their paths are made relative to the module root, so they name no
	// directory of the machine that wrote them.
	var prefixMap string
	if seeds != "" {
		root, err := filepath.Abs(filepath.Join("..", "..", ".."))
		if err != nil {
			t.Fatal(err)
		}
		prefixMap = "-ffile-prefix-map=" + root + "=."
	}
	for _, tb := range testBinaries {
		t.Run(tb.name, func(t *testing.T) {
			if prefixMap != "" {
				// The compiler runs in dir, which DWARF records as the compilation directory.
				tb.flags = append(slices.Clone(tb.flags), prefixMap, "-fdebug-prefix-map="+dir+"=.")
			}
			bin := tb.build(t, dir)
			ix, _ := loadIndex(t, bin, Options{})
			_, f, dwarfBytes := elfSections(t, bin)
			defer f.Close()
			data, err := ix.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			back, err := index.Unmarshal(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, fn := range funcSymbols(t, f) {
				for a := fn.addr; a < fn.end; a += 7 {
					if g, w := fmt.Sprint(back.Lookup(a)), fmt.Sprint(ix.Lookup(a)); g != w {
						t.Fatalf("%#x: decoded index says %s, built index %s", a, g, w)
					}
				}
			}
			st := ix.Stats()
			t.Logf("%s: DWARF %d bytes, index encoded %d bytes (%.1f%%), in memory ~%d bytes; %d strings, %d nodes, %d intervals, %d line rows",
				tb.name, dwarfBytes, len(data), 100*float64(len(data))/float64(dwarfBytes), st.Bytes, st.Strings, st.Nodes, st.Intervals, st.LineRows)
			if seeds != "" {
				body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
				if err := os.WriteFile(filepath.Join(seeds, "real-"+tb.name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// smallBinary compiles a short C program with inline chains; fuzzing and the corruption tests
// start from its sections.
func smallBinary(t testing.TB, dir, cc, dwarfFlag string) string {
	t.Helper()
	return testBinary{name: cc + dwarfFlag, cc: cc, srcs: []string{"helper.c"},
		flags: []string{"-O2", dwarfFlag, "-shared", "-fPIC"}}.build(t, dir)
}

var fuzzSections = []string{"info", "abbrev", "line", "str", "line_str", "rnglists", "ranges", "str_offsets", "addr"}

func loadBytes(secs map[string][]byte) (Stats, *index.Index, error) {
	b := index.NewBuilder()
	st, err := Load(secs, binary.LittleEndian, b, Options{Workers: 2})
	if err != nil {
		return st, nil, err
	}
	ix, err := b.Build()
	return st, ix, err
}

func TestLoadCorrupt(t *testing.T) {
	needTools(t, "gcc")
	dir := t.TempDir()
	for _, c := range []struct{ cc, dw string }{{"gcc", "-gdwarf-4"}, {"gcc", "-gdwarf-5"}, {"clang", "-gdwarf-5"}} {
		if _, err := exec.LookPath(c.cc); err != nil {
			continue
		}
		dw := c.cc + c.dw
		secs, f, _ := elfSections(t, smallBinary(t, dir, c.cc, c.dw))
		f.Close()
		if _, _, err := loadBytes(secs); err != nil {
			t.Fatalf("%s: intact sections: %v", dw, err)
		}
		for _, name := range []string{"info", "abbrev", "line", "str", "line_str", "rnglists", "addr", "str_offsets"} {
			orig, ok := secs[name]
			if !ok {
				continue
			}
			cases := map[string][]byte{
				"empty":     {},
				"half":      orig[:len(orig)/2],
				"one short": orig[:len(orig)-1],
				"garbage":   bytes.Repeat([]byte{0xff}, len(orig)),
				"zeros":     make([]byte, len(orig)),
			}
			for what, data := range cases {
				t.Run(fmt.Sprintf("%s/%s/%s", dw, name, what), func(t *testing.T) {
					c := maps.Clone(secs)
					c[name] = data
					_, _, err := loadBytes(c)
					if err != nil && name == "info" && what != "empty" && !strings.Contains(err.Error(), "0x") {
						t.Errorf("error %q names no offset", err)
					}
				})
			}
		}
	}
}

func TestLoadNoInfo(t *testing.T) {
	b := index.NewBuilder()
	if _, err := Load(map[string][]byte{"line": {1, 2, 3}}, binary.LittleEndian, b, Options{}); err == nil {
		t.Fatal("Load without .debug_info succeeded")
	}
}

func binaryNamed(t testing.TB, name string) testBinary {
	t.Helper()
	for _, tb := range testBinaries {
		if tb.name == name {
			return tb
		}
	}
	t.Fatalf("no test binary %q", name)
	return testBinary{}
}

// TestLoadDeterministic checks that the number of workers does not change the index.
func TestLoadDeterministic(t *testing.T) {
	dir := t.TempDir()
	bin := binaryNamed(t, "gcc-cxx-O2-lto-gc-sections").build(t, dir)
	var first []byte
	for _, w := range []int{1, 2, 3, 8} {
		ix, st := loadIndex(t, bin, Options{Workers: w})
		data, err := ix.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = data
			if !st.HasInlines || st.Version != 5 || st.Units < 2 || ix.Fidelity() != index.FidelityFullInlines {
				t.Errorf("stats %+v, fidelity %v", st, ix.Fidelity())
			}
			continue
		}
		if !bytes.Equal(first, data) {
			t.Fatalf("Workers=%d gives a different index", w)
		}
	}
}

func FuzzLoad(f *testing.F) {
	needTools(f, "gcc")
	dir := f.TempDir()
	// clang's DWARF 5 uses the indexed forms (strx, addrx, rnglistx) and MD5 file entries that
	// gcc's does not, so both compilers seed the corpus.
	for _, c := range []struct{ cc, dw string }{{"gcc", "-gdwarf-4"}, {"gcc", "-gdwarf-5"}, {"clang", "-gdwarf-4"}, {"clang", "-gdwarf-5"}} {
		if _, err := exec.LookPath(c.cc); err != nil {
			continue
		}
		secs, ef, _ := elfSections(f, smallBinary(f, dir, c.cc, c.dw))
		ef.Close()
		f.Add(secs["info"], secs["abbrev"], secs["line"], secs["str"], secs["line_str"],
			secs["rnglists"], secs["ranges"], secs["str_offsets"], secs["addr"])
	}
	f.Fuzz(func(t *testing.T, info, abbrev, line, str, lineStr, rnglists, ranges, strOffsets, addr []byte) {
		secs := map[string][]byte{}
		for i, b := range [][]byte{info, abbrev, line, str, lineStr, rnglists, ranges, strOffsets, addr} {
			secs[fuzzSections[i]] = b
		}
		_, ix, err := loadBytes(secs)
		if err == nil {
			ix.Lookup(0x1000)
		}
		// As a Go binary's DWARF is read: a unit a mutation makes Go's (DW_AT_language) gives
		// its line table and the functions GoFunctions accepts.
		b := index.NewBuilder()
		if st, err := Load(secs, binary.LittleEndian, b, Options{Workers: 2, LinesOnly: true, OtherLanguagesFunctions: true,
			GoFunctions: func(name string) bool { return len(name)%2 == 0 }}); err == nil {
			if len(st.GoFunctionEntries) > st.Functions {
				t.Fatalf("%d Go function entries for %d functions", len(st.GoFunctionEntries), st.Functions)
			}
			if ix, err := b.Build(); err == nil {
				ix.Lookup(0x1000)
			}
		}
	})
}

// measureLoad runs Load and Build once and reports wall time, allocated bytes and allocation
// count.
func measureLoad(t testing.TB, secs map[string][]byte, order binary.ByteOrder, opts Options) (*index.Index, Stats, time.Duration, uint64, uint64) {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	b := index.NewBuilder()
	st, err := Load(secs, order, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	runtime.ReadMemStats(&after)
	return ix, st, el, after.TotalAlloc - before.TotalAlloc, after.Mallocs - before.Mallocs
}

// TestLoadVsLLVM times Load + Build against llvm-symbolizer on the same 10,000 addresses and
// checks agreement, on the largest test binary and on any binaries listed (colon separated) in
// PROFSYM_BENCH_BINS, such as a separate debug file of a real library.
func TestLoadVsLLVM(t *testing.T) {
	needTools(t, "llvm-symbolizer")
	bins := filepath.SplitList(os.Getenv("PROFSYM_BENCH_BINS"))
	if len(bins) == 0 {
		if testing.Short() {
			t.Skip("short")
		}
		bins = []string{binaryNamed(t, "gcc-cxx-O3-dwarf4-nopie").build(t, t.TempDir())}
	}
	for _, bin := range bins {
		secs, f, dwarfBytes := elfSections(t, bin)
		funcs := funcSymbols(t, f)
		order := f.ByteOrder
		f.Close()
		c := cpuTime()
		ix, st, el, bytes, allocs := measureLoad(t, secs, order, Options{})
		cpu := cpuTime() - c
		addrs := sampleAddrs(funcs, 10000)
		if len(addrs) > 10000 {
			addrs = addrs[:10000]
		}
		start := time.Now()
		for _, a := range addrs {
			ix.Lookup(a)
		}
		lookups := time.Since(start)
		start = time.Now()
		_, llvmCPU := llvmSymbolizeCPU(t, bin, addrs)
		llvmTime := time.Since(start)
		ag := compareWithLLVM(t, bin, ix, funcs, addrs)
		enc, err := ix.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: DWARF %.1f MiB, encoded index %.2f MiB, v%d, %d units, %d functions, %d inlined, %d rows\n  Load+Build %v wall, %v CPU (%.1f MiB allocated, %d allocations), %d lookups %v; llvm-symbolizer on the same addresses %v wall, %v CPU\n  %s",
			filepath.Base(bin), float64(dwarfBytes)/(1<<20), float64(len(enc))/(1<<20), st.Version, st.Units, st.Functions, st.InlinedInstances, st.LineRows,
			el, cpu, float64(bytes)/(1<<20), allocs, len(addrs), lookups, llvmTime, llvmCPU, ag)
		for _, ex := range ag.examples {
			t.Logf("  differs at %s", ex)
		}
	}
}

// cpuTime is the process's user+system CPU time: the test machines are shared, and wall time
// follows their load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkLoad(b *testing.B) {
	bin := binaryNamed(b, "gcc-cxx-O3-dwarf4-nopie").build(b, b.TempDir())
	if p := os.Getenv("PROFSYM_BENCH_BINS"); p != "" {
		bin = filepath.SplitList(p)[0]
	}
	secs, f, n := elfSections(b, bin)
	f.Close()
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bl := index.NewBuilder()
		if _, err := Load(secs, binary.LittleEndian, bl, Options{Workers: envInt("PROFSYM_BENCH_WORKERS", 0)}); err != nil {
			b.Fatal(err)
		}
		if _, err := bl.Build(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDeadCodeDropped checks that functions and line sequences the linker discarded (their
// addresses resolved to 0 by GNU ld, or to lld's tombstone) do not show up at low addresses.
func TestDeadCodeDropped(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"gcc-c-O2-gc-sections", "clang-c-O2-gc-sections-dwarf4", "clang-cxx-O2-lld-gc-sections"} {
		t.Run(name, func(t *testing.T) {
			ix, _ := loadIndex(t, binaryNamed(t, name).build(t, dir), Options{})
			for _, a := range []uint64{0, 1, 0x10, 0x40, 0x100} {
				if fr := ix.Lookup(a); fr != nil {
					t.Errorf("Lookup(%#x) = %+v, want nothing: discarded code", a, fr)
				}
			}
		})
	}
}
