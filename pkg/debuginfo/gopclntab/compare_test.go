package gopclntab

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// testProgram has inlinable call chains under //go:noinline anchors, generic functions
// (inlined and not), methods, closures and a deferred call, so that the inline tree is deep
// and varied.
const testProgram = `package main

import (
	"fmt"
	"os"
	"strings"
)

type Number interface{ ~int | ~int64 | ~float64 }

func Sum[T Number](xs []T) T {
	var s T
	for _, x := range xs {
		s += x
	}
	return s
}

//go:noinline
func Max[T Number](a, b T) T {
	if a > b {
		return a
	}
	return b
}

func Map[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, 0, len(xs))
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

func leaf(x int) int { return x*3 + 1 }

func mid(x int) int { return leaf(x) * 2 }

func top(x int) int { return mid(x+1) - 5 }

func wide(x int) int {
	if x > 10 {
		return mid(x) + leaf(x-1)
	}
	return top(x) * mid(x+2)
}

//go:noinline
func anchor(x int) int {
	return top(x) + Sum([]int{x, x + 1, leaf(x)})
}

type S struct{ n int }

func (s *S) Get() int { return s.n + leaf(s.n) }

//go:noinline
func (s *S) Work(k int) int {
	t := 0
	for i := 0; i < k; i++ {
		t += s.Get() + wide(i)
	}
	return t
}

//go:noinline
func closures(n int) func(int) int {
	base := n * 2
	return func(v int) int { return base + wide(v) }
}

//go:noinline
func deferred(n int) (r int) {
	defer func() { r += leaf(n) }()
	return top(n)
}

//go:noinline
func words(s string) int {
	fs := strings.Fields(s)
	ls := Map(fs, func(w string) int { return len(w) + leaf(len(w)) })
	return Sum(ls)
}

func main() {
	n := len(os.Args) + 3
	f := closures(n)
	s := &S{n: n}
	fmt.Println(anchor(n), s.Work(n), f(n), deferred(n), words("a bb ccc dddd"),
		Max(n, 7), Max(2.5, float64(n)), Sum([]float64{1, 2, float64(n)}))
}
`

var (
	buildOnce                sync.Once
	builtFull, builtStripped string
	buildErr                 error
	buildDir                 string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		if err := os.RemoveAll(buildDir); err != nil {
			fmt.Fprintf(os.Stderr, "remove test build dir: %v\n", err)
		}
	}
	os.Exit(code)
}

// buildTestProgram compiles testProgram once per test process with DWARF and symbols and once
// stripped.
func buildTestProgram(t testing.TB) (full, stripped string) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go toolchain not found")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "gopclntab-test-")
		if buildErr == nil {
			builtFull, builtStripped, buildErr = compileTestProgram(t.Context(), buildDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtFull, builtStripped
}

func compileTestProgram(ctx context.Context, dir string) (full, stripped string, err error) {
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(testProgram), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/pcltest\n\ngo 1.22\n"), 0o644); err != nil {
		return "", "", err
	}
	full, stripped = filepath.Join(dir, "full"), filepath.Join(dir, "stripped")
	for _, c := range []struct {
		out   string
		flags []string
	}{{full, nil}, {stripped, []string{"-ldflags=-s -w"}}} {
		args := append([]string{"build", "-o", c.out}, c.flags...)
		cmd := exec.CommandContext(ctx, "go", append(args, ".")...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build: %w\n%s", err, out)
		}
	}
	return full, stripped, nil
}

func loadIndex(t testing.TB, path string) (*index.Index, Stats) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := index.NewBuilder()
	st, err := Load(f, b)
	if err != nil {
		t.Fatalf("Load %s: %v", path, err)
	}
	ix, err := b.Build()
	if err != nil {
		t.Fatalf("Build %s: %v", path, err)
	}
	return ix, st
}

