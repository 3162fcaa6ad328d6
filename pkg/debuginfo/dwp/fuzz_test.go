package dwp

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/dwarfsym"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
)

// synthDWO assembles a minimal .dwo of one split compilation unit named "u.c" with DWO ID
// id: DWARF 5's (unit type DW_UT_split_compile, DW_FORM_strx1, string offsets with their
// header) or GNU's DWARF 4 (DW_AT_GNU_dwo_id, DW_FORM_GNU_str_index, bare string offsets).
// The fuzz seeds are made from it, so no compiler output needs committing.
func synthDWO(t testing.TB, dwarf int, id uint64) []byte {
	le := binary.LittleEndian
	var abbrev, die, info, strOffsets []byte
	str := []byte("u.c\x00")
	abbrev = append(abbrev, 1, 0x11, 0) // code 1: DW_TAG_compile_unit, no children
	if dwarf == 5 {
		abbrev = append(abbrev, 0x03, 0x25) // DW_AT_name, DW_FORM_strx1
		die = append(die, 1, 0)
		info = le.AppendUint32(info, uint32(2+1+1+4+8+len(die)))
		info = le.AppendUint16(info, 5)
		info = append(info, 0x05, 8) // DW_UT_split_compile, address size
		info = le.AppendUint32(info, 0)
		info = le.AppendUint64(info, id)
		strOffsets = le.AppendUint32(strOffsets, 4+4)
		strOffsets = le.AppendUint16(strOffsets, 5)
		strOffsets = le.AppendUint16(strOffsets, 0)
	} else {
		abbrev = append(abbrev, 0xb1, 0x42, 0x07) // DW_AT_GNU_dwo_id, DW_FORM_data8
		abbrev = append(abbrev, 0x03, 0x82, 0x3e) // DW_AT_name, DW_FORM_GNU_str_index
		die = append(die, 1)
		die = le.AppendUint64(die, id)
		die = append(die, 0)
		info = le.AppendUint32(info, uint32(2+4+1+len(die)))
		info = le.AppendUint16(info, 4)
		info = le.AppendUint32(info, 0)
		info = append(info, 8)
	}
	abbrev = append(abbrev, 0, 0, 0)
	info = append(info, die...)
	strOffsets = le.AppendUint32(strOffsets, 0)
	var buf bytes.Buffer
	_, err := writeELF(&buf, elfHeader{class: elf.ELFCLASS64, data: elf.ELFDATA2LSB, machine: elf.EM_X86_64}, binary.LittleEndian, []section{
		{name: ".debug_info.dwo", data: info}, {name: ".debug_abbrev.dwo", data: abbrev},
		{name: ".debug_str_offsets.dwo", data: strOffsets}, {name: ".debug_str.dwo", data: str},
	})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// synthDWOTypeUnits is synthDWO with two type units, each in a section of its own before the
// compilation unit's, as gcc 12 writes them with -fdebug-types-section: .debug_info.dwo
// sections of split type units (DW_UT_split_type) in DWARF 5, .debug_types.dwo sections in
// GNU's DWARF 4. The units share one abbreviation table and one .debug_str_offsets.dwo.
func synthDWOTypeUnits(t testing.TB, dwarf int, id uint64) []byte {
	le := binary.LittleEndian
	f, err := elf.NewFile(bytes.NewReader(synthDWO(t, dwarf, id)))
	if err != nil {
		t.Fatal(err)
	}
	var cu, abbrev, strOffsets, str []byte
	for _, s := range []struct {
		name string
		to   *[]byte
	}{{".debug_info.dwo", &cu}, {".debug_abbrev.dwo", &abbrev}, {".debug_str_offsets.dwo", &strOffsets}, {".debug_str.dwo", &str}} {
		if *s.to, err = f.Section(s.name).Data(); err != nil {
			t.Fatal(err)
		}
	}
	// Abbreviation 2, after synthDWO's 1: DW_TAG_type_unit, no children, no attributes.
	abbrev = append(abbrev[:len(abbrev)-1], 2, 0x41, 0, 0, 0, 0)
	typeUnit := func(sig uint64) []byte {
		var h []byte
		h = le.AppendUint16(h, uint16(dwarf))
		if dwarf == 5 {
			h = append(h, 0x06, 8) // DW_UT_split_type, address size
			h = le.AppendUint32(h, 0)
		} else {
			h = le.AppendUint32(h, 0)
			h = append(h, 8)
		}
		h = le.AppendUint64(h, sig)
		h = le.AppendUint32(h, uint32(4+len(h)+4)) // type offset: the DIE after the header
		h = append(h, 2)
		return append(le.AppendUint32(nil, uint32(len(h))), h...)
	}
	tuSection := ".debug_info.dwo"
	if dwarf == 4 {
		tuSection = ".debug_types.dwo"
	}
	var buf bytes.Buffer
	if _, err := writeELF(&buf, elfHeader{class: elf.ELFCLASS64, data: elf.ELFDATA2LSB, machine: elf.EM_X86_64}, binary.LittleEndian, []section{
		{name: tuSection, data: typeUnit(0xa1a1_a1a1_a1a1_a1a1)}, {name: tuSection, data: typeUnit(0xb2b2_b2b2_b2b2_b2b2)},
		{name: ".debug_info.dwo", data: cu}, {name: ".debug_abbrev.dwo", data: abbrev},
		{name: ".debug_str_offsets.dwo", data: strOffsets}, {name: ".debug_str.dwo", data: str},
	}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// engineDWOID reads a .dwo as the engine reads a loose one, and returns the DWO ID of its
// split compilation unit.
func engineDWOID(data []byte) (uint64, error) {
	f, err := elfx.Open(bytes.NewReader(data), int64(len(data)), elfx.Limits{})
	if err != nil {
		return 0, err
	}
	secs, err := f.DWARFSectionsJoinedOf(dwarfsym.PackageSectionNames, dwarfsym.DWOJoinedSections...)
	if err != nil {
		return 0, err
	}
	pkg, err := dwarfsym.NewPackageFromObjects([]map[string][]byte{secs}, binary.LittleEndian)
	if err != nil {
		return 0, err
	}
	if pkg.Units() != 1 {
		return 0, fmt.Errorf("%d units", pkg.Units())
	}
	return dwarfsym.DWOUnitID(secs, binary.LittleEndian)
}

// TestSynthDWOTypeUnits: the seeds with type units in sections of their own are read whole by
// the packer and by the engine, which find the compilation unit after them.
func TestSynthDWOTypeUnits(t *testing.T) {
	const id = 0x0fed_cba9_8765_4321
	for _, dw := range []int{4, 5} {
		b := synthDWOTypeUnits(t, dw, id)
		ef, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range ef.Sections {
			if s.Name == ".debug_info.dwo" || s.Name == ".debug_types.dwo" {
				n++
			}
		}
		o, err := ReadObject("synth.dwo", bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("DWARF %d: %v", dw, err)
		}
		if n != 3 || o.DWOID != id || o.TypeUnits() != 2 {
			t.Fatalf("DWARF %d: %d unit sections, DWO ID %#x, %d type units; want 3, %#x, 2", dw, n, o.DWOID, o.TypeUnits(), uint64(id))
		}
		packRoundTrip(t, o)
		if got, err := engineDWOID(b); err != nil || got != id {
			t.Fatalf("DWARF %d: the engine reads DWO ID %#x, %v; want %#x", dw, got, err, uint64(id))
		}
	}
}

// TestSynthDWO: the seeds are .dwo files as ReadObject and the engine's readers see them.
func TestSynthDWO(t *testing.T) {
	for _, dw := range []int{4, 5} {
		b := synthDWO(t, dw, 0x1234_5678_9abc_def0)
		o, err := ReadObject("synth.dwo", bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("DWARF %d: %v", dw, err)
		}
		want := map[int]int{4: 2, 5: 5}[dw]
		if o.DWOID != 0x1234_5678_9abc_def0 || o.Version != want || len(o.strs) != 1 || string(o.strs[0]) != "u.c" {
			t.Fatalf("DWARF %d: DWO ID %#x, index version %d, strings %q", dw, o.DWOID, o.Version, o.strs)
		}
		packRoundTrip(t, o)
	}
}

// packRoundTrip packs o alone and requires the engine's package reader to find its unit.
func packRoundTrip(t *testing.T, o *Object) {
	t.Helper()
	b := NewBuilder()
	if _, err := b.Add(o); err != nil {
		t.Fatalf("%s: %v", o.Name, err)
	}
	var buf bytes.Buffer
	if _, err := b.Write(&buf); err != nil {
		// Only sizes beyond a unit index can fail here, and no fuzz input is that large.
		t.Fatalf("%s: %v", o.Name, err)
	}
	f, err := elfx.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), elfx.Limits{})
	if err != nil {
		t.Fatalf("the package of %s: %v", o.Name, err)
	}
	secs, err := f.DWARFSectionsOf(dwarfsym.PackageSectionNames...)
	if err != nil {
		t.Fatalf("the package of %s: %v", o.Name, err)
	}
	pkg, err := dwarfsym.NewPackage(secs, f.ELF().ByteOrder)
	if err != nil || pkg.Units() != 1 {
		t.Fatalf("the package of %s: %v units, %v", o.Name, pkg, err)
	}
}

// FuzzReadObject feeds ReadObject and the engine's reader of loose .dwo files damaged .dwo
// files: they must refuse them with an error, never panic, and what ReadObject accepts the
// engine must read as the same unit, and it must pack into a package the engine reads. Seeds:
// the synthetic objects, with and without type units in sections of their own, and when gcc
// is installed, its .dwo files of a small program.
func FuzzReadObject(f *testing.F) {
	for _, dw := range []int{4, 5} {
		f.Add(synthDWO(f, dw, 0x1122_3344_5566_7788))
		f.Add(synthDWOTypeUnits(f, dw, 0x1122_3344_5566_7788))
	}
	if _, err := exec.LookPath("gcc"); err == nil {
		dir := f.TempDir()
		src := filepath.Join(dir, "s.c")
		if err := os.WriteFile(src, []byte("static inline int sq(int x) { return x * x; }\nint f(int n) { return sq(n) + 1; }\n"), 0o644); err != nil {
			f.Fatal(err)
		}
		for _, dw := range []string{"-gdwarf-4", "-gdwarf-5"} {
			cmd := exec.CommandContext(f.Context(), "gcc", "-O2", "-g", dw, "-gsplit-dwarf", "-c", "-o", "s.o", "s.c")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				f.Fatalf("gcc: %v\n%s", err, out)
			}
			b, err := os.ReadFile(filepath.Join(dir, "s.dwo"))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The engine reads loose .dwo files itself: never a panic, and what the packer
		// accepts, it reads as the same unit.
		id, engineErr := engineDWOID(data)
		o, err := ReadObject("fuzz.dwo", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if engineErr != nil || id != o.DWOID {
			t.Fatalf("ReadObject reads DWO ID %#x, the engine %#x, %v", o.DWOID, id, engineErr)
		}
		packRoundTrip(t, o)
	})
}
