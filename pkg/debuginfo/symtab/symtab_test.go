package symtab

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/dwarfsym"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// cProgram has the symbol shapes whose treatment llvm-symbolizer decides: static functions,
// aliases (global, weak, local), weak functions, an assembly function of size 0, a NOTYPE
// label, a sized symbol nested inside another, an ifunc, data objects, and enough plain
// functions to sample thousands of addresses.
const cProgram = `
#include <stdio.h>
#include <string.h>
static int __attribute__((noinline)) stat_fn(int x) { return x * 7 + 1; }
int __attribute__((noinline)) real_fn(int x) { return stat_fn(x) ^ 3; }
int alias_fn(int x) __attribute__((alias("real_fn")));
int __attribute__((weak)) weak_alias(int x) __attribute__((alias("real_fn")));
static int local_alias(int x) __attribute__((alias("real_fn"), used));
int __attribute__((weak, noinline)) weak_fn(int x) { return x + 11; }
const int table[64] = {1, 2, 3};
int zero_asm(int);
int nested_outer(int);
__asm__(".text\n.globl zero_asm\n.type zero_asm,@function\nzero_asm:\n lea 1(%rdi),%eax\n ret\n nop\n nop\n"
        ".globl notype_lbl\nnotype_lbl:\n nop\n ret\n"
        ".globl nested_outer\n.type nested_outer,@function\nnested_outer:\n mov %edi,%eax\n nop\n nop\n"
        ".globl nested_inner\n.type nested_inner,@function\nnested_inner:\n nop\n nop\n"
        ".size nested_inner,.-nested_inner\n nop\n nop\n ret\n.size nested_outer,.-nested_outer\n");
static int impl_a(int x) { return x + 1; }
static int (*resolve_ifn(void))(int) { return impl_a; }
int ifn(int) __attribute__((ifunc("resolve_ifn")));
#define F(n) static int __attribute__((noinline)) s##n(int x) { int a = x; for (int i = 0; i < (x & 7); i++) a = a * 31 + i; return a ^ n; } \
	int __attribute__((noinline)) g##n(int x) { return s##n(x) + (int)strlen(#n) * n; }
#define F10(n) F(n##0) F(n##1) F(n##2) F(n##3) F(n##4) F(n##5) F(n##6) F(n##7) F(n##8) F(n##9)
F10(1) F10(2) F10(3) F10(4) F10(5) F10(6)
#define C(n) + g##n(argc)
#define C10(n) C(n##0) C(n##1) C(n##2) C(n##3) C(n##4) C(n##5) C(n##6) C(n##7) C(n##8) C(n##9)
int main(int argc, char **argv) {
	(void)argv;
	printf("%d\n", real_fn(argc) + alias_fn(1) + weak_fn(2) + zero_asm(3) + nested_outer(4) + ifn(5) + table[argc & 63]
		C10(1) C10(2) C10(3) C10(4) C10(5) C10(6));
	return 0;
}
`

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// build compiles the sources (name -> text) with the given compiler and flags into dir/out.
func build(t *testing.T, dir, compiler, out string, srcs map[string]string, flags ...string) string {
	t.Helper()
	var names []string
	for name, text := range srcs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	run(t, dir, compiler, append(append(flags, "-o", out), names...)...)
	return filepath.Join(dir, out)
}

func load(t *testing.T, path string) (*index.Index, Stats) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := index.NewBuilder()
	st, err := Load(f, b)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	ix, err := b.Build()
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return ix, st
}