// samplePCs draws n addresses inside the functions of the symbol table of path; half of them
// from functions whose name has one of the prefixes, when any are given.
func samplePCs(t testing.TB, path string, n int, prefixes ...string) []uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("symbols of %s: %v", path, err)
	}
	type fn struct{ lo, size uint64 }
	var all, pref []fn
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 {
			continue
		}
		all = append(all, fn{s.Value, s.Size})
		for _, p := range prefixes {
			if strings.HasPrefix(s.Name, p) {
				pref = append(pref, fn{s.Value, s.Size})
				break
			}
		}
	}
	pick := func(r *rand.Rand, fs []fn) uint64 {
		var total uint64
		for _, f := range fs {
			total += f.size
		}
		x := r.Uint64N(total)
		for _, f := range fs {
			if x < f.size {
				return f.lo + x
			}
			x -= f.size
		}
		return fs[len(fs)-1].lo
	}
	r := rand.New(rand.NewPCG(1, 2))
	pcs := make([]uint64, 0, n)
	for i := 0; i < n; i++ {
		if len(pref) > 0 && i%2 == 0 {
			pcs = append(pcs, pick(r, pref))
		} else {
			pcs = append(pcs, pick(r, all))
		}
	}
	return pcs
}

type llvmFrame struct {
	FunctionName  string
	FileName      string
	Line          uint32
	StartLine     uint32
	StartFileName string
	StartAddress  string
}

// llvmSymbolize runs one llvm-symbolizer process over all addresses.
func llvmSymbolize(t testing.TB, obj string, pcs []uint64) [][]llvmFrame {
	t.Helper()
	if _, err := exec.LookPath("llvm-symbolizer"); err != nil {
		t.Skip("llvm-symbolizer not found")
	}
	var in bytes.Buffer
	for _, pc := range pcs {
		fmt.Fprintf(&in, "0x%x\n", pc)
	}
	cmd := exec.CommandContext(t.Context(), "llvm-symbolizer", "--obj="+obj, "--output-style=JSON", "--inlines")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	res := make([][]llvmFrame, 0, len(pcs))
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var rec struct {
			Symbol []llvmFrame
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("llvm-symbolizer JSON: %v: %s", err, sc.Bytes())
		}
		var fr []llvmFrame
		for _, s := range rec.Symbol {
			if s.FunctionName == "" || s.FunctionName == "??" {
				continue
			}
			fr = append(fr, s)
		}
		res = append(res, fr)
	}
	if len(res) != len(pcs) {
		t.Fatalf("llvm-symbolizer answered %d of %d addresses", len(res), len(pcs))
	}
	return res
}

// normalizeLLVM removes what llvm-symbolizer adds to Go's DWARF and the pclntab legitimately
// lacks: the linker's ".abi0" suffix on assembly functions (the runtime, tracebacks and pprof
// name them without it), and the "./" that joining a relative file name with the compile
// directory "." prepends to "<autogenerated>". The linker also writes the middle dot of
// compiler-generated names ("type:.eq.T·7") as a plain dot in DWARF; compareName ignores that.
// It reports whether it changed anything.
func normalizeLLVM(fr []llvmFrame) bool {
	changed := false
	for i := range fr {
		if n, ok := strings.CutSuffix(fr[i].FunctionName, ".abi0"); ok {
			fr[i].FunctionName, changed = n, true
		}
		for strings.HasPrefix(fr[i].FileName, "./") {
			fr[i].FileName, changed = fr[i].FileName[2:], true
		}
		for strings.HasPrefix(fr[i].StartFileName, "./") {
			fr[i].StartFileName, changed = fr[i].StartFileName[2:], true
		}
	}
	return changed
}

func compareName(s string) string { return strings.ReplaceAll(s, "·", ".") }

type agreement struct {
	n, chains, lines int
	normalized       int
	starts           int // chains whose StartLine, StartFileName and StartAddress agree too
	startDiffs       []string
	dwarfGaps        int // llvm has no line where the pclntab has one
	cCode            int // cgo C functions, which only DWARF describes
	lostCallSites    int // inlined call sites the pclntab resolves to the function entry
	chainDiffs       []string
	lineDiffs        []string
}

