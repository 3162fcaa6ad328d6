package debuginfo_test

// The corpus test holds the engine to llvm-symbolizer on real binaries: every variant that
// testdata/build.sh makes (gcc and clang, -O2 and -O3, DWARF 4 and 5, PIE or not, zlib and
// zstd sections, split debug files, symbol tables only, MiniDebugInfo, LTO, Go, Rust, the
// zstd CLI from Debian's source package, and arm64 builds of the C, C++ and Go programs). Thousands of addresses per binary, sampled inside
// function symbols with a fixed seed, are resolved by both; the function chain must agree on
// at least 99.9% of them and file:line on at least 99.5% wherever llvm-symbolizer reads DWARF.
//
// The corpus lives in testdata/build (git-ignored). The test runs testdata/build.sh first,
// which returns at once when everything is current and otherwise builds what is missing
// (about five minutes from scratch on two cores, and the Debian package needs apt's mirror).
// Set PROFSYM_CORPUS_NOBUILD=1 to use the corpus as it is, PROFSYM_CORPUS_DIFFS=N to log N
// unexplained differences per binary instead of 12. -short skips the test.

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/internal/llvmcompare"
	"github.com/profsym/profsym/pkg/testsupport"
)

const (
	corpusDir      = "../../testdata"
	chainBar       = 0.999
	lineBar        = 0.995
	corpusSeed     = 20261122
	corpusAddrs    = 4000
	diffsLoggedMax = 12
)

type corpusCase struct {
	name string // file under testdata/build/bin
	// ref is the binary llvm-symbolizer reads when it cannot read name itself; it carries the
	// same code, and its .symtab gives the sampled functions. Empty means name.
	ref    string
	refWhy string
	// debugDirs (under testdata/build) hold the separate debug file.
	debugDirs []string
	mode      llvmcompare.Mode
	// arm64: cross-compiled for AArch64 (the file's machine is checked), built only where the
	// cross toolchain is installed.
	arm64 bool
	// check says what Info must report, so that a variant is answered from the source it
	// exists to test (a debuglink case found by build ID would prove nothing).
	check func(debuginfo.Info) error
}

func foundBy(how string) func(debuginfo.Info) error {
	return func(i debuginfo.Info) error {
		if i.DebugFileFoundBy != how {
			return fmt.Errorf("debug file %q found by %q, want %q", i.DebugFile, i.DebugFileFoundBy, how)
		}
		return nil
	}
}

func compression(c string) func(debuginfo.Info) error {
	return func(i debuginfo.Info) error {
		if i.Compression != c {
			return fmt.Errorf("debug compression %q, want %q", i.Compression, c)
		}
		return nil
	}
}

// supplementary requires the DWARF to have been read with its supplementary file, found by
// the link's path.
func supplementary(section string) func(debuginfo.Info) error {
	return func(i debuginfo.Info) error {
		s := i.Supplementary
		switch {
		case s == nil:
			return fmt.Errorf("no supplementary file named")
		case s.Missing || i.DWARFError != "":
			return fmt.Errorf("supplementary file %q (ID %s) not read: %s", s.Name, s.ID, i.DWARFError)
		case s.Section != section || s.FoundBy != "link-path":
			return fmt.Errorf("supplementary file named in %s, found by %q; want %s, by its path", s.Section, s.FoundBy, section)
		}
		return nil
	}
}

// dwarfPackage requires the functions to have been read from the DWARF package beside the
// binary.
func dwarfPackage(i debuginfo.Info) error {
	if i.DWARFPackage == "" || i.DWARFError != "" {
		return fmt.Errorf("DWARF package %q, DWARF error %q, warnings %q", i.DWARFPackage, i.DWARFError, i.Warnings)
	}
	return nil
}

// pclntabOnly requires the functions to have come from Go's pclntab, with no DWARF to read.
func pclntabOnly(i debuginfo.Info) error {
	if !i.GoPclntab || i.DWARF {
		return fmt.Errorf("go pclntab %v, dwarf %v: want pclntab and no DWARF", i.GoPclntab, i.DWARF)
	}
	return nil
}

func miniDebugInfo(i debuginfo.Info) error {
	if !i.MiniDebugInfo || i.DWARF {
		return fmt.Errorf("minidebuginfo %v, dwarf %v: want MiniDebugInfo and no DWARF", i.MiniDebugInfo, i.DWARF)
	}
	return nil
}

