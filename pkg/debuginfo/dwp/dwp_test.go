package dwp_test

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/dwp"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/debuginfo/internal/llvmcompare"
)

// sources is a small C++ program of two units: inlined functions, a template, and a type
// both units use, so that -fdebug-types-section makes one type unit per unit of one
// signature (the package keeps one).
var sources = map[string]string{
	"shape.h": `
struct Shape {
	int w, h;
	int area() const { return w * h; }
	int grow(int n) const { return (w + n) * (h + n); }
};
template <typename T> static inline T twice(T v) { return v + v; }
`,
	"a.cc": `
#include "shape.h"
int b_entry(int);
__attribute__((noinline)) int a_work(int n) {
	Shape s{n, n + 1};
	int t = 0;
	for (int i = 0; i < n; i++) t += twice(s.area()) + s.grow(i);
	return t;
}
int main(int argc, char **) { return a_work(argc) + b_entry(argc); }
`,
	"b.cc": `
#include "shape.h"
__attribute__((noinline)) long b_long(long n) { return twice(n) * 3; }
int b_entry(int n) { Shape s{n, 2 * n}; return s.area() + (int)b_long(s.grow(n)); }
`,
}

// split is one way to build the program with -gsplit-dwarf.
type split struct {
	name  string
	cc    string
	dwarf int
	types bool // -fdebug-types-section: type units in the .dwo files
}

var splits = []split{
	{"gcc-dwarf5", "g++", 5, false},
	{"gcc-dwarf4", "g++", 4, false},
	{"gcc-dwarf5-types", "g++", 5, true},
	{"gcc-dwarf4-types", "g++", 4, true},
	{"clang-dwarf5", "clang++", 5, false},
	{"clang-dwarf4", "clang++", 4, false},
	{"clang-dwarf5-types", "clang++", 5, true},
}

