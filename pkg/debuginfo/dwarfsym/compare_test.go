package dwarfsym

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/demangle"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// testBinary is one program compiled from testdata/src with one toolchain configuration.
type testBinary struct {
	name    string
	cc      string // gcc, g++, clang, clang++
	srcs    []string
	flags   []string
	ldflags []string
}

var testBinaries = []testBinary{
	{"gcc-c-O2-dwarf4-pie", "gcc", []string{"main.c", "helper.c"}, []string{"-O2", "-gdwarf-4", "-fPIE"}, []string{"-pie"}},
	{"gcc-c-O3-dwarf5-nopie", "gcc", []string{"main.c", "helper.c"}, []string{"-O3", "-gdwarf-5", "-fno-pie"}, []string{"-no-pie"}},
	{"clang-c-O2-dwarf4-nopie", "clang", []string{"main.c", "helper.c"}, []string{"-O2", "-gdwarf-4", "-fno-pie"}, []string{"-no-pie"}},
	{"clang-c-O3-dwarf5-pie", "clang", []string{"main.c", "helper.c"}, []string{"-O3", "-gdwarf-5", "-fPIE"}, []string{"-pie"}},
	{"gcc-c-O2-lto", "gcc", []string{"main.c", "helper.c"}, []string{"-O2", "-g", "-flto"}, []string{"-flto"}},
	{"clang-c-O2-lto", "clang", []string{"main.c", "helper.c"}, []string{"-O2", "-g", "-flto"}, []string{"-flto", "-fuse-ld=lld"}},
	{"gcc-c-O2-gc-sections", "gcc", []string{"main.c", "helper.c"}, []string{"-O2", "-g", "-ffunction-sections"}, []string{"-Wl,--gc-sections"}},
	{"clang-c-O2-gc-sections-dwarf4", "clang", []string{"main.c", "helper.c"}, []string{"-O2", "-gdwarf-4", "-ffunction-sections"}, []string{"-Wl,--gc-sections"}},
	{"gcc-cxx-O2-dwarf5", "g++", []string{"prog.cc"}, []string{"-O2", "-gdwarf-5"}, nil},
	{"gcc-cxx-O3-dwarf4-nopie", "g++", []string{"prog.cc"}, []string{"-O3", "-gdwarf-4", "-fno-pie"}, []string{"-no-pie"}},
	{"clang-cxx-O2-dwarf4", "clang++", []string{"prog.cc"}, []string{"-O2", "-gdwarf-4"}, nil},
	{"clang-cxx-O3-dwarf5", "clang++", []string{"prog.cc"}, []string{"-O3", "-gdwarf-5"}, nil},
	{"gcc-cxx-O2-lto-gc-sections", "g++", []string{"prog.cc"}, []string{"-O2", "-g", "-flto", "-ffunction-sections"}, []string{"-flto", "-Wl,--gc-sections"}},
	{"clang-cxx-O2-lld-gc-sections", "clang++", []string{"prog.cc"}, []string{"-O2", "-g", "-ffunction-sections"}, []string{"-fuse-ld=lld", "-Wl,--gc-sections"}},
}

func needTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

// build compiles tb into dir and returns the binary's path.
func (tb testBinary) build(t testing.TB, dir string) string {
	t.Helper()
	needTools(t, tb.cc)
	src, err := filepath.Abs("testdata/src")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, tb.name)
	args := append([]string{}, tb.flags...)
	args = append(args, tb.ldflags...)
	args = append(args, "-o", out)
	for _, s := range tb.srcs {
		args = append(args, filepath.Join(src, s))
	}
	cmd := exec.CommandContext(t.Context(), tb.cc, args...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", tb.cc, strings.Join(args, " "), err, b)
	}
	return out
}

// elfSections returns the binary's DWARF sections, decompressed, keyed without ".debug_", and
// their total size.
func elfSections(t testing.TB, path string) (map[string][]byte, *elf.File, int) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	secs := map[string][]byte{}
	total := 0
	for _, s := range f.Sections {
		if !strings.HasPrefix(s.Name, ".debug_") {
			continue
		}
		b, err := s.Data()
		if err != nil {
			t.Fatalf("%s %s: %v", path, s.Name, err)
		}
		secs[strings.TrimPrefix(s.Name, ".debug_")] = b
		total += len(b)
	}
	return secs, f, total
}