func (a *agreement) add(pc uint64, ours []index.Frame, ref []llvmFrame) {
	a.n++
	if normalizeLLVM(ref) {
		a.normalized++
	}
	chainOK := len(ours) == len(ref)
	for i := 0; chainOK && i < len(ours); i++ {
		chainOK = compareName(ours[i].Function) == compareName(ref[i].FunctionName)
	}
	lineOK := chainOK
	for i := 0; lineOK && i < len(ours); i++ {
		lineOK = ours[i].File == ref[i].FileName && ours[i].Line == ref[i].Line
	}
	desc := func() string {
		var o, r []string
		for _, f := range ours {
			o = append(o, fmt.Sprintf("%s@%s:%d", f.Function, f.File, f.Line))
		}
		for _, f := range ref {
			r = append(r, fmt.Sprintf("%s@%s:%d", f.FunctionName, f.FileName, f.Line))
		}
		return fmt.Sprintf("%#x\n  ours: %s\n  llvm: %s", pc, strings.Join(o, " <- "), strings.Join(r, " <- "))
	}
	if chainOK {
		a.chains++
	} else if len(ours) == 0 && len(ref) > 0 && isCSource(ref[0].FileName) {
		// C code of a cgo binary: the pclntab describes Go functions only.
		a.cCode++
	} else if len(a.chainDiffs) < 15 {
		a.chainDiffs = append(a.chainDiffs, desc())
	}
	// llvm-symbolizer 14 reports no start file or address for inlined frames, and Go's DWARF
	// has no declaration line for assembly functions: only what llvm reports is compared.
	startOK := chainOK
	for i := 0; startOK && i < len(ours); i++ {
		r := ref[i]
		startOK = (r.StartLine == 0 || ours[i].StartLine == r.StartLine) &&
			(r.StartFileName == "" || ours[i].StartFile == r.StartFileName) &&
			(r.StartAddress == "" || fmt.Sprintf("0x%x", ours[i].StartAddress) == r.StartAddress)
	}
	if startOK {
		a.starts++
	} else if chainOK && len(a.startDiffs) < 8 {
		var o, r []string
		for i := range ours {
			o = append(o, fmt.Sprintf("%s start %s:%d %#x", ours[i].Function, ours[i].StartFile, ours[i].StartLine, ours[i].StartAddress))
			r = append(r, fmt.Sprintf("%s start %s:%d %s", ref[i].FunctionName, ref[i].StartFileName, ref[i].StartLine, ref[i].StartAddress))
		}
		a.startDiffs = append(a.startDiffs, fmt.Sprintf("%#x\n  ours: %s\n  llvm: %s", pc, strings.Join(o, " <- "), strings.Join(r, " <- ")))
	}
	if lineOK {
		a.lines++
	} else if chainOK {
		// Classify: DWARF with no row at the address (llvm prints line 0 and no file), and
		// inlined calls whose call site the pclntab no longer holds (parentPc 0, which points
		// at the function's entry: "<autogenerated>:1" in package initializers).
		gap, entrySite := false, false
		for i := range ours {
			if ours[i].File == ref[i].FileName && ours[i].Line == ref[i].Line {
				continue
			}
			switch {
			case ref[i].Line == 0:
				gap = true
			case i > 0 && ours[i].File == "<autogenerated>" && ours[i].Line == 1:
				entrySite = true
			}
		}
		switch {
		case gap:
			a.dwarfGaps++
		case entrySite:
			a.lostCallSites++
		}
		if len(a.lineDiffs) < 15 {
			a.lineDiffs = append(a.lineDiffs, desc())
		}
	}
}

func isCSource(file string) bool {
	for _, ext := range []string{".c", ".h", ".S", ".s", ".cc", ".cpp"} {
		if strings.HasSuffix(file, ext) {
			return true
		}
	}
	return false
}

// report logs the agreement and returns the rates over Go code (cgo's C code left out).
func (a *agreement) report(t testing.TB, name string) (chainRate, lineRate float64) {
	goPCs := a.n - a.cCode
	chainRate, lineRate = float64(a.chains)/float64(goPCs), float64(a.lines)/float64(goPCs)
	if a.cCode > 0 {
		t.Logf("%s: %d of %d addresses are in cgo C code, which only DWARF describes", name, a.cCode, a.n)
	}
	t.Logf("%s: %d addresses, chains agree %.3f%%, chains+file:line agree %.3f%% (%d llvm answers normalized); "+
		"of the file:line differences, %d are DWARF line gaps and %d call sites lost from the pclntab; "+
		"excluding DWARF gaps file:line agree %.3f%%",
		name, goPCs, 100*chainRate, 100*lineRate, a.normalized, a.dwarfGaps, a.lostCallSites,
		100*float64(a.lines)/float64(goPCs-a.dwarfGaps))
	t.Logf("%s: start line, file and address agree on %.3f%% of the addresses", name, 100*float64(a.starts)/float64(goPCs))
	for _, d := range a.startDiffs {
		t.Logf("start differs at %s", d)
	}
	for _, d := range a.chainDiffs {
		t.Logf("chain differs at %s", d)
	}
	for _, d := range a.lineDiffs {
		t.Logf("file:line differs at %s", d)
	}
	return chainRate, lineRate
}

