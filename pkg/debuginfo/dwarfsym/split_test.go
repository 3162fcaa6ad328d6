package dwarfsym

import (
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// splitBuild compiles srcs with -gsplit-dwarf (DWARF 5) into dir/name, packs its .dwo files
// into name.dwp with llvm-dwp, and returns the binary and the package's sections.
func splitBuild(t testing.TB, dir, name, cc string, srcs []string, flags ...string) (string, map[string][]byte) {
	t.Helper()
	needTools(t, cc, "llvm-dwp")
	bin := testBinary{name: name, cc: cc, srcs: srcs, flags: append([]string{"-gdwarf-5", "-gsplit-dwarf"}, flags...)}.build(t, dir)
	if out, err := exec.CommandContext(t.Context(), "llvm-dwp", "-e", bin, "-o", bin+".dwp").CombinedOutput(); err != nil {
		t.Fatalf("llvm-dwp: %v\n%s", err, out)
	}
	secs, f, _ := elfSections(t, bin+".dwp")
	f.Close()
	return bin, secs
}

// TestLoadPackage: a -gsplit-dwarf build read with its DWARF package gives the index of the same
// program built without -gsplit-dwarf, at every address of every function; without the package
// only the skeletons' line tables are read.
func TestLoadPackage(t *testing.T) {
	dir := t.TempDir()
	for _, cc := range []string{"gcc", "clang"} {
		if _, err := exec.LookPath(cc); err != nil {
			continue
		}
		srcs := []string{"main.c", "helper.c"}
		bin, pkgSecs := splitBuild(t, dir, cc+"-split", cc, srcs, "-O2")
		whole := testBinary{name: cc + "-whole", cc: cc, srcs: srcs, flags: []string{"-O2", "-gdwarf-5"}}.build(t, dir)
		pkg, err := NewPackage(pkgSecs, binary.LittleEndian)
		if err != nil {
			t.Fatal(err)
		}
		got, st := loadIndex(t, bin, Options{Package: pkg})
		want, _ := loadIndex(t, whole, Options{})
		if st.SplitUnits == 0 || st.SkeletonsWithoutPackage != 0 || !st.HasInlines {
			t.Fatalf("%s: stats %+v", cc, st)
		}
		_, f, _ := elfSections(t, whole)
		funcs := funcSymbols(t, f)
		f.Close()
		n := 0
		for _, fn := range funcs {
			for a := fn.addr; a < fn.end; a++ {
				if g, w := got.Lookup(a), want.Lookup(a); !reflect.DeepEqual(g, w) {
					t.Fatalf("%s at %#x:\n got  %+v\n want %+v (without -gsplit-dwarf)", cc, a, g, w)
				}
				n++
			}
		}
		// The same from the unpacked .dwo files, which gcc writes beside the output as
		// OUTPUT-SOURCE.dwo (clang 14, compiling and linking in one step, leaves them with
		// its temporary objects).
		dwos, err := filepath.Glob(bin + "-*.dwo")
		if cc != "gcc" {
			dwos = nil
		} else if err != nil || len(dwos) != len(srcs) {
			t.Fatalf("%s: .dwo files %v (%v)", cc, dwos, err)
		}
		var objs []map[string][]byte
		for _, d := range dwos {
			secs, f, _ := elfSections(t, d)
			f.Close()
			objs = append(objs, secs)
		}
		fromObjs, err := NewPackageFromObjects(objs, binary.LittleEndian)
		if err != nil {
			t.Fatal(err)
		}
		var got2 *index.Index
		if len(objs) > 0 {
			got2, _ = loadIndex(t, bin, Options{Package: fromObjs})
		}
		for _, fn := range funcs {
			if got2 == nil {
				break
			}
			for a := fn.addr; a < fn.end; a++ {
				if g, w := got2.Lookup(a), want.Lookup(a); !reflect.DeepEqual(g, w) {
					t.Fatalf("%s from .dwo files at %#x:\n got  %+v\n want %+v", cc, a, g, w)
				}
			}
		}
		lines, lst := loadIndex(t, bin, Options{})
		if lst.SkeletonsWithoutPackage != lst.Units || lst.Functions != 0 || lines.Fidelity() != index.FidelityLines {
			t.Errorf("%s without the package: stats %+v, fidelity %v", cc, lst, lines.Fidelity())
		}
		t.Logf("%s: %d addresses as without -gsplit-dwarf; %d split units, %d functions, %d inlined instances", cc, n, st.Units, st.Functions, st.InlinedInstances)
	}
}

func FuzzLoadPackage(f *testing.F) {
	dir := f.TempDir()
	for _, cc := range []string{"gcc", "clang"} {
		if _, err := exec.LookPath(cc); err != nil {
			continue
		}
		bin, pkg := splitBuild(f, dir, cc+"-split", cc, []string{"helper.c"}, "-O2", "-shared", "-fPIC")
		secs, ef, _ := elfSections(f, bin)
		ef.Close()
		f.Add(secs["info"], secs["abbrev"], secs["line"], secs["str"], secs["line_str"], secs["addr"], secs["rnglists"],
			pkg["info.dwo"], pkg["abbrev.dwo"], pkg["str.dwo"], pkg["str_offsets.dwo"], pkg["rnglists.dwo"], pkg["cu_index"])
	}
	f.Fuzz(func(t *testing.T, info, abbrev, line, str, lineStr, addr, rnglists, pInfo, pAbbrev, pStr, pStrOffsets, pRnglists, pIndex []byte) {
		pkg, err := NewPackage(map[string][]byte{"info.dwo": pInfo, "abbrev.dwo": pAbbrev, "str.dwo": pStr,
			"str_offsets.dwo": pStrOffsets, "rnglists.dwo": pRnglists, "cu_index": pIndex}, binary.LittleEndian)
		if err != nil {
			return
		}
		secs := map[string][]byte{"info": info, "abbrev": abbrev, "line": line, "str": str, "line_str": lineStr, "addr": addr, "rnglists": rnglists}
		b := index.NewBuilder()
		if _, err := Load(secs, binary.LittleEndian, b, Options{Workers: 2, Package: pkg}); err != nil {
			return
		}
		if ix, err := b.Build(); err == nil {
			ix.Lookup(0x1000)
		}
	})
}