// build compiles the program in dir, each unit apart as a build system does (so the .dwo
// files are named after the objects), and returns the executable and the .dwo files.
func (s split) build(t *testing.T, dir string) (string, []string) {
	t.Helper()
	for name, text := range sources {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flags := []string{"-O2", "-g", fmt.Sprintf("-gdwarf-%d", s.dwarf), "-gsplit-dwarf"}
	if s.types {
		flags = append(flags, "-fdebug-types-section")
	}
	var objs, dwos []string
	for _, src := range []string{"a.cc", "b.cc"} {
		obj := strings.TrimSuffix(src, ".cc") + ".o"
		run(t, dir, s.cc, append(flags, "-c", "-o", obj, src)...)
		objs = append(objs, obj)
		dwos = append(dwos, filepath.Join(dir, strings.TrimSuffix(src, ".cc")+".dwo"))
	}
	run(t, dir, s.cc, append([]string{"-Wl,--build-id", "-o", "prog"}, objs...)...)
	return filepath.Join(dir, "prog"), dwos
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	// binutils' dwp opens relative .dwo names (clang's) from its working directory.
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// TestPackMatchesDwpTools packs each build's .dwo files with PackExecutable and holds the
// package to the tools': every section is byte for byte llvm-dwp's; with the .dwo files
// removed, the engine reads from it the same frames at every address of every function as
// from the package of the reference packer (binutils' dwp for GNU's DWARF 4 split units,
// llvm-dwp for DWARF 5 ones, which binutils' dwp 2.40 cannot pack), and llvm-symbolizer
// --dwp reads from it what it reads from the reference's package, which is what the engine
// reads.
func TestPackMatchesDwpTools(t *testing.T) {
	elfxtest.Need(t, "llvm-dwp", "llvm-symbolizer", "dwp")
	for _, s := range splits {
		t.Run(s.name, func(t *testing.T) {
			elfxtest.Need(t, s.cc)
			dir := t.TempDir()
			bin, dwos := s.build(t, dir)
			ours := filepath.Join(dir, "ours.dwp")
			var buf bytes.Buffer
			res, err := dwp.PackExecutable(bin, &buf)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(ours, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			if len(res.Skeletons) != 2 || res.Units != 2 || len(res.Missing()) != 0 || (res.TypeUnits > 0) != s.types {
				t.Fatalf("packed %+v", res)
			}

			llvmPkg := filepath.Join(dir, "llvm.dwp")
			run(t, dir, "llvm-dwp", "-e", bin, "-o", llvmPkg)
			secs := sameSections(t, ours, llvmPkg)
			ref := llvmPkg
			if s.dwarf == 4 {
				ref = filepath.Join(dir, "binutils.dwp")
				run(t, dir, "dwp", "-e", bin, "-o", ref)
			}
			for _, d := range dwos {
				if err := os.Remove(d); err != nil {
					t.Fatal(err)
				}
			}

			addrs := functionAddrs(t, bin)
			got, inlined := engineFrames(t, bin, ours, addrs)
			want, _ := engineFrames(t, bin, ref, addrs)
			for i, a := range addrs {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("address %#x: %s from our package, %s from %s's", a, llvmcompare.Chain(got[i]), llvmcompare.Chain(want[i]), filepath.Base(ref))
				}
			}
			llvmOurs, err := llvmcompare.Tool{DWP: ours}.Symbolize(t.Context(), bin, addrs)
			if err != nil {
				t.Fatal(err)
			}
			llvmRef, err := llvmcompare.Tool{DWP: ref}.Symbolize(t.Context(), bin, addrs)
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range addrs {
				if !reflect.DeepEqual(llvmOurs[i], llvmRef[i]) {
					t.Fatalf("address %#x: llvm-symbolizer reads %s from our package, %s from %s's", a, llvmcompare.Chain(llvmOurs[i]), llvmcompare.Chain(llvmRef[i]), filepath.Base(ref))
				}
			}
			rep, err := llvmcompare.Compare(addrs, got, llvmOurs, llvmcompare.ModeFull, llvmcompare.Known...)
			if err != nil {
				t.Fatal(err)
			}
			if u := rep.Unexplained(); len(u) > 0 || inlined == 0 {
				t.Fatalf("%d of %d addresses differ between the engine and llvm-symbolizer on our package (%d with inlined frames); first %+v", len(u), len(addrs), inlined, u[:min(len(u), 3)])
			}
			t.Logf("%d sections as llvm-dwp writes them; %d addresses (%d with inlined frames) alike from our package and %s's, in the engine and in llvm-symbolizer; %d chains agree outright between them, %d known differences",
				secs, len(addrs), inlined, filepath.Base(ref), rep.ChainAgree, len(addrs)-rep.ChainAgree)
		})
	}
}

// sameSections requires the .debug_* sections of the two packages to hold the same bytes and
// returns how many there are.
func sameSections(t *testing.T, ours, theirs string) int {
	t.Helper()
	read := func(path string) map[string][]byte {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out := map[string][]byte{}
		for _, s := range f.Sections {
			if strings.HasPrefix(s.Name, ".debug_") && s.Size > 0 {
				if out[s.Name], err = s.Data(); err != nil {
					t.Fatal(err)
				}
			}
		}
		return out
	}
	a, b := read(ours), read(theirs)
	for name := range b {
		if _, ok := a[name]; !ok {
			t.Errorf("%s: llvm-dwp writes it, we do not", name)
		}
	}
	for name, data := range a {
		if !bytes.Equal(data, b[name]) {
			t.Errorf("%s: %d bytes, llvm-dwp's %d differ", name, len(data), len(b[name]))
		}
	}
	return len(a)
}

// functionAddrs returns every address of every function of bin.
func functionAddrs(t *testing.T, bin string) []uint64 {
	t.Helper()
	addrs, err := llvmcompare.FunctionAddrs(bin)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// engineFrames are the engine's answers on bin with the DWARF package pkg, and how many of
// them have inlined frames. The package must give the engine all of its split units.
func engineFrames(t *testing.T, bin, pkg string, addrs []uint64) ([][]llvmcompare.Frame, int) {
	t.Helper()
	ix, info, err := debuginfo.OpenIndex(bin, debuginfo.Options{DWARFPackage: pkg, NoSearch: true})
	if err != nil {
		t.Fatal(err)
	}
	if info.DWARFPackage != pkg || info.SkeletonsWithoutPackage != 0 || ix.Fidelity() != index.FidelityFullInlines {
		t.Fatalf("%s: package %q, %d skeletons without it, fidelity %v, warnings %q", filepath.Base(pkg), info.DWARFPackage, info.SkeletonsWithoutPackage, ix.Fidelity(), info.Warnings)
	}
	out := make([][]llvmcompare.Frame, len(addrs))
	inlined := 0
	for i, a := range addrs {
		fr := ix.Lookup(a)
		if len(fr) > 1 {
			inlined++
		}
		for _, f := range fr {
			out[i] = append(out[i], llvmcompare.Frame{Function: f.Function, LinkageName: f.LinkageName, File: f.File, Line: f.Line, Column: f.Column})
		}
	}
	return out, inlined
}

// TestPackExecutableProblems: what PackExecutable does with .dwo files that are missing, of
// another build, damaged, or of the other generation, and with input it cannot pack at all.
func TestPackExecutableProblems(t *testing.T) {
	elfxtest.Need(t, "g++")
	s := split{"gcc-dwarf5", "g++", 5, false}
	dir := t.TempDir()
	bin, dwos := s.build(t, dir)
	// Another build of the same sources, DWARF 4: its .dwo files have other DWO IDs.
	other := t.TempDir()
	_, otherDwos := split{"gcc-dwarf4", "g++", 4, false}.build(t, other)
	aDWO, bDWO := dwos[0], dwos[1]
	keep := func(path string) func() {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	restoreB := keep(bDWO)
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T)
		units   int    // in the package; 0: PackExecutable fails
		problem string // of b's skeleton, or of the failure
	}{
		{"all there", func(t *testing.T) {}, 2, ""},
		{"missing", func(t *testing.T) { must(t, os.Remove(bDWO)) }, 1, "b.dwo: not found"},
		{"another build", func(t *testing.T) { copyFile(t, otherDwos[1], bDWO) }, 1, "a .dwo of another build"},
		{"truncated", func(t *testing.T) { b := readFile(t, bDWO); must(t, os.WriteFile(bDWO, b[:len(b)/2], 0o644)) }, 1, "b.dwo"},
		{"not ELF", func(t *testing.T) { must(t, os.WriteFile(bDWO, []byte("int main;"), 0o644)) }, 1, "b.dwo"},
		{"a package", func(t *testing.T) {
			run(t, dir, "llvm-dwp", "-e", bin, "-o", "pkg.dwp")
			copyFile(t, filepath.Join(dir, "pkg.dwp"), bDWO)
		}, 1, "DWARF package already"},
		{"none", func(t *testing.T) { must(t, os.Remove(aDWO)); must(t, os.Remove(bDWO)) }, 0, "none of the .dwo files of its 2 skeleton units"},
	} {
		t.Run(c.name, func(t *testing.T) {
			restore := keep(aDWO)
			defer restore()
			defer restoreB()
			if c.name == "a package" {
				elfxtest.Need(t, "llvm-dwp")
			}
			c.prepare(t)
			var buf bytes.Buffer
			res, err := dwp.PackExecutable(bin, &buf)
			if c.units == 0 {
				if err == nil || !strings.Contains(err.Error(), c.problem) || buf.Len() != 0 {
					t.Fatalf("err %v, %d bytes written; want %q and nothing", err, buf.Len(), c.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			miss := res.Missing()
			if res.Units != c.units || len(res.Skeletons) != 2 || len(miss) != 2-c.units {
				t.Fatalf("%d units packed of %d skeletons, missing %+v", res.Units, len(res.Skeletons), miss)
			}
			if c.problem != "" && (miss[0].Path != bDWO || !strings.Contains(miss[0].Err.Error(), c.problem)) {
				t.Fatalf("missing %s: %v; want %s: %q", miss[0].Path, miss[0].Err, bDWO, c.problem)
			}
			for _, m := range miss {
				t.Logf("left out: %v", m.Err)
			}
			if units, ok, err := debuginfo.DWARFPackageUnits(writeTemp(t, buf.Bytes()), elfx.Limits{}); err != nil || !ok || units != c.units {
				t.Fatalf("the package reads as %d units, %v, %v", units, ok, err)
			}
		})
	}

	if _, err := dwp.PackExecutable(filepath.Join(dir, "a.o"), &bytes.Buffer{}); err == nil {
		t.Error("an object file's skeleton, whose DWARF is not relocated, was read")
	}
	for _, dw := range []string{"-gdwarf-4", "-gdwarf-5"} {
		whole := filepath.Join(dir, "whole"+dw)
		run(t, dir, "g++", "-g", dw, "-O2", "-o", whole, "a.cc", "b.cc")
		if _, err := dwp.PackExecutable(whole, &bytes.Buffer{}); !errors.Is(err, dwp.ErrNoSplitUnits) {
			t.Errorf("a build without -gsplit-dwarf (%s): %v, want ErrNoSplitUnits", dw, err)
		}
	}

	// The builder: the same unit twice is one, a different unit of one DWO ID and the other
	// generation are refused, naming the files.
	a := readObject(t, aDWO)
	b := dwp.NewBuilder()
	if added, err := b.Add(a); !added || err != nil {
		t.Fatal(added, err)
	}
	if added, err := b.Add(readObject(t, aDWO)); added || err != nil {
		t.Errorf("the same .dwo again: added %v, %v; want skipped", added, err)
	}
	changed := readFile(t, aDWO)
	i := bytes.Index(changed, []byte("a_work"))
	if i < 0 {
		t.Fatal("no a_work in a.dwo")
	}
	changed[i] = 'A'
	if _, err := b.Add(readObjectBytes(t, "changed.dwo", changed)); err == nil || !strings.Contains(err.Error(), "changed.dwo") || !strings.Contains(err.Error(), "conflicting") {
		t.Errorf("a different unit of the same DWO ID: %v", err)
	}
	if _, err := b.Add(readObject(t, otherDwos[0])); err == nil || !strings.Contains(err.Error(), "one unit index version") {
		t.Errorf("a GNU DWARF 4 unit beside DWARF 5 ones: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return b
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	must(t, os.WriteFile(to, readFile(t, from), 0o644))
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "p.dwp")
	must(t, os.WriteFile(p, b, 0o644))
	return p
}

func readObject(t *testing.T, path string) *dwp.Object {
	t.Helper()
	return readObjectBytes(t, path, readFile(t, path))
}

func readObjectBytes(t *testing.T, name string, b []byte) *dwp.Object {
	t.Helper()
	o, err := dwp.ReadObject(name, bytes.NewReader(b), int64(len(b)))
	must(t, err)
	return o
}