// loadIndex builds a DWARF-only index of the binary at path.
func loadIndex(t testing.TB, path string, opts Options) (*index.Index, Stats) {
	t.Helper()
	secs, f, _ := elfSections(t, path)
	defer f.Close()
	b := index.NewBuilder()
	st, err := Load(secs, f.ByteOrder, b, opts)
	if err != nil {
		t.Fatalf("Load %s: %v", path, err)
	}
	ix, err := b.Build()
	if err != nil {
		t.Fatalf("Build %s: %v", path, err)
	}
	return ix, st
}

// funcSym is a FUNC symbol of the binary's .symtab.
type funcSym struct {
	names     []string // every FUNC symbol at addr (gcc -flto emits twins such as foo.lto_priv.0/1)
	addr, end uint64
}

func funcSymbols(t testing.TB, f *elf.File) []funcSym {
	t.Helper()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("symbols: %v", err)
	}
	var out []funcSym
	seen := map[uint64]int{}
	for _, s := range syms {
		if typ := elf.ST_TYPE(s.Info); typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC || s.Size == 0 || s.Value == 0 {
			continue
		}
		if i, ok := seen[s.Value]; ok {
			out[i].names = append(out[i].names, s.Name)
			continue
		}
		seen[s.Value] = len(out)
		out = append(out, funcSym{[]string{s.Name}, s.Value, s.Value + s.Size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// sampleAddrs steps through every function's range so that about n addresses come out, each
// function contributing at least its first address.
func sampleAddrs(funcs []funcSym, n int) []uint64 {
	var total uint64
	for _, f := range funcs {
		total += f.end - f.addr
	}
	step := uint64(1)
	if n > 0 && total > uint64(n) {
		step = total / uint64(n)
	}
	var out []uint64
	for _, f := range funcs {
		for a := f.addr; a < f.end; a += step {
			out = append(out, a)
		}
	}
	return out
}

// llvmFrame is one frame of llvm-symbolizer's JSON output.
type llvmFrame struct {
	FunctionName string
	FileName     string
	Line         uint32
	Column       uint32
	StartLine    uint32
}

// llvmSymbolize runs one llvm-symbolizer process over all addresses.
func llvmSymbolize(t testing.TB, bin string, addrs []uint64) [][]llvmFrame {
	t.Helper()
	res, _ := llvmSymbolizeCPU(t, bin, addrs)
	return res
}

// llvmSymbolizeCPU is llvmSymbolize that also reports the process's user+system CPU time.
func llvmSymbolizeCPU(t testing.TB, bin string, addrs []uint64) ([][]llvmFrame, time.Duration) {
	t.Helper()
	needTools(t, "llvm-symbolizer")
	var in bytes.Buffer
	for _, a := range addrs {
		fmt.Fprintf(&in, "0x%x\n", a)
	}
	cmd := exec.CommandContext(t.Context(), "llvm-symbolizer", "--obj="+bin, "--output-style=JSON")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v\n%s", err, stderr.Bytes())
	}
	res := make([][]llvmFrame, 0, len(addrs))
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var rec struct {
			Address string
			Symbol  []llvmFrame
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("llvm-symbolizer output %q: %v", sc.Text(), err)
		}
		for i := range rec.Symbol {
			if rec.Symbol[i].FunctionName == "??" {
				rec.Symbol[i].FunctionName = ""
			}
			if rec.Symbol[i].FileName == "??" {
				rec.Symbol[i].FileName = ""
			}
		}
		res = append(res, rec.Symbol)
	}
	if len(res) != len(addrs) {
		t.Fatalf("llvm-symbolizer answered %d of %d addresses", len(res), len(addrs))
	}
	return res, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// agreement counts how far our frames match llvm-symbolizer's.
type agreement struct {
	Addrs        int // compared addresses (llvm knew a file:line)
	NoDebug      int // addresses llvm resolved from the symbol table only; not compared
	ChainOK      int // whole function chain equal
	ChainOKInner int // chain equal except the outermost name, which llvm takes from .symtab
	ChainOKDem   int // ... and except names where only the demangler differs (see llvmDemangle)
	Frames       int // llvm frames at compared addresses
	FileLineOK   int // frames with equal file and line
	FileSymtab   int // frames without a line row, where llvm names the file from STT_FILE
	ColumnOK     int
	StartLineOK  int
	examples     []string
}

func (a *agreement) add(o agreement) {
	a.Addrs += o.Addrs
	a.NoDebug += o.NoDebug
	a.ChainOK += o.ChainOK
	a.ChainOKInner += o.ChainOKInner
	a.ChainOKDem += o.ChainOKDem
	a.Frames += o.Frames
	a.FileLineOK += o.FileLineOK
	a.FileSymtab += o.FileSymtab
	a.ColumnOK += o.ColumnOK
	a.StartLineOK += o.StartLineOK
}

func pct(n, d int) float64 {
	if d == 0 {
		return 100
	}
	return 100 * float64(n) / float64(d)
}

func (a agreement) String() string {
	return fmt.Sprintf("addrs=%d (symtab-only skipped=%d) chain=%.3f%% +outer-symtab-name=%.3f%% +demangler=%.3f%% file:line=%.3f%% +STT_FILE=%.3f%% column=%.3f%% startline=%.3f%% (frames=%d)",
		a.Addrs, a.NoDebug, pct(a.ChainOK, a.Addrs), pct(a.ChainOKInner, a.Addrs), pct(a.ChainOKDem, a.Addrs),
		pct(a.FileLineOK, a.Frames), pct(a.FileLineOK+a.FileSymtab, a.Frames), pct(a.ColumnOK, a.Frames), pct(a.StartLineOK, a.Frames), a.Frames)
}

func fmtOurs(fs []index.Frame) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("%s@%s:%d:%d(start %d)", f.Function, filepath.Base(f.File), f.Line, f.Column, f.StartLine))
	}
	return "[" + strings.Join(parts, " <- ") + "]"
}