func corpusCases() []corpusCase {
	var cs []corpusCase
	for _, lang := range []string{"c", "cxx"} {
		for _, comp := range []string{"gcc", "clang"} {
			for _, opt := range []string{"O2", "O3"} {
				for _, dw := range []string{"4", "5"} {
					pie := "nopie"
					if (opt == "O2" && dw == "5") || (opt == "O3" && dw == "4") {
						pie = "pie"
					}
					cs = append(cs, corpusCase{name: fmt.Sprintf("%s-%s-%s-dw%s-%s", lang, comp, opt, dw, pie)})
				}
			}
		}
	}
	cs = append(cs,
		corpusCase{name: "cxx-gcc-O2-dw5-zlib", check: compression("zlib")},
		corpusCase{name: "cxx-clang-O2-dw4-zlib", check: compression("zlib")},
		corpusCase{name: "c-gcc-O3-dw4-zlib", check: compression("zlib")},
		corpusCase{name: "c-gcc-O2-nodebug"},
		corpusCase{name: "cxx-clang-O2-nodebug"},
		corpusCase{name: "cxx-gcc-O2-lto"},
		corpusCase{name: "c-gcc-O2-lto"},
		corpusCase{name: "cxx-clang-O2-lto"},
		corpusCase{name: "go"},
		corpusCase{name: "go-stripped", ref: "go", refWhy: "stripped Go binary: llvm-symbolizer reads no pclntab, so it answers on the DWARF twin"},
		corpusCase{name: "rust-v0"},
		corpusCase{name: "rust-legacy"},
		corpusCase{name: "zstd-deb"},
		// -gsplit-dwarf: llvm-symbolizer reads NAME.dwp beside the binary, as we do.
		corpusCase{name: "cxx-gcc-O2-dw5-split", check: dwarfPackage},
		corpusCase{name: "c-gcc-O3-dw5-split", ref: "c-gcc-O3-dw5-nopie", check: dwarfPackage,
			refWhy: "llvm-symbolizer 14 drops the inlined frames of this package's kernels.c unit (it prints only the outermost function); it answers on the twin built without -gsplit-dwarf, whose code is identical"},
		// GNU's DWARF 4 split units, packed by binutils' dwp (unit index version 2).
		corpusCase{name: "cxx-gcc-O2-dw4-split", check: dwarfPackage},
		corpusCase{name: "c-gcc-O3-dw4-split", ref: "c-gcc-O3-dw4-pie", check: dwarfPackage,
			refWhy: "llvm-symbolizer 14 reads wrong inline chains for this package's kernels.c unit (at three in four addresses it names other inlined functions or none); it answers on the twin built without -gsplit-dwarf, whose code is identical and where it agrees with us"},
	)
	const zstdWhy = "llvm-symbolizer 14 cannot read zstd-compressed sections; it answers on the uncompressed twin"
	const splitWhy = "stripped: llvm-symbolizer answers on the unstripped twin (same DWARF as the split debug file)"
	const miniWhy = "llvm-symbolizer 14 does not read .gnu_debugdata; it answers from the same symbols in the .symtab twin"
	for _, b := range []string{"cxx-gcc-O2-dw5-pie", "c-clang-O3-dw4-pie", "zstd-deb"} {
		cs = append(cs, corpusCase{name: b + ".zstd", ref: b, refWhy: zstdWhy, check: compression("zstd")})
	}
	for _, b := range []string{"cxx-clang-O2-dw5-pie", "c-gcc-O3-dw4-pie"} {
		cs = append(cs, corpusCase{name: b + ".stripped-buildid", ref: b, refWhy: splitWhy, debugDirs: []string{"debug-buildid"}, check: foundBy("build-id")})
	}
	// Debuglink layouts as gdb and llvm-symbolizer search them: <debug dir>/<absolute binary
	// directory>/NAME, and .debug/NAME beside the binary (no debug dir needed).
	cs = append(cs,
		corpusCase{name: "cxx-gcc-O3-dw4-pie.stripped-link", ref: "cxx-gcc-O3-dw4-pie", refWhy: splitWhy, debugDirs: []string{"debug-link"}, check: foundBy("debuglink")},
		corpusCase{name: "c-clang-O2-dw5-pie.stripped-link", ref: "c-clang-O2-dw5-pie", refWhy: splitWhy, check: foundBy("debuglink")})
	for _, b := range []string{"cxx-gcc-O2-dw5-pie", "c-clang-O2-dw4-nopie"} {
		cs = append(cs, corpusCase{name: b + ".minidebug", ref: b + ".symtab-ref", refWhy: miniWhy, mode: llvmcompare.ModeSymbols, check: miniDebugInfo})
	}
	// arm64 builds of the same sources: GNU's cross gcc and g++, clang for aarch64-linux-gnu
	// linked by lld, Go with GOARCH=arm64, and a stripped executable with its debug file found
	// by .gnu_debuglink (split by the cross binutils' objcopy).
	for _, b := range []string{"c-gcc-O2-arm64", "cxx-gcc-O2-arm64", "cxx-clang-O2-arm64", "go-arm64"} {
		cs = append(cs, corpusCase{name: b, arm64: true})
	}
	cs = append(cs,
		corpusCase{name: "cxx-gcc-O2-arm64.stripped-link", ref: "cxx-gcc-O2-arm64", refWhy: splitWhy, arm64: true, check: foundBy("debuglink")},
		corpusCase{name: "go-arm64-pie", arm64: true},
		corpusCase{name: "go-arm64-pie-stripped", ref: "go-arm64-pie", arm64: true, check: pclntabOnly,
			refWhy: "stripped Go PIE: llvm-symbolizer reads no pclntab, so it answers on the DWARF twin"})
	const dwzWhy = "dwz'ed debug file: llvm-symbolizer 14 does not read supplementary files (it prints ?? for the functions dwz moved); it answers on the twin before strip and dwz"
	for _, d := range []struct{ bin, section string }{
		{"cxx-gcc-O2-dw4-nopie", ".gnu_debugaltlink"}, {"cxx-gcc-O3-dw4-pie", ".gnu_debugaltlink"},
		{"cxx-gcc-O2-dw5-pie", ".debug_sup"}, {"cxx-gcc-O3-dw5-nopie", ".debug_sup"},
	} {
		cs = append(cs, corpusCase{name: d.bin + ".stripped-dwz", ref: d.bin, refWhy: dwzWhy, debugDirs: []string{"debug-dwz"}, check: supplementary(d.section)})
	}
	return cs
}

