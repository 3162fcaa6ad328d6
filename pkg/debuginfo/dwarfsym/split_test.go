package dwarfsym

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// splitBuild compiles srcs with -gsplit-dwarf and DWARF version dw into dir/name, packs its
// .dwo files into name.dwp and returns the binary and the package's sections. DWARF 5 is
// packed with llvm-dwp (binutils' dwp 2.40 crashes on it), DWARF 4 (GNU's split units) with
// binutils' dwp, which writes GNU's unit index version 2.
func splitBuild(t testing.TB, dir, name, cc string, dw int, srcs []string, flags ...string) (string, map[string][]byte) {
	t.Helper()
	packer := "llvm-dwp"
	if dw == 4 {
		packer = "dwp"
	}
	needTools(t, cc, packer)
	bin := testBinary{name: name, cc: cc, srcs: srcs, flags: append([]string{fmt.Sprintf("-gdwarf-%d", dw), "-gsplit-dwarf"}, flags...)}.build(t, dir)
	cmd := exec.CommandContext(t.Context(), packer, "-e", bin, "-o", bin+".dwp")
	// binutils' dwp opens relative .dwo names (clang's DWARF 4 ones) from its working directory.
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", packer, err, out)
	}
	secs, f, _ := elfSections(t, bin+".dwp")
	f.Close()
	return bin, secs
}

// TestLoadPackage: a -gsplit-dwarf build read with its DWARF package gives the index of the same
// program built without -gsplit-dwarf, at every address of every function; without the package
// only the skeletons' line tables are read. DWARF 5 split units and GNU's DWARF 4 ones alike.
func TestLoadPackage(t *testing.T) {
	for _, dw := range []int{4, 5} {
		for _, cc := range []string{"gcc", "clang"} {
			if _, err := exec.LookPath(cc); err != nil {
				continue
			}
			t.Run(fmt.Sprintf("%s-dwarf%d", cc, dw), func(t *testing.T) { testLoadPackage(t, cc, dw) })
		}
	}
}