func fmtLLVM(fs []llvmFrame) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("%s@%s:%d:%d(start %d)", f.FunctionName, filepath.Base(f.FileName), f.Line, f.Column, f.StartLine))
	}
	return "[" + strings.Join(parts, " <- ") + "]"
}

// compareWithLLVM looks every address up in ix and in llvm-symbolizer and counts agreement.
// symtab names the FUNC symbols so that llvm's habit of naming the outermost frame from the
// symbol table (foo.cold, foo.constprop.0) can be told apart from real disagreements.
func compareWithLLVM(t testing.TB, bin string, ix *index.Index, funcs []funcSym, addrs []uint64) agreement {
	t.Helper()
	want := llvmSymbolize(t, bin, addrs)
	got := make([][]index.Frame, len(addrs))
	var linkage []string
	for i, a := range addrs {
		got[i] = ix.Lookup(a)
		for _, f := range got[i] {
			if f.LinkageName != "" {
				linkage = append(linkage, f.LinkageName)
			}
		}
	}
	for _, f := range funcs {
		linkage = append(linkage, f.names...)
	}
	llvmDem := llvmDemangle(t, linkage)
	isSymAt := func(a uint64, name string) bool {
		i := sort.Search(len(funcs), func(i int) bool { return funcs[i].addr > a }) - 1
		if i < 0 || a >= funcs[i].end {
			return false
		}
		for _, n := range funcs[i].names {
			if demangle.Name(n) == name || llvmDem[n] == name {
				return true
			}
		}
		return false
	}
	var ag agreement
	for i, a := range addrs {
		w := want[i]
		got := got[i]
		// llvm names code without DWARF from .symtab and its file from the STT_FILE symbol,
		// with line 0: that is the symbol-table source's business, not this package's.
		if len(w) == 0 || (len(w) == 1 && w[0].Line == 0 && (w[0].FileName == "" || len(got) == 0)) {
			ag.NoDebug++
			continue
		}
		ag.Addrs++
		ag.Frames += len(w)
		chain, inner, dem := len(got) == len(w), len(got) == len(w), len(got) == len(w)
		for j := range w {
			if j >= len(got) {
				break
			}
			g := got[j]
			if g.File == w[j].FileName && g.Line == w[j].Line {
				ag.FileLineOK++
			} else if g.File == "" && g.Line == 0 && w[j].Line == 0 {
				ag.FileSymtab++
			}
			if g.Column == w[j].Column {
				ag.ColumnOK++
			}
			if g.StartLine == w[j].StartLine {
				ag.StartLineOK++
			}
			if g.Function != w[j].FunctionName {
				chain = false
				outer := j == len(w)-1 && isSymAt(a, w[j].FunctionName)
				if !outer {
					inner = false
				}
				if !outer && (g.LinkageName == "" || llvmDem[g.LinkageName] != w[j].FunctionName) {
					dem = false
				}
			}
		}
		if chain {
			ag.ChainOK++
		}
		if inner {
			ag.ChainOKInner++
		}
		if dem {
			ag.ChainOKDem++
		}
		same := dem
		for j := 0; same && j < len(w); j++ {
			same = got[j].File == w[j].FileName && got[j].Line == w[j].Line ||
				got[j].File == "" && got[j].Line == 0 && w[j].Line == 0
		}
		if !same && len(ag.examples) < 6 {
			ag.examples = append(ag.examples, fmt.Sprintf("%#x\n    ours: %s\n    llvm: %s", a, fmtOurs(got), fmtLLVM(w)))
		}
	}
	return ag
}