// ensureCorpus runs testdata/build.sh (a no-op when the corpus is current) and returns the
// build directory.
func ensureCorpus(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"llvm-symbolizer", "addr2line", "gcc", "clang", "objcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("corpus test needs %s in PATH: %v", tool, err)
		}
	}
	build, err := filepath.Abs(filepath.Join(corpusDir, "build"))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("PROFSYM_CORPUS_NOBUILD") != "" {
		if _, err := os.Stat(filepath.Join(build, "bin")); err != nil {
			t.Fatalf("corpus missing (%v): run testdata/build.sh (or make testdata) from the repository root", err)
		}
		return build
	}
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), "bash", filepath.Join(corpusDir, "build.sh"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("testdata/build.sh failed (%v); run it from the repository root to see why:\n%s", err, out)
	}
	if len(out) > 0 {
		t.Logf("testdata/build.sh (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	}
	return build
}

func TestCorpusAgainstLLVMSymbolizer(t *testing.T) {
	if testing.Short() {
		t.Skip("corpus test: builds and symbolizes dozens of binaries")
	}
	build := ensureCorpus(t)
	type row struct {
		name                   string
		addrs                  int
		chain, line, raw, rawL float64
		lines                  int
		unexplained            int
	}
	var rows []row
	for _, c := range corpusCases() {
		t.Run(c.name, func(t *testing.T) {
			rep, n := runCorpusCase(t, build, c)
			rows = append(rows, row{c.name, n, rep.ChainRate(), rep.LineRate(), rep.RawChainRate(), rep.RawLineRate(), rep.LineCompared, len(rep.Unexplained())})
		})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].name < rows[j].name })
	var b strings.Builder
	fmt.Fprintf(&b, "%-32s %6s %9s %9s %7s %9s %9s %6s\n", "binary", "addrs", "chain", "chain-raw", "lined", "line", "line-raw", "unexp")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-32s %6d %8.3f%% %8.3f%% %7d %8.3f%% %8.3f%% %6d\n", r.name, r.addrs, 100*r.chain, 100*r.raw, r.lines, 100*r.line, 100*r.rawL, r.unexplained)
	}
	t.Logf("agreement with llvm-symbolizer (chain, and file:line where llvm reads DWARF; raw = exact, else counting classified differences):\n%s", b.String())
}