// sampleAddrs returns addresses across every executable segment: a stride through each, plus
// every symbol's and section's first, last and one-past-last byte inside them, so boundaries
// are all probed.
func sampleAddrs(t *testing.T, path string, stride uint64) []uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	set := map[uint64]bool{}
	var segs [][2]uint64
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		segs = append(segs, [2]uint64{p.Vaddr, p.Vaddr + p.Memsz})
		for a := p.Vaddr; a < p.Vaddr+p.Memsz; a += stride {
			set[a] = true
		}
	}
	inCode := func(a uint64) bool {
		for _, s := range segs {
			if a >= s[0] && a < s[1] {
				return true
			}
		}
		return false
	}
	for _, s := range f.Sections {
		set[s.Addr+s.Size-1] = true
		set[s.Addr+s.Size] = true
	}
	syms, _ := f.Symbols()
	dyn, _ := f.DynamicSymbols()
	for _, s := range append(syms, dyn...) {
		if s.Section == elf.SHN_UNDEF || s.Value == 0 {
			continue
		}
		set[s.Value] = true
		if s.Size > 0 {
			set[s.Value+s.Size-1] = true
			set[s.Value+s.Size] = true
		}
	}
	addrs := make([]uint64, 0, len(set))
	for a := range set {
		if inCode(a) {
			addrs = append(addrs, a)
		}
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	return addrs
}

// llvmNames asks llvm-symbolizer for the function at each address (outermost frame). With
// demangle false it prints the symbol as it stands in the table.
func llvmNames(t *testing.T, path string, addrs []uint64, demangle bool) []string {
	t.Helper()
	var in bytes.Buffer
	for _, a := range addrs {
		fmt.Fprintf(&in, "0x%x\n", a)
	}
	args := []string{"--output-style=JSON", "--obj=" + path}
	if !demangle {
		args = append(args, "--no-demangle")
	}
	cmd := exec.CommandContext(t.Context(), "llvm-symbolizer", args...)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r struct {
			Address string
			Symbol  []struct{ FunctionName string }
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("llvm-symbolizer output %q: %v", sc.Text(), err)
		}
		name := ""
		if n := len(r.Symbol); n > 0 {
			name = r.Symbol[n-1].FunctionName
		}
		names = append(names, name)
	}
	if len(names) != len(addrs) {
		t.Fatalf("llvm-symbolizer answered %d of %d addresses", len(names), len(addrs))
	}
	return names
}

// compare checks the index against llvm-symbolizer at addrs: the symbol chosen (linkage
// names, --no-demangle) and the printed name. It returns the agreement on both.
func compare(t *testing.T, path string, ix *index.Index, addrs []uint64, minRate float64) {
	t.Helper()
	raw := llvmNames(t, path, addrs, false)
	pretty := llvmNames(t, path, addrs, true)
	symAgree, nameAgree := 0, 0
	var symDiffs []string
	nameDiffs := map[string]int{} // distinct (ours, llvm) pairs and their address counts
	for i, a := range addrs {
		gotSym, gotName := "", ""
		if fr := ix.Lookup(a); len(fr) > 0 {
			last := fr[len(fr)-1]
			gotName, gotSym = last.Function, last.LinkageName
			if gotSym == "" {
				gotSym = last.Function
			}
		}
		if gotSym == raw[i] {
			symAgree++
		} else if len(symDiffs) < 20 {
			symDiffs = append(symDiffs, fmt.Sprintf("0x%x: ours %q, llvm %q", a, gotSym, raw[i]))
		}
		if gotName == pretty[i] {
			nameAgree++
		} else {
			nameDiffs[fmt.Sprintf("ours %q, llvm %q", gotName, pretty[i])]++
		}
	}
	n := float64(len(addrs))
	t.Logf("%s: %d addresses; symbol agrees %d (%.3f%%), demangled name agrees %d (%.3f%%)",
		filepath.Base(path), len(addrs), symAgree, 100*float64(symAgree)/n, nameAgree, 100*float64(nameAgree)/n)
	t.Logf("  %d distinct names differ (demangler choices recorded in pkg/debuginfo/demangle/testdata/cases.tsv)", len(nameDiffs))
	for d, n := range nameDiffs {
		t.Logf("  %d addresses: %.300s", n, d)
	}
	if float64(symAgree)/n < minRate {
		for _, d := range symDiffs {
			t.Errorf("  symbol differs: %s", d)
		}
		t.Errorf("symbol agreement %.3f%% below %.3f%%", 100*float64(symAgree)/n, 100*minRate)
	}
}

