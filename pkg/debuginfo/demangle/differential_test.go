package demangle

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
)

// A nameSource is one binary's mangled names.
type nameSource struct {
	name  string
	names []string
}

// The libraries whose names the differential test reads when they are installed: Debian's
// libstdc++ and libLLVM, two large C++ code bases whose exported names cover most of the
// Itanium grammar that compilers emit.
var systemLibraries = []string{
	"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
	"/usr/lib/llvm-14/lib/libLLVM-14.so.1",
}

// corpusBinaries are read from the engine's corpus (testdata/build.sh) when it has been built.
var corpusBinaries = []string{
	"cxx-gcc-O2-dw5-pie", "cxx-clang-O2-dw4-nopie", "cxx-gcc-O2-lto", "zstd-deb", "rust-v0", "rust-legacy",
}

// TestDifferential demangles every mangled name of real binaries (system C++ libraries,
// programs compiled here with g++, clang++ and rustc, the engine's corpus) with this package,
// GNU c++filt and llvm-cxxfilt 14, the demangler llvm-symbolizer 14 uses. Where the two
// references print the same, so must we, for every name. Where they differ, we print what
// LLVM 14 prints, or GNU's answer for a recorded reason (LLVM 14 cannot demangle the name, or
// spells it with a known bug), or what decisions.tsv records; each class is counted.
// DEMANGLE_DIFFS=dir writes every name of each class there.
func TestDifferential(t *testing.T) {
	if testing.Short() {
		t.Skip("short: compiles programs and runs the reference demanglers")
	}
	gnu, err := exec.LookPath("c++filt")
	if err != nil {
		t.Skip("GNU c++filt (binutils) not installed")
	}
	llvm := llvmCxxfilt(t)
	decisions := loadDecisions(t)

	sources := collectSources(t)
	if len(sources) == 0 {
		t.Skip("no binaries to read names from")
	}
	total := map[string]int{}
	lists := map[string]*bytes.Buffer{}
	for _, src := range sources {
		if len(src.names) == 0 {
			t.Logf("%s: no mangled names", src.name)
			continue
		}
		g := filter(t, gnu, src.names)
		l := filter(t, llvm, src.names)
		counts := map[string]int{}
		for i, n := range src.names {
			ours := Name(n)
			class, ok := classify(n, ours, g[i], l[i], decisions)
			counts[class]++
			total[class]++
			if lists[class] == nil {
				lists[class] = new(bytes.Buffer)
			}
			fmt.Fprintf(lists[class], "%s\n  ours %s\n  gnu  %s\n  llvm %s\n", n, ours, g[i], l[i])
			if !ok {
				t.Errorf("%s: %s\n  ours %s\n  gnu  %s\n  llvm %s", src.name, n, ours, g[i], l[i])
			}
		}
		t.Logf("%s: %d mangled names: %s", src.name, len(src.names), summary(counts))
	}
	t.Logf("all: %s", summary(total))
	if dir := os.Getenv("DEMANGLE_DIFFS"); dir != "" {
		writeClassLists(t, dir, lists)
	}
}

// Classes of names. The first two are agreement with both references; the others are the
// reasons we may print something else than one of them.
const (
	classBothAgree     = "both references agree, ours too"
	classAsLLVM        = "references differ, ours as LLVM 14"
	classLLVMCannot    = "LLVM 14 cannot demangle, ours as GNU"
	classRustLegacy    = "legacy Rust, LLVM 14 leaves rustc escapes, ours as GNU (rustc-demangle)"
	classLLVMSpelling  = "LLVM 14 bug, ours as GNU in LLVM's spelling"
	classGenericLambda = "generic lambda, LLVM 14 prints its template parameters as auto, ours the types"
	classDecision      = "decisions.tsv"
	classDisagreeBoth  = "DISAGREES with both references"
	classDisagreeRefOK = "DISAGREES where the references agree"
)

// classify says how ours relates to the references, and whether that is allowed.
func classify(name, ours, gnu, llvm string, decisions map[string]string) (string, bool) {
	switch {
	case gnu == llvm && ours == gnu:
		return classBothAgree, true
	case gnu == llvm:
		return classDisagreeRefOK, false
	case ours == llvm:
		return classAsLLVM, true
	case decisions[name] != "":
		return classDecision, true
	case llvm == name && ours != name:
		return classLLVMCannot, true
	case isLegacyRust(name) && (ours == gnu || ours == withSuffix(gnu, legacySuffix(name))):
		// GNU drops a vendor suffix (".llvm.<n>") that LLVM and we print.
		return classRustLegacy, true
	case ours == gnu || llvmSpelling(gnu) == ours:
		return classLLVMSpelling, true
	case genericLambda.MatchString(name) && strings.Contains(llvm, "auto"):
		return classGenericLambda, true
	}
	return classDisagreeBoth, false
}

