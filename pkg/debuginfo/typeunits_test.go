package debuginfo_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/dwp"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/debuginfo/internal/llvmcompare"
)

// typeUnitSources is a C++ program of two units whose classes and templates -fdebug-types-section
// turns into type units: a class hierarchy with virtual functions, a class template used with
// two arguments, std::vector, and inlined members that give inline chains.
var typeUnitSources = map[string]string{
	"shapes.h": `
#include <vector>
namespace geo {
struct Shape {
	virtual ~Shape() {}
	virtual long area() const = 0;
};
struct Rect : Shape {
	long w, h;
	Rect(long w, long h) : w(w), h(h) {}
	long area() const override { return w * h; }
};
template <typename T> struct Box {
	T v;
	explicit Box(T x) : v(x) {}
	T twice() const { return v + v; }
	T scaled(T k) const { return twice() * k; }
};
template <typename T> inline T sum(const std::vector<T> &xs) {
	T t{};
	for (const T &x : xs) t += Box<T>(x).scaled(3);
	return t;
}
long total(const std::vector<Shape *> &shapes);
}
`,
	"a.cc": `
#include "shapes.h"
namespace geo {
__attribute__((noinline)) long total(const std::vector<Shape *> &shapes) {
	long t = 0;
	for (const Shape *s : shapes) t += Box<long>(s->area()).scaled(2);
	return t;
}
}
`,
	"b.cc": `
#include "shapes.h"
int main(int argc, char **) {
	std::vector<int> xs;
	std::vector<double> ds;
	for (int i = 0; i < argc * 4; i++) { xs.push_back(i); ds.push_back(i * 0.5); }
	geo::Rect r(argc, argc + 1);
	std::vector<geo::Shape *> shapes{&r};
	return int(geo::sum(xs) + geo::sum(ds) + geo::total(shapes));
}
`,
}