func TestAgainstLLVMSymbolizer(t *testing.T) {
	need(t, "gcc", "strip", "llvm-symbolizer")
	dir := t.TempDir()
	src := map[string]string{"prog.c": cProgram}
	full := build(t, dir, "gcc", "prog", src, "-O2")
	rdyn := build(t, dir, "gcc", "prog-rdynamic", src, "-O2", "-rdynamic")
	run(t, dir, "strip", rdyn)

	for _, c := range []struct {
		path   string
		source string
	}{
		{full, ".symtab"},
		{rdyn, ".dynsym"},
	} {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			ix, st := load(t, c.path)
			if st.Source != c.source || st.Symbols == 0 {
				t.Fatalf("stats %+v, want source %s and symbols", st, c.source)
			}
			if ix.Fidelity() != index.FidelitySymbols {
				t.Errorf("fidelity %v", ix.Fidelity())
			}
			addrs := sampleAddrs(t, c.path, 3)
			if len(addrs) < 1000 {
				t.Fatalf("only %d addresses sampled", len(addrs))
			}
			compare(t, c.path, ix, addrs, 0.999)
		})
	}
}

// TestQuirks pins the llvm-symbolizer choices the package comment lists, by name.
func TestQuirks(t *testing.T) {
	need(t, "gcc")
	dir := t.TempDir()
	path := build(t, dir, "gcc", "prog", map[string]string{"prog.c": cProgram}, "-O2")
	ix, _ := load(t, path)
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]elf.Symbol{}
	for _, s := range syms {
		addr[s.Name] = s
	}
	name := func(a uint64) string {
		if fr := ix.Lookup(a); len(fr) > 0 {
			return fr[len(fr)-1].Function
		}
		return ""
	}
	plt := f.Section(".plt")
	inner, outer := addr["nested_inner"], addr["nested_outer"]
	for _, c := range []struct {
		what string
		at   uint64
		want string
	}{
		{"aliases: last in table order among equal sizes", addr["alias_fn"].Value, "real_fn"},
		{"size-0 asm function reaches the next symbol", addr["zero_asm"].Value + 5, "zero_asm"},
		{"NOTYPE label in code", addr["notype_lbl"].Value, "notype_lbl"},
		{"nested symbol", inner.Value, "nested_inner"},
		{"past a nested symbol: nothing, though the outer one covers it", inner.Value + inner.Size, ""},
		{"outer before the nested one", outer.Value, "nested_outer"},
		{"static function", addr["stat_fn"].Value, "stat_fn"},
		{"ifunc implementation", addr["impl_a"].Value, "impl_a"},
		{"PLT after a size-0 _init", plt.Addr + 4, "_init"},
	} {
		if got := name(c.at); got != c.want {
			t.Errorf("%s: 0x%x is %q, want %q", c.what, c.at, got, c.want)
		}
	}
	if got := name(addr["table"].Value); got != "" {
		t.Errorf("data object resolved to %q: only code ranges belong in the index", got)
	}
}

func TestCXXNames(t *testing.T) {
	need(t, "g++", "llvm-symbolizer")
	src, err := os.ReadFile("../demangle/testdata/src/cxx.cc")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := build(t, dir, "g++", "cxx", map[string]string{"cxx.cc": string(src)}, "-O2", "-std=c++17")
	ix, st := load(t, path)
	if st.Source != ".symtab" {
		t.Fatalf("stats %+v", st)
	}
	frames := 0
	for _, a := range sampleAddrs(t, path, 16) {
		if fr := ix.Lookup(a); len(fr) > 0 && fr[0].LinkageName != "" {
			frames++
		}
	}
	if frames == 0 {
		t.Fatal("no mangled symbol got a linkage name")
	}
	compare(t, path, ix, sampleAddrs(t, path, 2), 0.999)
}