// compareBinaries checks the stripped binary's index against llvm-symbolizer on the full one,
// and against our own index of the full one.
func compareBinaries(t *testing.T, full, stripped string, n int, prefixes ...string) (chainRate, lineRate float64) {
	fullIx, fullSt := loadIndex(t, full)
	loadStart := time.Now()
	strIx, strSt := loadIndex(t, stripped)
	t.Logf("Load+Build of the stripped binary: %v", time.Since(loadStart).Round(time.Millisecond))
	t.Logf("full: %+v; stripped: %+v", fullSt, strSt)
	if strSt.Functions == 0 || strSt.InlinedCalls == 0 || strSt.LineRows == 0 {
		t.Fatalf("stripped binary gave %+v", strSt)
	}
	if strIx.Fidelity() != index.FidelityFullInlines {
		t.Fatalf("stripped fidelity %v", strIx.Fidelity())
	}
	pcs := samplePCs(t, full, n, prefixes...)
	llvmStart := time.Now()
	ref := llvmSymbolize(t, full, pcs)
	t.Logf("llvm-symbolizer on the DWARF binary: %v for %d addresses", time.Since(llvmStart).Round(time.Millisecond), len(pcs))
	var a agreement
	var same int
	for i, pc := range pcs {
		ours := strIx.Lookup(pc)
		a.add(pc, ours, ref[i])
		theirs := fullIx.Lookup(pc)
		if fmt.Sprint(ours) == fmt.Sprint(theirs) {
			same++
		} else if same+5 > i {
			t.Errorf("stripped and full differ at %#x:\n  %v\n  %v", pc, ours, theirs)
		}
	}
	if same != len(pcs) {
		t.Errorf("stripped and full indexes agree on %d of %d addresses", same, len(pcs))
	}
	return a.report(t, filepath.Base(stripped))
}

func TestStrippedMatchesDWARF(t *testing.T) {
	full, stripped := buildTestProgram(t)
	chainRate, lineRate := compareBinaries(t, full, stripped, 6000, "main.")
	if chainRate < 0.999 {
		t.Errorf("chain agreement %.4f below 0.999", chainRate)
	}
	if lineRate < 0.995 {
		t.Errorf("file:line agreement %.4f below 0.995", lineRate)
	}
}

// TestInlineChains checks known chains of the test program exactly.
func TestInlineChains(t *testing.T) {
	_, stripped := buildTestProgram(t)
	ix, _ := loadIndex(t, stripped)
	f, err := elf.Open(stripped)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Every chain seen inside main.anchor, as caller-last name lists.
	seen := map[string]bool{}
	var anchorStart uint32
	text := f.Section(".text")
	for pc := text.Addr; pc < text.Addr+text.Size; pc++ {
		fr := ix.Lookup(pc)
		if len(fr) == 0 || fr[len(fr)-1].Function != "main.anchor" {
			continue
		}
		anchorStart = fr[len(fr)-1].StartLine
		var names []string
		for _, x := range fr {
			names = append(names, x.Function)
		}
		seen[strings.Join(names, " <- ")] = true
	}
	var got []string
	for k := range seen {
		got = append(got, k)
	}
	sort.Strings(got)
	t.Logf("chains in main.anchor: %q", got)
	for _, want := range []string{
		"main.leaf <- main.mid <- main.top <- main.anchor",
		"main.mid <- main.top <- main.anchor",
		"main.Sum[go.shape.int] <- main.anchor",
	} {
		if !seen[want] {
			t.Errorf("chain %q not found", want)
		}
	}
	if wantLine := uint32(strings.Count(testProgram[:strings.Index(testProgram, "func anchor(")], "\n") + 1); anchorStart != wantLine {
		t.Errorf("main.anchor StartLine %d, want %d", anchorStart, wantLine)
	}
}

// TestLargeBinary compares a large real Go binary when PROFSYM_GOPCLNTAB_LARGE names it, with
// PROFSYM_GOPCLNTAB_LARGE_STRIPPED its -s -w twin.
func TestLargeBinary(t *testing.T) {
	full, stripped := os.Getenv("PROFSYM_GOPCLNTAB_LARGE"), os.Getenv("PROFSYM_GOPCLNTAB_LARGE_STRIPPED")
	if full == "" || stripped == "" {
		t.Skip("PROFSYM_GOPCLNTAB_LARGE and PROFSYM_GOPCLNTAB_LARGE_STRIPPED not set")
	}
	compareBinaries(t, full, stripped, 10000)
}