func runCorpusCase(t *testing.T, build string, c corpusCase) (llvmcompare.Report, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	obj := filepath.Join(build, "bin", c.name)
	if c.arm64 {
		// build.sh leaves the arm64 variants out without the cross toolchain.
		testsupport.NeedTools(t, testsupport.ARM64Tools...)
		if m := machine(t, obj); m != elf.EM_AARCH64 {
			t.Fatalf("%s: machine %v, want %v", c.name, m, elf.EM_AARCH64)
		}
	}
	ref := obj
	if c.ref != "" {
		ref = filepath.Join(build, "bin", c.ref)
		t.Logf("reference: %s (%s)", c.ref, c.refWhy)
	}
	funcs, err := llvmcompare.FunctionSymbols(ref)
	if err != nil {
		t.Fatal(err)
	}
	addrs := llvmcompare.Sample(funcs, llvmcompare.PerFunc(corpusAddrs, len(funcs)), corpusAddrs, corpusSeed)

	var dirs []string
	for _, d := range c.debugDirs {
		dirs = append(dirs, filepath.Join(build, d))
	}
	bin, err := debuginfo.Open(obj, debuginfo.Options{DebugDirs: dirs})
	if err != nil {
		t.Fatalf("open %s: %v", c.name, err)
	}
	defer bin.Close()
	start := time.Now()
	ix, err := bin.Index()
	if err != nil {
		t.Fatalf("index %s: %v", c.name, err)
	}
	indexTime := time.Since(start)
	ours := make([][]llvmcompare.Frame, len(addrs))
	for i, a := range addrs {
		for _, f := range ix.Lookup(a) {
			ours[i] = append(ours[i], llvmcompare.Frame{Function: f.Function, LinkageName: f.LinkageName, File: f.File, Line: f.Line, Column: f.Column})
		}
	}
	theirs, err := llvmcompare.Tool{}.Symbolize(ctx, ref, addrs)
	if err != nil {
		t.Fatal(err)
	}
	// llvm-symbolizer's answer on a copy without .symtab tells a symbol-table rename of the
	// outermost frame (which llvm-symbolizer 14 always applies, and cannot be told not to)
	// from a real difference.
	dwarfOnly := map[uint64][]llvmcompare.Frame{}
	if c.mode == llvmcompare.ModeFull && hasDWARF(t, ref) {
		bare := filepath.Join(t.TempDir(), filepath.Base(ref)+".dwarf-only")
		if out, err := exec.CommandContext(ctx, "llvm-objcopy", "--strip-all", "--wildcard", "--keep-section=.debug_*", ref, bare).CombinedOutput(); err != nil {
			t.Fatalf("llvm-objcopy: %v\n%s", err, out)
		}
		dw, err := llvmcompare.Tool{}.Symbolize(ctx, bare, addrs)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range addrs {
			dwarfOnly[a] = dw[i]
		}
	}
	rep, err := llvmcompare.Compare(addrs, ours, theirs, c.mode, llvmcompare.KnownWith(dwarfOnly)...)
	if err != nil {
		t.Fatal(err)
	}
	llvmcompare.Diagnose(&rep, llvmcompare.Diagnosers(dwarfOnly)...)
	info := bin.Info()
	if c.check != nil {
		if err := c.check(info); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	t.Logf("%d functions, %d addresses; index built in %s from %v (fidelity %s, debug file %q found by %q)",
		len(funcs), len(addrs), indexTime.Round(time.Millisecond), info.Sources, info.Fidelity, info.DebugFile, info.DebugFileFoundBy)
	t.Logf("chain %.3f%% (exact %.3f%%), file:line %.3f%% of %d (exact %.3f%%)",
		100*rep.ChainRate(), 100*rep.RawChainRate(), 100*rep.LineRate(), rep.LineCompared, 100*rep.RawLineRate())
	logDiffs(t, ctx, ref, rep)
	if rep.ChainRate() < chainBar {
		t.Errorf("%s: function chains agree on %.3f%% of %d addresses, bar %.1f%%", c.name, 100*rep.ChainRate(), rep.Addresses, 100*chainBar)
	}
	if c.mode == llvmcompare.ModeFull && rep.LineRate() < lineBar {
		t.Errorf("%s: file:line agrees on %.3f%% of %d addresses, bar %.1f%%", c.name, 100*rep.LineRate(), rep.LineCompared, 100*lineBar)
	}
	return rep, len(addrs)
}

// logDiffs logs the classified differences by reason, and a sample of the unexplained ones
// with addr2line's answer as a third opinion on which side is right.
func logDiffs(t *testing.T, ctx context.Context, ref string, rep llvmcompare.Report) {
	t.Helper()
	if len(rep.Diffs) == 0 {
		return
	}
	sum := rep.Summary()
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("%5d %s", sum[k], k)
	}
	for _, d := range rep.Diffs {
		if d.Reason != "" {
			t.Logf("example of known difference at 0x%x (%s)\n  ours: %s\n  llvm: %s", d.Addr, d.Reason, llvmcompare.Chain(d.Ours), llvmcompare.Chain(d.Ref))
			break
		}
	}
	un := rep.Unexplained()
	limit := diffsLoggedMax
	if v, err := strconv.Atoi(os.Getenv("PROFSYM_CORPUS_DIFFS")); err == nil && v > 0 {
		limit = v
	}
	if len(un) > limit {
		un = un[:limit]
	}
	if len(un) == 0 {
		return
	}
	addrs := make([]uint64, len(un))
	for i, d := range un {
		addrs[i] = d.Addr
	}
	third, err := llvmcompare.AddrToLine(ctx, ref, addrs)
	for i, d := range un {
		verdict := "addr2line unavailable"
		if err == nil {
			verdict = llvmcompare.Verdict(d, third[i])
		}
		if d.Diagnosis != "" {
			verdict += "; diagnosis: " + d.Diagnosis
		}
		t.Logf("%s difference at 0x%x (%s)\n  ours: %s\n  llvm: %s\n  first difference: %s", d.Kind, d.Addr, verdict,
			llvmcompare.Chain(d.Ours), llvmcompare.Chain(d.Ref), llvmcompare.FirstDifference(d))
	}
	if err != nil {
		t.Logf("addr2line: %v", err)
	}
}