// TestFunctionsBesideDWARF checks Functions on a binary with full DWARF against
// llvm-symbolizer, which names the outermost frame from the symbol table wherever it has a
// symbol, DWARF or not.
func TestFunctionsBesideDWARF(t *testing.T) {
	need(t, "g++", "llvm-symbolizer")
	src, err := os.ReadFile("../demangle/testdata/src/cxx.cc")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := build(t, dir, "g++", "cxx", map[string]string{"cxx.cc": string(src)}, "-O2", "-g", "-std=c++17")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fns, st, err := Functions(f)
	if err != nil {
		t.Fatal(err)
	}
	if st.Source != ".symtab" || len(fns) == 0 {
		t.Fatalf("stats %+v, %d functions", st, len(fns))
	}
	cold := false
	for i, fn := range fns {
		if i > 0 && fn.Lo < fns[i-1].Hi || fn.Hi <= fn.Lo {
			t.Fatalf("function %d [%#x, %#x) overlaps or is empty", i, fn.Lo, fn.Hi)
		}
		cold = cold || strings.HasSuffix(fn.Name, ".cold)")
	}
	if !cold {
		t.Error("no .cold part among the functions")
	}
	addrs := sampleAddrs(t, path, 4)
	raw := llvmNames(t, path, addrs, false)
	agree, logged := 0, 0
	for i, a := range addrs {
		got := ""
		if k := sort.Search(len(fns), func(k int) bool { return fns[k].Hi > a }); k < len(fns) && fns[k].Lo <= a {
			got = fns[k].LinkageName
			if got == "" {
				got = fns[k].Name
			}
		}
		if got == raw[i] {
			agree++
		} else if logged < 20 {
			logged++
			t.Logf("0x%x: ours %q, llvm %q", a, got, raw[i])
		}
	}
	rate := float64(agree) / float64(len(addrs))
	t.Logf("%d addresses, outermost name agrees at %d (%.3f%%)", len(addrs), agree, 100*rate)
	if rate < 0.999 {
		t.Errorf("agreement %.3f%% below 99.9%%", 100*rate)
	}
}

// TestMixedDebugInfo links a unit built with -g and one without: DWARF answers for the
// first, the symbol table fills in the second, and symbols never override DWARF.
func TestMixedDebugInfo(t *testing.T) {
	need(t, "gcc")
	dir := t.TempDir()
	withG := `
int __attribute__((noinline)) dwarf_fn(int x) { return x * 3 + 1; }
`
	noG := `
int dwarf_fn(int);
int __attribute__((noinline)) sym_fn(int x) { return dwarf_fn(x) ^ 5; }
int main(int argc, char **argv) { (void)argv; return sym_fn(argc); }
`
	for name, text := range map[string]string{"a.c": withG, "b.c": noG} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dir, "gcc", "-O2", "-g", "-c", "a.c")
	run(t, dir, "gcc", "-O2", "-c", "b.c")
	run(t, dir, "gcc", "-o", "mixed", "a.o", "b.o")
	path := filepath.Join(dir, "mixed")

	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sections := map[string][]byte{}
	for _, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".debug_") {
			data, err := s.Data()
			if err != nil {
				t.Fatal(err)
			}
			sections[strings.TrimPrefix(s.Name, ".debug_")] = data
		}
	}
	b := index.NewBuilder()
	if _, err := dwarfsym.Load(sections, binary.LittleEndian, b, dwarfsym.Options{}); err != nil {
		t.Fatalf("dwarfsym: %v", err)
	}
	st, err := Load(f, b)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if ix.Fidelity() <= index.FidelitySymbols {
		t.Errorf("fidelity %v: DWARF should rank above symbols", ix.Fidelity())
	}
	syms, _ := f.Symbols()
	found := 0
	for _, s := range syms {
		if s.Name != "dwarf_fn" && s.Name != "sym_fn" && s.Name != "main" {
			continue
		}
		found++
		for a := s.Value; a < s.Value+s.Size; a++ {
			fr := ix.Lookup(a)
			if len(fr) == 0 {
				t.Fatalf("%s+0x%x: no frame", s.Name, a-s.Value)
			}
			last := fr[len(fr)-1]
			if last.Function != s.Name {
				t.Fatalf("%s+0x%x: function %q", s.Name, a-s.Value, last.Function)
			}
			hasLine := last.Line != 0
			if (s.Name == "dwarf_fn") != hasLine {
				t.Fatalf("%s+0x%x: line %d: lines must come from DWARF only, for a.c", s.Name, a-s.Value, last.Line)
			}
		}
	}
	if found != 3 {
		t.Fatalf("found %d of 3 functions in .symtab", found)
	}
	t.Logf("symbols %+v", st)
}