// genericLambda matches a closure type whose signature names a template parameter: the
// lambda's own ("auto" parameters), which LLVM 14 prints as auto wherever the closure's
// enclosing template repeats them.
var genericLambda = regexp.MustCompile(`Ul[^E]*T[0-9]*_[^E]*E[0-9]*_`)

func legacySuffix(name string) string {
	_, _, suffix, _ := legacyRust(name)
	return suffix
}

func isLegacyRust(name string) bool {
	_, _, _, ok := legacyRust(name)
	return ok
}

// llvmSpelling rewrites GNU c++filt's spelling of the constructs LLVM 14 spells otherwise
// (closure types, unnamed types, clone suffixes), so that a name on which LLVM 14 has a bug
// can be compared with GNU's correct answer.
func llvmSpelling(s string) string {
	// "{lambda(int)#2}" is LLVM's "'lambda0'(int)"; "{lambda()#1}" is "'lambda'()".
	var b strings.Builder
	for {
		i := strings.Index(s, "{lambda(")
		if i < 0 {
			break
		}
		b.WriteString(s[:i])
		rest := s[i+len("{lambda"):]
		end := closingParen(rest)
		if end < 0 || !strings.HasPrefix(rest[end+1:], "#") {
			b.WriteString(s[i : i+len("{lambda")])
			s = rest
			continue
		}
		params := rest[:end+1]
		after := rest[end+2:]
		j := strings.IndexByte(after, '}')
		if j < 0 {
			b.WriteString(s[i:])
			return b.String()
		}
		num := after[:j]
		b.WriteString("'lambda")
		if num != "1" {
			fmt.Fprintf(&b, "%d", atoi(num)-2)
		}
		b.WriteString("'" + params)
		s = after[j+1:]
	}
	b.WriteString(s)
	out := unnamedTypes.ReplaceAllStringFunc(b.String(), func(m string) string {
		// "{unnamed type#1}" is LLVM's "'unnamed'", "{unnamed type#3}" its "'unnamed1'".
		num := atoi(m[len("{unnamed type#") : len(m)-1])
		if num <= 1 {
			return "'unnamed'"
		}
		return fmt.Sprintf("'unnamed%d'", num-2)
	})
	// GNU numbers a generic lambda's invented template parameters ("{lambda(auto:1&&)#1}"),
	// LLVM prints them "auto" ("'lambda'(auto&&)").
	out = autoParam.ReplaceAllString(out, "auto")
	// GNU marks clones " [clone .cold]"; LLVM puts the whole suffix in one parenthesis.
	if i := strings.Index(out, " [clone "); i > 0 {
		suffix := strings.ReplaceAll(out[i:], " [clone ", "")
		suffix = strings.ReplaceAll(suffix, "]", "")
		out = out[:i] + " (" + suffix + ")"
	}
	return llvmAngles(out)
}

var (
	unnamedTypes = regexp.MustCompile(`\{unnamed type#[0-9]+\}`)
	autoParam    = regexp.MustCompile(`\bauto:[0-9]+`)
)

func closingParen(s string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func summary(counts map[string]int) string {
	classes := make([]string, 0, len(counts))
	for c := range counts {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	parts := make([]string, len(classes))
	for i, c := range classes {
		parts[i] = fmt.Sprintf("%d %s", counts[c], c)
	}
	return strings.Join(parts, "; ")
}

func llvmCxxfilt(t *testing.T) string {
	for _, name := range []string{"llvm-cxxfilt-14", "llvm-cxxfilt"} {
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		out, err := exec.CommandContext(t.Context(), path, "--version").Output()
		if err == nil && strings.Contains(string(out), "version 14.") {
			return path
		}
	}
	t.Skip("llvm-cxxfilt 14 not installed (Debian package llvm)")
	return ""
}

// filter demangles names with a c++filt-like tool, one name a line through stdin.
func filter(t *testing.T, tool string, names []string) []string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), tool)
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s", tool, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(names) {
		t.Fatalf("%s gave %d lines for %d names", tool, len(lines), len(names))
	}
	return lines
}