func machine(t *testing.T, path string) elf.Machine {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.Machine
}

func hasDWARF(t *testing.T, path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.Section(".debug_info") != nil
}

// TestGoInitializersAgainstLLVMSymbolizer holds every address of the corpus Go program's package
// initializers (main.init and its closures) to llvm-symbolizer exactly: pclntab files their
// generated code under <autogenerated>:1 where the DWARF line table, which llvm-symbolizer
// reads, has the source line or line 0; and where the compiler removed an inlined call's
// instructions (a variable initialized by an inlinable constructor), pclntab's inline tree
// places the call at <autogenerated>:1 or drops its callers, where DWARF's inlined instances
// keep them (103 of 4,862 addresses differed before initializers were read from DWARF).
func TestGoInitializersAgainstLLVMSymbolizer(t *testing.T) {
	if testing.Short() {
		t.Skip("corpus test: needs the corpus's Go program")
	}
	obj := filepath.Join(ensureCorpus(t), "bin", "go")
	addrs := namedFunctionAddrs(t, obj, func(name string) bool { return name == "main.init" || strings.HasPrefix(name, "main.init.") },
		1000, "main.init*: the corpus program lost its package initializers")
	ours, theirs, info := oursAndLLVM(t, obj, addrs)
	autogenerated := 0
	for _, fs := range theirs {
		for _, f := range fs {
			if strings.HasSuffix(f.File, "<autogenerated>") {
				autogenerated++
			}
		}
	}
	rep, err := llvmcompare.Compare(addrs, ours, theirs, llvmcompare.ModeFull)
	if err != nil {
		t.Fatal(err)
	}
	if u := rep.Unexplained(); len(u) > 0 {
		t.Fatalf("%d of %d addresses differ from llvm-symbolizer (sources %v), first: %s vs %s", len(u), len(addrs), info.Sources,
			llvmcompare.Chain(u[0].Ours), llvmcompare.Chain(u[0].Ref))
	}
	t.Logf("%d addresses of main.init* agree with llvm-symbolizer exactly (%d of its frames say <autogenerated>); sources %v", len(addrs), autogenerated, info.Sources)
}