func testLoadPackage(t *testing.T, cc string, dw int) {
	dir := t.TempDir()
	srcs := []string{"main.c", "helper.c"}
	bin, pkgSecs := splitBuild(t, dir, cc+"-split", cc, dw, srcs, "-O2")
	whole := testBinary{name: cc + "-whole", cc: cc, srcs: srcs, flags: []string{"-O2", fmt.Sprintf("-gdwarf-%d", dw)}}.build(t, dir)
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

func FuzzLoadPackage(f *testing.F) {
	dir := f.TempDir()
	for _, dw := range []int{4, 5} {
		for _, cc := range []string{"gcc", "clang"} {
			if _, err := exec.LookPath(cc); err != nil {
				continue
			}
			bin, pkg := splitBuild(f, dir, fmt.Sprintf("%s-split%d", cc, dw), cc, dw, []string{"helper.c"}, "-O2", "-shared", "-fPIC")
			secs, ef, _ := elfSections(f, bin)
			ef.Close()
			f.Add(secs["info"], secs["abbrev"], secs["line"], secs["str"], secs["line_str"], secs["addr"], secs["rnglists"], secs["ranges"],
				pkg["info.dwo"], pkg["abbrev.dwo"], pkg["str.dwo"], pkg["str_offsets.dwo"], pkg["rnglists.dwo"], pkg["cu_index"])
		}
	}
	f.Fuzz(func(t *testing.T, info, abbrev, line, str, lineStr, addr, rnglists, ranges, pInfo, pAbbrev, pStr, pStrOffsets, pRnglists, pIndex []byte) {
		pkg, err := NewPackage(map[string][]byte{"info.dwo": pInfo, "abbrev.dwo": pAbbrev, "str.dwo": pStr,
			"str_offsets.dwo": pStrOffsets, "rnglists.dwo": pRnglists, "cu_index": pIndex}, binary.LittleEndian)
		if err != nil {
			return
		}
		secs := map[string][]byte{"info": info, "abbrev": abbrev, "line": line, "str": str, "line_str": lineStr, "addr": addr,
			"rnglists": rnglists, "ranges": ranges}
		b := index.NewBuilder()
		if _, err := Load(secs, binary.LittleEndian, b, Options{Workers: 2, Package: pkg}); err != nil {
			return
		}
		if ix, err := b.Build(); err == nil {
			ix.Lookup(0x1000)
		}
	})
}

// unitIndex assembles a .debug_cu_index of the given version with one unit of DWO ID id whose
// contributions are (kind, offset, size) triples, in two slots.
func unitIndex(version uint32, id uint64, parts [][3]uint32) []byte {
	le := binary.LittleEndian
	var b []byte
	b = le.AppendUint32(b, version)
	b = le.AppendUint32(b, uint32(len(parts)))
	b = le.AppendUint32(b, 1) // units
	b = le.AppendUint32(b, 2) // slots
	b = le.AppendUint64(b, id)
	b = le.AppendUint64(b, 0)
	b = le.AppendUint32(b, 1)
	b = le.AppendUint32(b, 0)
	for _, p := range parts {
		b = le.AppendUint32(b, p[0])
	}
	for _, p := range parts {
		b = le.AppendUint32(b, p[1])
	}
	for _, p := range parts {
		b = le.AppendUint32(b, p[2])
	}
	return b
}

// TestNewPackageMalformed: a unit index that is not what it claims is refused with an error
// that names the problem; a version 2 index's macro column (8) is not taken for version 5's
// range lists.
func TestNewPackageMalformed(t *testing.T) {
	info := make([]byte, 64)
	good := unitIndex(2, 0xabc, [][3]uint32{{1, 0, 64}, {3, 0, 16}, {6, 0, 8}, {8, 0, 32}, {2, 0, 4}})
	pkg, err := NewPackage(map[string][]byte{"cu_index": good, "info.dwo": info}, binary.LittleEndian)
	if err != nil {
		t.Fatalf("well-formed version 2 index: %v", err)
	}
	c, ok := pkg.unit(0xabc)
	if !ok || c.size[sectInfo] != 64 || c.size[sectAbbrev] != 16 || c.size[sectStrOffsets] != 8 || c.size[sectRnglists] != 0 {
		t.Fatalf("version 2 unit %#x: found %v, sizes %v", 0xabc, ok, c.size)
	}
	if _, err := pkg.part(c, "info.dwo", sectInfo); err != nil {
		t.Fatal(err)
	}
	short := unitIndex(2, 0xabc, [][3]uint32{{1, 0, 65}})
	pkg, err = NewPackage(map[string][]byte{"cu_index": short, "info.dwo": info}, binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	c, _ = pkg.unit(0xabc)
	if _, err := pkg.part(c, "info.dwo", sectInfo); err == nil || !strings.Contains(err.Error(), "beyond 64 bytes") {
		t.Errorf("contribution past the section: %v", err)
	}

	for _, tc := range []struct {
		name, want string
		idx        []byte
	}{
		{"truncated header", "of 12 bytes", good[:12]},
		{"truncated table", "unit index needs", good[:len(good)-4]},
		{"version 3", "version 3", unitIndex(3, 1, [][3]uint32{{1, 0, 1}})},
		{"types in version 5", "names section kind 2", unitIndex(5, 1, [][3]uint32{{1, 0, 1}, {2, 0, 1}})},
		{"kind 0", "names section kind 0", unitIndex(2, 1, [][3]uint32{{0, 0, 1}})},
		{"kind 9", "names section kind 9", unitIndex(2, 1, [][3]uint32{{9, 0, 1}})},
		{"no columns", "0 sections", unitIndex(2, 1, nil)},
		{"row beyond units", "names row 2 of 1", func() []byte {
			b := unitIndex(2, 1, [][3]uint32{{1, 0, 1}})
			binary.LittleEndian.PutUint32(b[16+16:], 2)
			return b
		}()},
	} {
		_, err := NewPackage(map[string][]byte{"cu_index": tc.idx}, binary.LittleEndian)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

// dwoUnit assembles a DWARF 5 .debug_info.dwo unit over one abbreviation table (dwoAbbrev):
// a split compilation unit of DWO ID id (type DW_UT_split_compile), or a split type unit of
// signature id (DW_UT_split_type), or a unit of another type ut with a DWO ID field.
func dwoUnit(ut uint8, id uint64) []byte {
	le := binary.LittleEndian
	var hdr []byte
	hdr = le.AppendUint16(hdr, 5)
	hdr = append(hdr, ut, 8)
	hdr = le.AppendUint32(hdr, 0) // abbrev offset
	hdr = le.AppendUint64(hdr, id)
	die := []byte{1, 0} // DW_TAG_compile_unit, DW_AT_name strx1 0
	if ut == utSplitType {
		hdr = le.AppendUint32(hdr, uint32(4+len(hdr)+4)) // type offset: the DIE after the header
		die = []byte{2}                                  // DW_TAG_type_unit
	}
	b := le.AppendUint32(nil, uint32(len(hdr)+len(die)))
	return append(append(b, hdr...), die...)
}

// dwoAbbrev is the abbreviation table of dwoUnit's units.
var dwoAbbrev = []byte{1, 0x11, 0, 0x03, 0x25, 0, 0, 2, 0x41, 0, 0, 0, 0}

// TestNewPackageFromObjectsTypeUnits: a .dwo's split compilation unit is found wherever it lies
// among type units (gcc puts it after them, in a .debug_info.dwo of its own, which the
// reader joins), and only its bytes are the unit's part; a .dwo without one, with two, or
// with a unit of another type is refused with an error that says so.
func TestNewPackageFromObjectsTypeUnits(t *testing.T) {
	const id = 0xfeed_f00d_1234_5678
	str := []byte("u.cc\x00")
	strOffsets := []byte{8, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0}
	secs := func(units ...[]byte) map[string][]byte {
		var info []byte
		for _, u := range units {
			info = append(info, u...)
		}
		return map[string][]byte{"info.dwo": info, "abbrev.dwo": dwoAbbrev, "str.dwo": str, "str_offsets.dwo": strOffsets}
	}
	tu1, tu2, cu := dwoUnit(utSplitType, 0x1111), dwoUnit(utSplitType, 0x2222), dwoUnit(utSplitCompile, id)
	for _, c := range []struct {
		name  string
		units [][]byte
	}{{"last", [][]byte{tu1, tu2, cu}}, {"first", [][]byte{cu, tu1}}, {"between", [][]byte{tu1, cu, tu2}}, {"alone", [][]byte{cu}}} {
		pkg, err := NewPackageFromObjects([]map[string][]byte{secs(c.units...)}, binary.LittleEndian)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		u, ok := pkg.unit(id)
		if !ok || pkg.Units() != 1 {
			t.Fatalf("%s: DWO ID %#x not found among %d units", c.name, uint64(id), pkg.Units())
		}
		part, err := pkg.part(u, "info.dwo", sectInfo)
		if err != nil || !bytes.Equal(part, cu) {
			t.Fatalf("%s: the unit's part is % x (%v), want the compilation unit's % x", c.name, part, err, cu)
		}
	}
	for _, c := range []struct {
		name, want string
		units      [][]byte
	}{
		{"type units only", "no split compilation unit among the 2 units", [][]byte{tu1, tu2}},
		{"nothing", "no split compilation unit among the 0 units", nil},
		{"two compilation units", "two split compilation units (DWO IDs 0xfeedf00d12345678 and 0x3333", [][]byte{cu, tu1, dwoUnit(utSplitCompile, 0x3333)}},
		{"a skeleton", "of type 0x4", [][]byte{tu1, dwoUnit(utSkeleton, id)}},
		{"a truncated unit", "exceeds", [][]byte{tu1, cu[:len(cu)-1]}},
	} {
		_, err := NewPackageFromObjects([]map[string][]byte{secs(c.units...)}, binary.LittleEndian)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