// loadDecisions reads the symbols of testdata/src/decisions.tsv with their reasons.
func loadDecisions(t testing.TB) map[string]string {
	t.Helper()
	f, err := os.Open("testdata/src/decisions.tsv")
	if err != nil {
		t.Fatalf("open decisions: %v", err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 3 {
			t.Fatalf("decisions.tsv: %d columns in %q, want 3", len(cols), line)
		}
		m[cols[0]] = cols[2]
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read decisions: %v", err)
	}
	return m
}

// collectSources gathers the mangled names of every binary at hand: the installed system
// libraries, the programs in testdata/src compiled now by whichever of g++, clang++ and rustc
// are installed, and the engine's corpus when testdata/build.sh has built it.
func collectSources(t *testing.T) []nameSource {
	t.Helper()
	var paths []string
	for _, p := range systemLibraries {
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
		}
	}
	paths = append(paths, compilePrograms(t)...)
	corpus := filepath.Join("..", "..", "..", "testdata", "build", "bin")
	for _, b := range corpusBinaries {
		p := filepath.Join(corpus, b)
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
		} else {
			t.Logf("corpus binary %s not built (make testdata): left out", b)
		}
	}
	var sources []nameSource
	// The C++20 program's names as testdata/cxx20.sh listed them (g++ 12 and clang++ 14),
	// checked whatever compilers are installed here.
	if names, err := readNames(filepath.Join("testdata", "cxx20.names")); err != nil {
		t.Fatal(err)
	} else {
		sources = append(sources, nameSource{name: "cxx20.names", names: names})
	}
	for _, p := range paths {
		names, err := mangledNames(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		sources = append(sources, nameSource{name: filepath.Base(p), names: names})
	}
	return sources
}

// compilePrograms builds testdata/src's C++ programs with g++ and clang++ and its Rust program
// with rustc in both mangling schemes, concurrently, and returns the binaries built.
func compilePrograms(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	type build struct {
		out  string
		env  []string
		argv []string
	}
	var builds []build
	for _, cxx := range []string{"g++", "clang++"} {
		if _, err := exec.LookPath(cxx); err != nil {
			t.Logf("%s not installed: its programs left out", cxx)
			continue
		}
		for _, src := range []string{"templates.cc", "cxx.cc"} {
			out := filepath.Join(dir, strings.TrimSuffix(src, ".cc")+"-"+strings.TrimSuffix(cxx, "++")+"xx")
			builds = append(builds, build{out: out, argv: []string{cxx, "-O1", "-std=c++17", "-o", out, filepath.Join("testdata", "src", src)}})
		}
		// Unoptimized, std::call_once's helpers keep their own symbols.
		out := filepath.Join(dir, "callonce-"+strings.TrimSuffix(cxx, "++")+"xx")
		builds = append(builds, build{out: out, argv: []string{cxx, "-O0", "-std=c++17", "-o", out, filepath.Join("testdata", "src", "callonce.cc")}})
		// C++20 as testdata/cxx20.sh builds it.
		out = filepath.Join(dir, "cxx20-"+strings.TrimSuffix(cxx, "++")+"xx")
		builds = append(builds, build{out: out, argv: []string{cxx, "-std=c++20", "-O0", "-g", "-o", out, filepath.Join("testdata", "src", "cxx20.cc")}})
	}
	if _, err := exec.LookPath("rustc"); err == nil {
		src := filepath.Join("testdata", "src", "rs.rs")
		v0 := filepath.Join(dir, "rs-v0")
		legacy := filepath.Join(dir, "rs-legacy")
		builds = append(builds,
			build{out: v0, argv: []string{"rustc", "-C", "opt-level=1", "-C", "symbol-mangling-version=v0", "-o", v0, src}},
			// Legacy mangling is an unstable option on a stable rustc.
			build{out: legacy, env: []string{"RUSTC_BOOTSTRAP=1"}, argv: []string{"rustc", "-C", "opt-level=1", "-Z", "unstable-options", "-C", "symbol-mangling-version=legacy", "-o", legacy, src}})
	} else {
		t.Log("rustc not installed: Rust programs left out")
	}
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	for i, b := range builds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(t.Context(), b.argv[0], b.argv[1:]...)
			cmd.Env = append(os.Environ(), b.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("%s: %w\n%s", strings.Join(b.argv, " "), err, out)
			}
		}()
	}
	wg.Wait()
	var outs []string
	for i, b := range builds {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		outs = append(outs, b.out)
	}
	return outs
}

// readNames returns the names of a file, one a line.
func readNames(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// mangledNames returns the sorted, distinct names of path's symbol tables that are mangled.
func mangledNames(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	set := map[string]bool{}
	if err := addMangledNames(f, set); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// addMangledNames adds the mangled names of f's symbol tables to set.
func addMangledNames(f *elf.File, set map[string]bool) error {
	for _, read := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return err
		}
		for _, s := range syms {
			// Undefined symbols name other files' functions; copy-relocated data
			// keeps a "@VERSION" suffix in .symtab. No code address resolves to
			// either.
			if s.Section == elf.SHN_UNDEF || strings.Contains(s.Name, "@") {
				continue
			}
			if kind(s.Name) != plain && !strings.ContainsAny(s.Name, " \t") {
				set[s.Name] = true
			}
		}
	}
	return nil
}