// TestGoFilesSpelledAsDWARF: in a Go binary with DWARF, every frame's file is spelled as
// llvm-symbolizer spells it, not only the same path: the call sites and declaration files of
// inlined frames come from pclntab, which spells the file of generated code "<autogenerated>"
// where Go's DWARF says "././<autogenerated>", and one file under two strings is two files to
// a profile viewer. It also holds the inlined frames' call sites, which come from pclntab, to
// llvm-symbolizer's (DWARF's DW_AT_call_file and DW_AT_call_line).
func TestGoFilesSpelledAsDWARF(t *testing.T) {
	if testing.Short() {
		t.Skip("corpus test: needs the corpus's Go program")
	}
	obj := filepath.Join(ensureCorpus(t), "bin", "go")
	all, err := llvmcompare.FunctionAddrs(obj)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []uint64
	for i := 0; i < len(all); i += 5 {
		addrs = append(addrs, all[i])
	}
	ix, _, err := debuginfo.OpenIndex(obj, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := llvmcompare.Tool{}.Symbolize(t.Context(), obj, addrs)
	if err != nil {
		t.Fatal(err)
	}
	generated, callSites := 0, 0
	for k, a := range addrs {
		ours, ref := ix.Lookup(a), theirs[k]
		if len(ours) != len(ref) {
			continue
		}
		for i, o := range ours {
			r := ref[i]
			if checkFileSpelling(t, a, i, o, r) {
				generated++
			}
			if i > 0 && o.Function == r.Function {
				callSites++
				if o.File != r.File || o.Line != r.Line {
					t.Errorf("%#x frame %d (%s): call site %s:%d, llvm-symbolizer %s:%d", a, i, o.Function, o.File, o.Line, r.File, r.Line)
				}
			}
		}
	}
	if generated == 0 || callSites == 0 {
		t.Fatalf("%d frames in generated code, %d call sites among %d addresses: the test checks nothing", generated, callSites, len(addrs))
	}
	t.Logf("%d addresses: %d frames in generated code, %d call sites as llvm-symbolizer has them", len(addrs), generated, callSites)
}

// TestGoDWARFLinesFallBack: a Go binary whose DWARF line table is unreadable is answered with
// pclntab's lines, and says why.
func TestGoDWARFLinesFallBack(t *testing.T) {
	if testing.Short() {
		t.Skip("corpus test: needs the corpus's Go program")
	}
	data, err := os.ReadFile(filepath.Join(ensureCorpus(t), "bin", "go"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".debug_line")
	if s == nil || s.Type == elf.SHT_NOBITS || s.FileSize < 64 {
		t.Fatal("the corpus Go program has no .debug_line to corrupt")
	}
	// Past a compression header (if any), so the section stays recognizable and its contents fail.
	for i := s.Offset + 24; i < s.Offset+s.FileSize; i++ {
		data[i] = 0xff
	}
	broken := filepath.Join(t.TempDir(), "go-broken-lines")
	if err := os.WriteFile(broken, data, 0o755); err != nil {
		t.Fatal(err)
	}
	ix, info, err := debuginfo.OpenIndex(broken, debuginfo.Options{})
	if err != nil {
		t.Fatalf("index: %v", err)
	}
	if len(info.Sources) == 0 || !strings.HasPrefix(info.Sources[0], "gopclntab ") || !strings.Contains(strings.Join(info.Warnings, "\n"), "dwarf lines") {
		t.Fatalf("sources %v, warnings %v: want pclntab's lines and a warning about the DWARF line table", info.Sources, info.Warnings)
	}
	if st := ix.Stats(); st.LineRows == 0 {
		t.Fatal("no line rows: the fallback lost pclntab's lines")
	}
	t.Logf("sources %v; warning %q", info.Sources, info.Warnings)
}