func TestNoSymbols(t *testing.T) {
	need(t, "gcc", "strip")
	dir := t.TempDir()
	path := build(t, dir, "gcc", "prog", map[string]string{"p.c": "int main(void) { return 0; }\n"}, "-O2", "-static")
	run(t, dir, "strip", path)
	ix, st := load(t, path)
	if st.Symbols != 0 || st.Source != "" || ix.Fidelity() != index.FidelityNone {
		t.Errorf("stats %+v fidelity %v, want nothing", st, ix.Fidelity())
	}
}

func TestNilArgs(t *testing.T) {
	if _, err := Load(nil, index.NewBuilder()); err == nil {
		t.Error("nil file: no error")
	}
}

// FuzzLoad feeds mutated ELF files: Load must return, with an error or not, never panic,
// and whatever it adds must build.
func FuzzLoad(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		b := index.NewBuilder()
		if _, err := Load(ef, b); err != nil {
			return
		}
		if _, err := b.Build(); err != nil {
			t.Fatalf("Build after Load: %v", err)
		}
	})
}

// fuzzSeeds makes small ELF files with symbol tables: an object file compiled here when gcc
// is there, and a hand-built minimal executable always.
func fuzzSeeds(f *testing.F) [][]byte {
	seeds := [][]byte{minimalELF()}
	if _, err := exec.LookPath("gcc"); err == nil {
		dir := f.TempDir()
		src := filepath.Join(dir, "s.c")
		obj := filepath.Join(dir, "s.o")
		if err := os.WriteFile(src, []byte("static int a(int x){return x+1;}\nint b(int x){return a(x)*2;}\nint c(int x) __attribute__((alias(\"b\")));\n"), 0o644); err == nil {
			if exec.CommandContext(f.Context(), "gcc", "-O2", "-c", "-o", obj, src).Run() == nil {
				if data, err := os.ReadFile(obj); err == nil {
					seeds = append(seeds, data)
				}
			}
		}
	}
	return seeds
}

