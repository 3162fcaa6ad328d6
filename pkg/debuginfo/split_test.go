package debuginfo_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/debuginfo/internal/llvmcompare"
)

// TestSplitDWARFPackage builds a -gsplit-dwarf program (DWARF 5: skeleton units in the
// executable, functions and inlined instances in .dwo files), packs the .dwo files into
// <binary>.dwp with llvm-dwp (binutils' dwp 2.40 crashes on DWARF 5) and removes them, so
// that the package is the only place the functions are. Every address of every function must
// resolve as llvm-symbolizer resolves it from the same package. Without the package, the
// skeletons' line tables still answer and a warning says what is missing.
func TestSplitDWARFPackage(t *testing.T) {
	elfxtest.Need(t, "g++", "llvm-dwp", "llvm-symbolizer")
	dir := t.TempDir()
	for name, text := range dwzSources {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "a")
	obj := filepath.Join(dir, "a.o")
	elfxtest.Run(t, "g++", "-O2", "-gdwarf-5", "-gsplit-dwarf", "-c", "-o", obj, filepath.Join(dir, "a.cc"))
	elfxtest.Run(t, "g++", "-o", bin, obj)

	// The .dwo files where the compiler wrote them, unpacked.
	ix, info, err := debuginfo.OpenIndex(bin, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info.DWARFPackage, ".dwo files") || ix.Fidelity() != index.FidelityFullInlines {
		t.Fatalf(".dwo files: package %q, fidelity %v, warnings %q", info.DWARFPackage, ix.Fidelity(), info.Warnings)
	}
	n := agreesWithLLVM(t, bin, ix)
	t.Logf("%d addresses agree with llvm-symbolizer reading the .dwo files", n)
	// A server does not follow the skeletons' names to files on its own disk.
	if ix, info, err := debuginfo.OpenIndex(bin, debuginfo.Options{NoSearch: true}); err != nil {
		t.Fatal(err)
	} else if info.DWARFPackage != "" || info.SkeletonsWithoutPackage == 0 || ix.Fidelity() == index.FidelityFullInlines {
		t.Fatalf("NoSearch read the .dwo files: package %q, %d skeletons without, fidelity %v", info.DWARFPackage, info.SkeletonsWithoutPackage, ix.Fidelity())
	}

	elfxtest.Run(t, "llvm-dwp", "-e", bin, "-o", bin+".dwp")
	dwos, err := filepath.Glob(filepath.Join(dir, "*.dwo"))
	if err != nil || len(dwos) == 0 {
		t.Fatalf("no .dwo files (%v)", err)
	}
	for _, d := range dwos {
		if err := os.Remove(d); err != nil {
			t.Fatal(err)
		}
	}

	ix, info, err = debuginfo.OpenIndex(bin, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if info.DWARFPackage != bin+".dwp" || info.DWARFError != "" || ix.Fidelity() != index.FidelityFullInlines {
		t.Fatalf("package %q, DWARF error %q, fidelity %v, warnings %q", info.DWARFPackage, info.DWARFError, ix.Fidelity(), info.Warnings)
	}
	n = agreesWithLLVM(t, bin, ix)
	t.Logf("%d addresses agree with llvm-symbolizer reading the same .dwp", n)

	if err := os.Rename(bin+".dwp", bin+".moved"); err != nil {
		t.Fatal(err)
	}
	ix, info, err = debuginfo.OpenIndex(bin, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ix.Fidelity() != index.FidelityLines || !strings.Contains(strings.Join(info.Warnings, "\n"), "skeleton units whose functions were not read") {
		t.Errorf("without the package: fidelity %v, warnings %q", ix.Fidelity(), info.Warnings)
	}
	ix, info, err = debuginfo.OpenIndex(bin, debuginfo.Options{DWARFPackage: bin + ".moved"})
	if err != nil || info.DWARFPackage != bin+".moved" || ix.Fidelity() != index.FidelityFullInlines {
		t.Errorf("package given: %v, package %q, fidelity %v", err, info.DWARFPackage, ix.Fidelity())
	}

}

// TestSplitDWARF4 is TestSplitDWARFPackage for GNU's DWARF 4 split units (gcc -gdwarf-4
// -gsplit-dwarf: DW_AT_GNU_dwo_name skeletons, DW_FORM_GNU_addr_index/str_index, range lists
// in the executable), read from the unpacked .dwo files and from a package made by binutils'
// dwp (unit index version 2), each as llvm-symbolizer reads them.
func TestSplitDWARF4(t *testing.T) {
	elfxtest.Need(t, "g++", "dwp", "llvm-symbolizer")
	dir := t.TempDir()
	for name, text := range dwzSources {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "a4")
	var objs []string
	for _, src := range []string{"a.cc", "b.cc"} {
		obj := filepath.Join(dir, strings.TrimSuffix(src, ".cc")+".o")
		elfxtest.Run(t, "g++", "-O2", "-gdwarf-4", "-gsplit-dwarf", "-c", "-o", obj, filepath.Join(dir, src))
		objs = append(objs, obj)
	}
	// Two units (b.cc's main renamed away), so that the second unit's address and range list
	// bases are not zero.
	elfxtest.Run(t, "objcopy", "--redefine-sym", "main=b_main", objs[1])
	elfxtest.Run(t, "g++", append([]string{"-o", bin}, objs...)...)

	ix, info, err := debuginfo.OpenIndex(bin, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info.DWARFPackage, "2 .dwo files") || info.DWARFVersion != 4 || ix.Fidelity() != index.FidelityFullInlines {
		t.Fatalf(".dwo files: package %q, DWARF %d, fidelity %v, warnings %q", info.DWARFPackage, info.DWARFVersion, ix.Fidelity(), info.Warnings)
	}
	n := agreesWithLLVM(t, bin, ix)
	t.Logf("%d addresses agree with llvm-symbolizer reading the .dwo files", n)

	// b.dwo of another build (b.cc at -O1) where the skeleton unit looks: named as such,
	// and its unit counted without functions.
	bdwo := filepath.Join(dir, "b.dwo")
	orig, err := os.ReadFile(bdwo)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "b.o")
	elfxtest.Run(t, "g++", "-O1", "-gdwarf-4", "-gsplit-dwarf", "-c", "-o", other, filepath.Join(dir, "b.cc"))
	stale, err := os.ReadFile(strings.TrimSuffix(other, ".o") + ".dwo")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bdwo, stale, 0o644); err != nil {
		t.Fatal(err)
	}
	_, info, err = debuginfo.OpenIndex(bin, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	warnings := strings.Join(info.Warnings, "\n")
	if info.SkeletonsWithoutPackage != 1 || !strings.Contains(warnings, bdwo+": holds DWO ID") ||
		!strings.Contains(warnings, "a .dwo file of another build") ||
		!strings.Contains(warnings, "1 skeleton units whose functions were not read (no DWARF package") ||
		!strings.Contains(warnings, "the .dwo files of 1 of them were found but not read") {
		t.Errorf("a .dwo of another build: %d skeletons without package, warnings %q", info.SkeletonsWithoutPackage, info.Warnings)
	}
	if err := os.WriteFile(bdwo, orig, 0o644); err != nil {
		t.Fatal(err)
	}

	elfxtest.Run(t, "dwp", "-e", bin, "-o", bin+".dwp")
	for _, o := range objs {
		if err := os.Remove(strings.TrimSuffix(o, ".o") + ".dwo"); err != nil {
			t.Fatal(err)
		}
	}
	ix, info, err = debuginfo.OpenIndex(bin, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if info.DWARFPackage != bin+".dwp" || info.DWARFError != "" || ix.Fidelity() != index.FidelityFullInlines {
		t.Fatalf("package %q, DWARF error %q, fidelity %v, warnings %q", info.DWARFPackage, info.DWARFError, ix.Fidelity(), info.Warnings)
	}
	n = agreesWithLLVM(t, bin, ix)
	t.Logf("%d addresses agree with llvm-symbolizer reading the same version 2 .dwp", n)
	if info.SkeletonUnits != 2 || info.SkeletonsWithoutPackage != 0 {
		t.Errorf("skeleton units %d, %d without package; want 2, 0", info.SkeletonUnits, info.SkeletonsWithoutPackage)
	}
	for _, c := range []struct {
		path  string
		ok    bool
		units int
	}{{bin + ".dwp", true, 2}, {bin, false, 0}} {
		units, ok, err := debuginfo.DWARFPackageUnits(c.path, elfx.Limits{})
		if err != nil || ok != c.ok || units != c.units {
			t.Errorf("DWARFPackageUnits(%s) = %d, %v, %v; want %d, %v", filepath.Base(c.path), units, ok, err, c.units, c.ok)
		}
	}

	if err := os.Remove(bin + ".dwp"); err != nil {
		t.Fatal(err)
	}
	ix, info, err = debuginfo.OpenIndex(bin, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if info.SkeletonUnits != 2 || info.SkeletonsWithoutPackage != 2 {
		t.Errorf("without package: skeleton units %d, %d without package; want 2, 2", info.SkeletonUnits, info.SkeletonsWithoutPackage)
	}
	if ix.Fidelity() != index.FidelityLines || !strings.Contains(strings.Join(info.Warnings, "\n"), "2 skeleton units whose functions were not read") {
		t.Errorf("without package and .dwo files: fidelity %v, warnings %q", ix.Fidelity(), info.Warnings)
	}
}

// TestSplitDWARF4Clang is TestSplitDWARF4 for clang's DWARF 4 split units (clang -gdwarf-4
// -gsplit-dwarf writes the GNU extension too, from another compiler's hands), read from the
// loose .dwo files where clang wrote them, and without them.
func TestSplitDWARF4Clang(t *testing.T) {
	elfxtest.Need(t, "clang++", "llvm-symbolizer")
	dir := t.TempDir()
	for name, text := range dwzSources {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "c4")
	var objs []string
	for _, src := range []string{"a.cc", "b.cc"} {
		obj := filepath.Join(dir, "clang-"+strings.TrimSuffix(src, ".cc")+".o")
		elfxtest.Run(t, "clang++", "-O2", "-gdwarf-4", "-gsplit-dwarf", "-c", "-o", obj, filepath.Join(dir, src))
		objs = append(objs, obj)
	}
	elfxtest.Run(t, "objcopy", "--redefine-sym", "main=b_main", objs[1])
	elfxtest.Run(t, "clang++", append([]string{"-Wl,--build-id", "-o", bin}, objs...)...)

	ix, info, err := debuginfo.OpenIndex(bin, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info.DWARFPackage, "2 .dwo files") || info.DWARFVersion != 4 || info.SkeletonUnits != 2 || ix.Fidelity() != index.FidelityFullInlines {
		t.Fatalf(".dwo files: package %q, DWARF %d, %d skeletons, fidelity %v, warnings %q", info.DWARFPackage, info.DWARFVersion, info.SkeletonUnits, ix.Fidelity(), info.Warnings)
	}
	n := agreesWithLLVM(t, bin, ix)
	t.Logf("%d addresses agree with llvm-symbolizer reading clang's .dwo files", n)

	for _, o := range objs {
		if err := os.Remove(strings.TrimSuffix(o, ".o") + ".dwo"); err != nil {
			t.Fatal(err)
		}
	}
	ix, info, err = debuginfo.OpenIndex(bin, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ix.Fidelity() != index.FidelityLines || info.SkeletonsWithoutPackage != 2 {
		t.Errorf("without the .dwo files: fidelity %v, %d skeletons without package, warnings %q", ix.Fidelity(), info.SkeletonsWithoutPackage, info.Warnings)
	}
}

// agreesWithLLVM requires every address of every function of bin to resolve in ix as
// llvm-symbolizer resolves it, with inlined frames somewhere; it returns the number of
// addresses.
func agreesWithLLVM(t *testing.T, bin string, ix *index.Index) int {
	t.Helper()
	addrs := functionAddrs(t, bin)
	ours, inlined := lookupAll(ix, addrs)
	ref, err := llvmcompare.Tool{}.Symbolize(t.Context(), bin, addrs)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := llvmcompare.Compare(addrs, ours, ref, llvmcompare.ModeFull, llvmcompare.Known...)
	if err != nil {
		t.Fatal(err)
	}
	if u := rep.Unexplained(); len(u) > 0 || inlined == 0 {
		t.Fatalf("%d of %d addresses differ from llvm-symbolizer (%d with inlined frames), first %+v", len(u), len(addrs), inlined, u[:min(len(u), 3)])
	}
	return len(addrs)
}