// TestSplitDWARFTypeUnitsLoose builds typeUnitSources with -gsplit-dwarf -fdebug-types-section
// and reads the .dwo files where the compiler left them. gcc 12 writes each type unit in an
// ELF section of its own, a .debug_info.dwo in DWARF 5 (the split compilation unit comes
// last, in one more) and a .debug_types.dwo in DWARF 4; clang puts DWARF 5 type units before
// the compilation unit in its one .debug_info.dwo. The engine must find every split unit, and
// answer at every address of every function what llvm-symbolizer answers from the same
// loose .dwo files (function chain, file:line and column of every frame), and what it answers
// itself from the same build packed by dwp.PackExecutable and by llvm-dwp.
func TestSplitDWARFTypeUnitsLoose(t *testing.T) {
	elfxtest.Need(t, "llvm-symbolizer")
	for _, c := range []struct {
		name    string
		cc      string
		dwarf   int
		section string // what the .dwo files hold several of
		flags   []string
	}{
		{"gcc-dwarf5", "g++", 5, ".debug_info.dwo", nil},
		{"gcc-dwarf4", "g++", 4, ".debug_types.dwo", nil},
		// Each section compressed on its own: the parts are decompressed, then joined.
		{"gcc-dwarf5-gz", "g++", 5, ".debug_info.dwo", []string{"-gz"}},
		{"clang-dwarf5", "clang++", 5, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			elfxtest.Need(t, c.cc)
			dir := t.TempDir()
			for name, text := range typeUnitSources {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// build compiles each unit apart, as a build system does, so that the .dwo files are
			// named after the objects.
			build := func(name string, flags ...string) string {
				var objs []string
				for _, src := range []string{"a.cc", "b.cc"} {
					obj := name + "-" + strings.TrimSuffix(src, ".cc") + ".o"
					runIn(t, dir, c.cc, append(append([]string{"-O2", fmt.Sprintf("-gdwarf-%d", c.dwarf), "-fdebug-types-section", "-c", "-o", obj, src}, c.flags...), flags...)...)
					objs = append(objs, obj)
				}
				runIn(t, dir, c.cc, append([]string{"-Wl,--build-id", "-o", name}, objs...)...)
				return filepath.Join(dir, name)
			}
			bin := build("prog", "-gsplit-dwarf")
			objs := []string{"prog-a.o", "prog-b.o"}
			if c.section != "" {
				for _, o := range objs {
					dwo := filepath.Join(dir, strings.TrimSuffix(o, ".o")+".dwo")
					if n, compressed := sectionCount(t, dwo, c.section); n < 2 || (compressed > 0) != slices.Contains(c.flags, "-gz") {
						t.Fatalf("%s: %d %s sections, %d compressed; the build no longer makes the layout this test is about", filepath.Base(dwo), n, c.section, compressed)
					} else {
						t.Logf("%s: %d %s sections, %d compressed", filepath.Base(dwo), n, c.section, compressed)
					}
				}
			}

			ix, info, err := debuginfo.OpenIndex(bin, debuginfo.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(info.DWARFPackage, "2 .dwo files") || info.SkeletonUnits != 2 || info.SkeletonsWithoutPackage != 0 ||
				info.DWARFVersion != c.dwarf || ix.Fidelity() != index.FidelityFullInlines {
				t.Fatalf("loose .dwo files: package %q, %d skeletons, %d without package, DWARF %d, fidelity %v, warnings %q",
					info.DWARFPackage, info.SkeletonUnits, info.SkeletonsWithoutPackage, info.DWARFVersion, ix.Fidelity(), info.Warnings)
			}
			addrs := functionAddrs(t, bin)
			loose, inlined := lookupAll(ix, addrs)
			ref, err := llvmcompare.Tool{}.Symbolize(t.Context(), bin, addrs)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := llvmcompare.Compare(addrs, loose, ref, llvmcompare.ModeFull, llvmcompare.Known...)
			if err != nil {
				t.Fatal(err)
			}
			if u := rep.Unexplained(); len(u) > 0 {
				// llvm-symbolizer 14 drops the inlined instances of a split unit whose
				// DW_AT_ranges is a DW_FORM_rnglistx (clang's DWARF 5), type units or not, and
				// finds them in the same code built without -gsplit-dwarf: where it answers
				// there as the engine answers here, the difference is llvm-symbolizer's.
				whole := build("whole")
				if !sameText(t, bin, whole) {
					t.Fatalf("%d differences from llvm-symbolizer, and the build without -gsplit-dwarf has other code to tell whose they are; first %+v", len(u), u[0])
				}
				wref, err := llvmcompare.Tool{}.Symbolize(t.Context(), whole, addrs)
				if err != nil {
					t.Fatal(err)
				}
				byAddr := make(map[uint64][]llvmcompare.Frame, len(addrs))
				for i, a := range addrs {
					byAddr[a] = wref[i]
				}
				unsplit := func(d llvmcompare.Diff) (string, bool) {
					w := byAddr[d.Addr]
					if sameExceptColumns(d.Ours, w) && !sameExceptColumns(d.Ref, w) {
						return "llvm-symbolizer answers so without -gsplit-dwarf (v14 drops split units' DW_FORM_rnglistx inlined ranges)", true
					}
					return "", false
				}
				if rep, err = llvmcompare.Compare(addrs, loose, ref, llvmcompare.ModeFull, append([]llvmcompare.Classifier{unsplit}, llvmcompare.Known...)...); err != nil {
					t.Fatal(err)
				}
			}
			if u := rep.Unexplained(); len(u) > 0 || inlined == 0 {
				t.Fatalf("%d of %d addresses differ from llvm-symbolizer reading the .dwo files (%d with inlined frames); first %+v",
					len(u), len(addrs), inlined, u[:min(len(u), 3)])
			}
			// Compare holds names and file:line; the columns are held here, wherever the two
			// agree on file:line (names may be spelled apart, as Known says).
			columns := 0
			for i, a := range addrs {
				if !sameLines(loose[i], ref[i]) {
					continue
				}
				for j := range loose[i] {
					if loose[i][j].Column != ref[i][j].Column {
						t.Fatalf("address %#x: frame %d column %d, llvm-symbolizer's %d (%s)", a, j, loose[i][j].Column, ref[i][j].Column, llvmcompare.Chain(ref[i]))
					}
				}
				columns++
			}

			// The same build packed: by our packer, and by llvm-dwp.
			packs := map[string]string{"ours": filepath.Join(dir, "ours.dwp")}
			var buf bytes.Buffer
			res, err := dwp.PackExecutable(bin, &buf)
			if err != nil {
				t.Fatal(err)
			}
			if res.Units != 2 || res.TypeUnits == 0 || len(res.Missing()) != 0 {
				t.Fatalf("packed %+v", res)
			}
			if err := os.WriteFile(packs["ours"], buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			// llvm-dwp 14 does not decompress SHF_COMPRESSED .dwo sections ("unit length is too
			// small"), type units or not.
			if _, err := exec.LookPath("llvm-dwp"); err == nil && !slices.Contains(c.flags, "-gz") {
				packs["llvm-dwp"] = filepath.Join(dir, "llvm.dwp")
				runIn(t, dir, "llvm-dwp", "-e", bin, "-o", packs["llvm-dwp"])
			}
			for who, p := range packs {
				pix, pinfo, err := debuginfo.OpenIndex(bin, debuginfo.Options{DWARFPackage: p, NoSearch: true})
				if err != nil {
					t.Fatal(err)
				}
				if pinfo.DWARFPackage != p || pinfo.SkeletonsWithoutPackage != 0 || pix.Fidelity() != index.FidelityFullInlines {
					t.Fatalf("%s package: %q, %d skeletons without it, fidelity %v, warnings %q", who, pinfo.DWARFPackage, pinfo.SkeletonsWithoutPackage, pix.Fidelity(), pinfo.Warnings)
				}
				packed, _ := lookupAll(pix, addrs)
				for i, a := range addrs {
					if !reflect.DeepEqual(packed[i], loose[i]) {
						t.Fatalf("address %#x: %s from %s package, %s from the .dwo files", a, llvmcompare.Chain(packed[i]), who, llvmcompare.Chain(loose[i]))
					}
				}
			}

			// A .dwo that cannot be read leaves its unit without functions, says which file it
			// is and why, and does not cost the other unit its functions.
			bDWO := filepath.Join(dir, "prog-b.dwo")
			good, err := os.ReadFile(bDWO)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []struct {
				name, want string
				damage     func()
			}{
				{"truncated", "extends past end of file", func() { must(t, os.WriteFile(bDWO, good[:len(good)/2], 0o644)) }},
				{"without .debug_info.dwo", "no split compilation unit among the 0 units", func() { runIn(t, dir, "objcopy", "--remove-section=.debug_info.dwo", bDWO) }},
			} {
				must(t, os.WriteFile(bDWO, good, 0o644))
				d.damage()
				_, info, err := debuginfo.OpenIndex(bin, debuginfo.Options{})
				if err != nil {
					t.Fatal(err)
				}
				warns := strings.Join(info.Warnings, "\n")
				if !strings.Contains(info.DWARFPackage, "1 .dwo files") || info.SkeletonsWithoutPackage != 1 || !strings.Contains(warns, bDWO) || !strings.Contains(warns, d.want) {
					t.Errorf("%s .dwo: package %q, %d skeletons without package, warnings %q; want one unit read and a warning naming %s: %q",
						d.name, info.DWARFPackage, info.SkeletonsWithoutPackage, info.Warnings, filepath.Base(bDWO), d.want)
				}
			}
			t.Logf("%d addresses (%d with inlined frames): %d chains and %d of %d file:line agree outright with llvm-symbolizer on the .dwo files, %d known differences %v, columns alike at %d; the same frames from %d packages",
				len(addrs), inlined, rep.ChainAgree, rep.LineAgree, rep.LineCompared, len(rep.Diffs), rep.Summary(), columns, len(packs))
		})
	}
}

// lookupAll returns ix's frames at every address, and how many have inlined frames.
func lookupAll(ix *index.Index, addrs []uint64) ([][]llvmcompare.Frame, int) {
	out := make([][]llvmcompare.Frame, len(addrs))
	inlined := 0
	for i, a := range addrs {
		fr := ix.Lookup(a)
		if len(fr) > 1 {
			inlined++
		}
		for _, f := range fr {
			out[i] = append(out[i], frameOf(f))
		}
	}
	return out, inlined
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

// sameExceptColumns says whether two answers name the same functions at the same lines.
func sameExceptColumns(a, b []llvmcompare.Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Function != b[i].Function || a[i].Line != b[i].Line || filepath.Clean(a[i].File) != filepath.Clean(b[i].File) {
			return false
		}
	}
	return true
}

// sameLines says whether two answers have as many frames, at the same file:line.
func sameLines(a, b []llvmcompare.Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Line != b[i].Line || filepath.Clean(a[i].File) != filepath.Clean(b[i].File) {
			return false
		}
	}
	return true
}

// sectionCount returns how many sections of path are called name, and how many of them are
// compressed.
func sectionCount(t *testing.T, path, name string) (n, compressed int) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Name == name {
			n++
			if s.Flags&elf.SHF_COMPRESSED != 0 {
				compressed++
			}
		}
	}
	return n, compressed
}

// sameText says whether two executables hold the same code at the same address.
func sameText(t *testing.T, a, b string) bool {
	t.Helper()
	text := func(path string) (uint64, []byte) {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		s := f.Section(".text")
		if s == nil {
			t.Fatalf("%s: no .text", path)
		}
		d, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		return s.Addr, d
	}
	aAddr, aText := text(a)
	bAddr, bText := text(b)
	return aAddr == bAddr && bytes.Equal(aText, bText)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runIn runs a tool in dir, where the sources are: the .dwo files are named relative to it.
func runIn(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