// minimalELF builds an ELF64 executable with a .text section and a .symtab of three
// functions (one of size 0) and its string table.
func minimalELF() []byte {
	le := binary.LittleEndian
	shstr := []byte("\x00.text\x00.symtab\x00.strtab\x00.shstrtab\x00")
	strtab := []byte("\x00f1\x00f2\x00f3\x00")
	text := make([]byte, 64)
	var symtab bytes.Buffer
	sym := func(name uint32, info byte, shndx uint16, value, size uint64) {
		var b [24]byte
		le.PutUint32(b[0:], name)
		b[4] = info
		le.PutUint16(b[6:], shndx)
		le.PutUint64(b[8:], value)
		le.PutUint64(b[16:], size)
		symtab.Write(b[:])
	}
	sym(0, 0, 0, 0, 0)
	sym(1, byte(elf.STB_GLOBAL)<<4|byte(elf.STT_FUNC), 1, 0x1000, 16)
	sym(4, byte(elf.STB_GLOBAL)<<4|byte(elf.STT_FUNC), 1, 0x1010, 0)
	sym(7, byte(elf.STB_LOCAL)<<4|byte(elf.STT_FUNC), 1, 0x1020, 8)

	const ehsize, shentsize = 64, 64
	off := uint64(ehsize)
	textOff := off
	off += uint64(len(text))
	symOff := off
	off += uint64(symtab.Len())
	strOff := off
	off += uint64(len(strtab))
	shstrOff := off
	off += uint64(len(shstr))
	shOff := (off + 7) &^ 7

	var out bytes.Buffer
	var eh [ehsize]byte
	copy(eh[:], "\x7fELF")
	eh[4], eh[5], eh[6] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le.PutUint16(eh[16:], uint16(elf.ET_EXEC))
	le.PutUint16(eh[18:], uint16(elf.EM_X86_64))
	le.PutUint32(eh[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(eh[40:], shOff)
	le.PutUint16(eh[52:], ehsize)
	le.PutUint16(eh[58:], shentsize)
	le.PutUint16(eh[60:], 5)
	le.PutUint16(eh[62:], 4)
	out.Write(eh[:])
	out.Write(text)
	out.Write(symtab.Bytes())
	out.Write(strtab)
	out.Write(shstr)
	for uint64(out.Len()) < shOff {
		out.WriteByte(0)
	}
	sh := func(name uint32, typ elf.SectionType, flags elf.SectionFlag, addr, offset, size uint64, link, info uint32, entsize uint64) {
		var b [shentsize]byte
		le.PutUint32(b[0:], name)
		le.PutUint32(b[4:], uint32(typ))
		le.PutUint64(b[8:], uint64(flags))
		le.PutUint64(b[16:], addr)
		le.PutUint64(b[24:], offset)
		le.PutUint64(b[32:], size)
		le.PutUint32(b[40:], link)
		le.PutUint32(b[44:], info)
		le.PutUint64(b[48:], 1)
		le.PutUint64(b[56:], entsize)
		out.Write(b[:])
	}
	sh(0, elf.SHT_NULL, 0, 0, 0, 0, 0, 0, 0)
	sh(1, elf.SHT_PROGBITS, elf.SHF_ALLOC|elf.SHF_EXECINSTR, 0x1000, textOff, uint64(len(text)), 0, 0, 0)
	sh(7, elf.SHT_SYMTAB, 0, 0, symOff, uint64(symtab.Len()), 3, 3, 24)
	sh(15, elf.SHT_STRTAB, 0, 0, strOff, uint64(len(strtab)), 0, 0, 0)
	sh(23, elf.SHT_STRTAB, 0, 0, shstrOff, uint64(len(shstr)), 0, 0, 0)
	return out.Bytes()
}

func TestMinimalELF(t *testing.T) {
	ef, err := elf.NewFile(bytes.NewReader(minimalELF()))
	if err != nil {
		t.Fatal(err)
	}
	b := index.NewBuilder()
	st, err := Load(ef, b)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if st.Symbols != 3 || st.Source != ".symtab" {
		t.Errorf("stats %+v", st)
	}
	for _, c := range []struct {
		at   uint64
		want string
	}{{0x1000, "f1"}, {0x100f, "f1"}, {0x1010, "f2"}, {0x101f, "f2"}, {0x1020, "f3"}, {0x1027, "f3"}, {0x1028, ""}, {0x1040, ""}, {0xfff, ""}} {
		got := ""
		if fr := ix.Lookup(c.at); len(fr) > 0 {
			got = fr[0].Function
		}
		if got != c.want {
			t.Errorf("0x%x: %q, want %q", c.at, got, c.want)
		}
	}
}

// systemLibraries are large stripped C++ shared libraries Debian installs with the project's
// tools: real names from real builds, with .dynsym only.
var systemLibraries = []string{
	"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
	"/usr/lib/llvm-14/lib/libLLVM-14.so.1",
}

// TestSystemLibraries compares with llvm-symbolizer on installed libraries, sampling a few
// thousand code addresses of each.
func TestSystemLibraries(t *testing.T) {
	need(t, "llvm-symbolizer")
	if testing.Short() {
		t.Skip("short")
	}
	for _, path := range systemLibraries {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			ix, st := load(t, path)
			t.Logf("%+v", st)
			all := sampleAddrs(t, path, 64)
			// A fixed stride through the sample keeps llvm-symbolizer's run short.
			step := max(1, len(all)/6000)
			var addrs []uint64
			for i := 0; i < len(all); i += step {
				addrs = append(addrs, all[i])
			}
			compare(t, path, ix, addrs, 0.999)
		})
	}
}

