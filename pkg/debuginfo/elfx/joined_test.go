package elfx

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// testSection is one section of an ELF file made by testELF.
type testSection struct {
	name  string
	typ   elf.SectionType
	flags elf.SectionFlag
	data  []byte
}

// testELF lays out a little-endian ELF64 relocatable file of the given sections (after the
// null section, with a .shstrtab last), as a compiler writes a .dwo.
func testELF(t *testing.T, secs []testSection) []byte {
	t.Helper()
	le := binary.LittleEndian
	secs = append(secs[:len(secs):len(secs)], testSection{name: ".shstrtab", typ: elf.SHT_STRTAB})
	shstrtab := []byte{0}
	nameOff := make([]uint32, len(secs))
	for i, s := range secs {
		nameOff[i] = uint32(len(shstrtab))
		shstrtab = append(shstrtab, s.name...)
		shstrtab = append(shstrtab, 0)
	}
	secs[len(secs)-1].data = shstrtab
	body := make([]byte, 64)
	offs := make([]uint64, len(secs))
	for i, s := range secs {
		offs[i] = uint64(len(body))
		if s.typ != elf.SHT_NOBITS {
			body = append(body, s.data...)
		}
	}
	for len(body)%8 != 0 {
		body = append(body, 0)
	}
	shoff := uint64(len(body))
	var buf bytes.Buffer
	hdr := elf.Header64{Type: uint16(elf.ET_REL), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Shoff: shoff, Ehsize: 64, Shentsize: 64, Shnum: uint16(len(secs) + 1), Shstrndx: uint16(len(secs))}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS], hdr.Ident[elf.EI_DATA], hdr.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	must(t, binary.Write(&buf, le, hdr))
	copy(body, buf.Bytes())
	buf.Reset()
	buf.Write(body)
	must(t, binary.Write(&buf, le, elf.Section64{}))
	for i, s := range secs {
		must(t, binary.Write(&buf, le, elf.Section64{Name: nameOff[i], Type: uint32(s.typ), Flags: uint64(s.flags),
			Off: offs[i], Size: uint64(len(s.data)), Addralign: 1}))
	}
	return buf.Bytes()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// zlibSection is data as an SHF_COMPRESSED section holds it.
func zlibSection(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	must(t, binary.Write(&buf, binary.LittleEndian, elf.Chdr64{Type: uint32(elf.COMPRESS_ZLIB), Size: uint64(len(data)), Addralign: 1}))
	w := zlib.NewWriter(&buf)
	_, err := w.Write(data)
	must(t, err)
	must(t, w.Close())
	return buf.Bytes()
}

// TestDWARFSectionsJoinedOf: several sections of a joined key come back as one, in file order,
// each decompressed; a key asked for but not joined may have one section; what is not asked
// for, and SHT_NOBITS sections, are not read.
func TestDWARFSectionsJoinedOf(t *testing.T) {
	prog := elf.SHT_PROGBITS
	tu1, tu2, cu := []byte("type unit 1;"), []byte("type unit 2;"), []byte("compilation unit;")
	base := []testSection{
		{".debug_info.dwo", prog, 0, tu1},
		{".debug_abbrev.dwo", prog, 0, []byte("abbrev")},
		{".debug_info.dwo", prog, elf.SHF_COMPRESSED, zlibSection(t, tu2)},
		{".debug_info.dwo", elf.SHT_NOBITS, 0, []byte("nobits")},
		{".debug_line.dwo", prog, 0, []byte("line")},
		{".debug_line.dwo", prog, 0, []byte("line again")},
		{".debug_info.dwo", prog, 0, cu},
	}
	keys := []string{"info.dwo", "abbrev.dwo", "str.dwo"}
	open := func(secs []testSection, lim Limits) *File {
		b := testELF(t, secs)
		f, err := Open(bytes.NewReader(b), int64(len(b)), lim)
		must(t, err)
		return f
	}
	got, err := open(base, Limits{}).DWARFSectionsJoinedOf(keys, "info.dwo", "types.dwo")
	must(t, err)
	want := map[string]string{"info.dwo": string(tu1) + string(tu2) + string(cu), "abbrev.dwo": "abbrev"}
	if len(got) != len(want) {
		t.Fatalf("keys %v, want %v", len(got), want)
	}
	for k, w := range want {
		if string(got[k]) != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}

	// One section of a joined key is returned as it is.
	one, err := open(base[:2], Limits{}).DWARFSectionsJoinedOf(keys, "info.dwo")
	must(t, err)
	if string(one["info.dwo"]) != string(tu1) {
		t.Errorf("one .debug_info.dwo: %q", one["info.dwo"])
	}

	damaged := zlibSection(t, cu)
	damaged[len(damaged)-5] ^= 0xff // the stream's last byte before its checksum
	for _, c := range []struct {
		name   string
		secs   []testSection
		lim    Limits
		is     error
		saying string
	}{
		{"two of a key not joined", append(base, testSection{".debug_abbrev.dwo", prog, 0, []byte("abbrev 2")}), Limits{}, ErrDuplicateSection, ".debug_abbrev.dwo"},
		{"legacy and gABI names of one key", append(base, testSection{".zdebug_abbrev.dwo", prog, 0, []byte("ZLIB")}), Limits{}, ErrDuplicateSection, ".debug_abbrev.dwo"},
		{"joined beyond the section size limit", []testSection{{".debug_info.dwo", prog, 0, tu1}, {".debug_info.dwo", prog, 0, cu}},
			Limits{MaxSectionSize: int64(len(cu))}, ErrLimit, ".debug_info.dwo sections of more than"},
		{"a part that does not decompress", append(base, testSection{".debug_info.dwo", prog, elf.SHF_COMPRESSED, damaged}), Limits{}, ErrCompression, ".debug_info.dwo"},
	} {
		_, err := open(c.secs, c.lim).DWARFSectionsJoinedOf(keys, "info.dwo")
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.saying) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.is, c.saying)
		}
	}
}