// llvmDemangle runs llvm-cxxfilt once over names, so that a name on which only our demangler
// and llvm's disagree is not counted against the DWARF decoding.
func llvmDemangle(t testing.TB, names []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if len(names) == 0 {
		return out
	}
	needTools(t, "llvm-cxxfilt")
	var uniq []string
	for _, n := range names {
		if _, ok := out[n]; !ok {
			out[n] = ""
			uniq = append(uniq, n)
		}
	}
	cmd := exec.CommandContext(t.Context(), "llvm-cxxfilt")
	cmd.Stdin = strings.NewReader(strings.Join(uniq, "\n") + "\n")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-cxxfilt: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != len(uniq) {
		t.Fatalf("llvm-cxxfilt answered %d of %d names", len(lines), len(uniq))
	}
	for i, n := range uniq {
		out[n] = lines[i]
	}
	return out
}

// TestAgainstLLVMSymbolizer is the reference check: for every test binary, thousands of
// addresses stepped through every function are resolved by the index and by llvm-symbolizer.
func TestAgainstLLVMSymbolizer(t *testing.T) {
	needTools(t, "llvm-symbolizer")
	dir := t.TempDir()
	var mu sync.Mutex
	var total agreement
	t.Run("binaries", func(t *testing.T) {
		for _, tb := range testBinaries {
			t.Run(tb.name, func(t *testing.T) {
				t.Parallel()
				bin := tb.build(t, dir)
				ix, st := loadIndex(t, bin, Options{})
				f, err := elf.Open(bin)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				funcs := funcSymbols(t, f)
				addrs := sampleAddrs(funcs, 3000)
				ag := compareWithLLVM(t, bin, ix, funcs, addrs)
				t.Logf("%s: dwarf v%d units=%d funcs=%d inlined=%d rows=%d\n  %s", tb.name, st.Version, st.Units, st.Functions, st.InlinedInstances, st.LineRows, ag)
				for _, ex := range ag.examples {
					t.Logf("  differs at %s", ex)
				}
				if st.Functions == 0 || st.LineRows == 0 {
					t.Errorf("stats %+v: no functions or lines", st)
				}
				mu.Lock()
				total.add(ag)
				mu.Unlock()
			})
		}
	})
	t.Logf("all binaries: %s", total)
	if total.Addrs == 0 {
		t.Skip("no binary compiled")
	}
	if p := pct(total.ChainOKDem, total.Addrs); p < 99.9 {
		t.Errorf("function chain agreement %.3f%% < 99.9%%", p)
	}
	if p := pct(total.FileLineOK, total.Frames); p < 99.5 {
		t.Errorf("file:line agreement %.3f%% < 99.5%%", p)
	}
}

// envInt reads an integer knob for the benchmarks from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