// BenchmarkLoad loads the .dynsym of installed C++ libraries (libLLVM-14 has about 45,000
// symbols): demangling dominates.
func BenchmarkLoad(b *testing.B) {
	for _, path := range systemLibraries {
		f, err := elf.Open(path)
		if err != nil {
			continue
		}
		b.Run(filepath.Base(path), func(b *testing.B) {
			b.ReportAllocs()
			var st Stats
			for i := 0; i < b.N; i++ {
				if st, err = Load(f, index.NewBuilder()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(st.Symbols), "symbols")
		})
		f.Close()
	}
}

// TestAgainstLLVMSymbolizerARM64: an arm64 program's symbol table, with its mapping symbols
// ($x, $d) at the PLT and elsewhere, answers as llvm-symbolizer does.
func TestAgainstLLVMSymbolizerARM64(t *testing.T) {
	need(t, "aarch64-linux-gnu-gcc", "llvm-symbolizer")
	dir := t.TempDir()
	path := build(t, dir, "aarch64-linux-gnu-gcc", "prog", map[string]string{"prog.c": arm64Program}, "-O2")
	ix, st := load(t, path)
	if st.Source != ".symtab" || st.Symbols == 0 {
		t.Fatalf("stats %+v, want source .symtab and symbols", st)
	}
	addrs := sampleAddrs(t, path, 3)
	// The PLT, which only mapping symbols mark, at every instruction.
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if plt := f.Section(".plt"); plt != nil {
		for a := plt.Addr; a < plt.Addr+plt.Size; a += 4 {
			addrs = append(addrs, a)
		}
	} else {
		t.Fatal("no .plt in the arm64 program")
	}
	compare(t, path, ix, addrs, 0.999)
}

// arm64Program calls libc through the PLT and has static and global functions and data.
const arm64Program = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static const char table[] = "0123456789abcdef";
__attribute__((noinline)) static unsigned hash(const char *s) {
	unsigned h = 5381;
	while (*s) h = h * 33 + (unsigned char)*s++;
	return h;
}
__attribute__((noinline)) unsigned mix(unsigned a, unsigned b) { return (a ^ b) * 2654435761u; }
int main(int argc, char **argv) {
	char *buf = malloc(64);
	strcpy(buf, argc > 1 ? argv[1] : table);
	printf("%u\n", mix(hash(buf), (unsigned)strlen(buf)));
	free(buf);
	return 0;
}
`

func TestIsMappingSymbol(t *testing.T) {
	local := func(name string, typ elf.SymType) elf.Symbol {
		return elf.Symbol{Name: name, Info: elf.ST_INFO(elf.STB_LOCAL, typ)}
	}
	tests := []struct {
		m    elf.Machine
		s    elf.Symbol
		want bool
	}{
		{elf.EM_AARCH64, local("$x", elf.STT_NOTYPE), true},
		{elf.EM_AARCH64, local("$d", elf.STT_NOTYPE), true},
		{elf.EM_AARCH64, local("$x.12", elf.STT_NOTYPE), true},
		{elf.EM_ARM, local("$t", elf.STT_NOTYPE), true},
		{elf.EM_ARM, local("$a.0", elf.STT_NOTYPE), true},
		{elf.EM_AARCH64, local("$xyz", elf.STT_NOTYPE), false},
		{elf.EM_AARCH64, local("$x", elf.STT_FUNC), false},
		{elf.EM_AARCH64, elf.Symbol{Name: "$x", Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_NOTYPE)}, false},
		{elf.EM_X86_64, local("$x", elf.STT_NOTYPE), false},
		{elf.EM_AARCH64, local("main", elf.STT_NOTYPE), false},
	}
	for _, tt := range tests {
		if got := isMappingSymbol(tt.m, tt.s); got != tt.want {
			t.Errorf("isMappingSymbol(%v, %q %v) = %v, want %v", tt.m, tt.s.Name, elf.ST_TYPE(tt.s.Info), got, tt.want)
		}
	}
}
