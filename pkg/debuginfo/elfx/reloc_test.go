package elfx

import (
	"bytes"
	"debug/elf"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
)

// TestModuleLayout checks the kernel module loader's rule on hand-derived section tables.
func TestModuleLayout(t *testing.T) {
	const (
		ax = elf.SHF_ALLOC | elf.SHF_EXECINSTR
		a  = elf.SHF_ALLOC
		wa = elf.SHF_ALLOC | elf.SHF_WRITE
	)
	sec := func(name string, flags elf.SectionFlag, size, align uint64) LayoutSection {
		return LayoutSection{Name: name, Type: elf.SHT_PROGBITS, Flags: flags, Size: size, Align: align}
	}
	tests := []struct {
		name  string
		secs  []LayoutSection
		want  []uint64
		ok    bool
		isErr bool
	}{{
		// brd.ko of Debian's 6.1 kernel: .text 0xb30 (align 16), .text.unlikely 0x1a3 (1),
		// .exit.text 0x22 (1), .init.text 0xe4 (1), then data.
		name: "brd.ko",
		secs: []LayoutSection{
			{Name: ""},
			sec(".note.gnu.build-id", a, 0x24, 4),
			sec(".text", ax, 0xb30, 16),
			{Name: ".rela.text", Type: elf.SHT_RELA, Flags: elf.SHF_INFO_LINK, Size: 0xac8, Align: 8},
			sec(".text.unlikely", ax, 0x1a3, 1),
			sec(".exit.text", ax, 0x22, 1),
			sec(".init.text", ax, 0xe4, 1),
			sec(".rodata", a, 0xd8, 32),
			{Name: ".bss", Type: elf.SHT_NOBITS, Flags: wa, Size: 8, Align: 8},
			sec(".debug_info", 0, 0x1ae88, 1),
		},
		// Text region: .text [0, 0xb30), .text.unlikely at 0xb30, .exit.text at 0xcd3, ending
		// at 0xcf5. The note (before .text) and the rest follow in header order.
		want: []uint64{0, 0xcf8, 0, 0, 0xb30, 0xcd3, 0xd1c, 0xe00, 0xed8, 0},
		ok:   true,
	}, {
		name: "alignment rounds each section up",
		secs: []LayoutSection{sec(".text", ax, 0x11, 16), sec(".text.hot", ax, 3, 8), sec(".noinstr.text", ax, 1, 64), sec(".data", wa, 4, 0)},
		want: []uint64{0, 0x18, 0x40, 0x41},
		ok:   true,
	}, {
		// An executable section before .text: the loader puts it below .text, which the
		// convention cannot address; it goes after everything else.
		name: "code before .text",
		secs: []LayoutSection{sec(".text.early", ax, 0x10, 16), sec(".text", ax, 0x20, 16), sec(".exit.text", ax, 5, 1), sec(".rodata", a, 8, 8)},
		want: []uint64{0x30, 0, 0x20, 0x40},
		ok:   true,
	}, {
		name: "sh_addralign 0 counts as 1",
		secs: []LayoutSection{sec(".text", ax, 3, 0), sec(".exit.text", ax, 1, 0)},
		want: []uint64{0, 3},
		ok:   true,
	}, {
		name: "no .text: a DWARF package keeps its addresses",
		secs: []LayoutSection{{Name: ""}, sec(".debug_info.dwo", 0, 100, 1)},
	}, {
		name: ".text without SHF_ALLOC is not code",
		secs: []LayoutSection{sec(".text", 0, 100, 1)},
	}, {
		name:  "sizes beyond the address space",
		secs:  []LayoutSection{sec(".text", ax, 1<<62, 1), sec(".exit.text", ax, 1<<62, 1)},
		isErr: true,
	}, {
		name:  "absurd alignment",
		secs:  []LayoutSection{sec(".text", ax, 16, 1<<63)},
		isErr: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := ModuleLayout(tt.secs)
			if tt.isErr {
				if err == nil || !errors.Is(err, ErrRelocation) {
					t.Fatalf("err %v, want ErrRelocation", err)
				}
				return
			}
			if err != nil || ok != tt.ok {
				t.Fatalf("ok %v err %v, want ok %v", ok, err, tt.ok)
			}
			if !ok {
				return
			}
			for i := range tt.secs {
				if got[i] != tt.want[i] {
					t.Errorf("%s at %#x, want %#x", tt.secs[i].Name, got[i], tt.want[i])
				}
			}
		})
	}
}

// readelfSection is one row of `readelf -SW`.
type readelfSection struct {
	name        string
	flags       string
	size, align uint64
}

// readelfSections parses `readelf -SW path`: the section table as binutils prints it, read
// apart from debug/elf.
func readelfSections(t *testing.T, readelf, path string) []readelfSection {
	t.Helper()
	out := elfxtest.Run(t, readelf, "-SW", path)
	var secs []readelfSection
	for _, line := range strings.Split(string(out), "\n") {
		open, close := strings.IndexByte(line, '['), strings.IndexByte(line, ']')
		if open < 0 || close < open || strings.Contains(line, "Nr]") {
			continue
		}
		// Name Type Address Off Size ES [Flg] Lk Inf Al; section 0 has neither name nor flags.
		f := strings.Fields(line[close+1:])
		if len(f) < 9 || f[0] == "NULL" {
			continue
		}
		name, rest := f[0], f[1:]
		flg := ""
		if len(rest) == 9 {
			flg = rest[5]
		}
		size, err1 := strconv.ParseUint(rest[3], 16, 64)
		align, err2 := strconv.ParseUint(rest[len(rest)-1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("readelf line %q: %v %v", line, err1, err2)
		}
		secs = append(secs, readelfSection{name: name, flags: flg, size: size, align: align})
	}
	return secs
}

// kernelLayout computes the module layout from readelf's table, as the loader's loop reads it.
func kernelLayout(secs []readelfSection) map[string]uint64 {
	alignUp := func(x, a uint64) uint64 {
		if a == 0 {
			a = 1
		}
		return (x + a - 1) / a * a
	}
	got := map[string]uint64{}
	var pos, text uint64
	for _, s := range secs {
		if strings.Contains(s.flags, "A") && strings.Contains(s.flags, "X") && !strings.HasPrefix(s.name, ".init") {
			pos = alignUp(pos, s.align)
			if s.name == ".text" {
				text = pos
			}
			got[s.name] = pos
			pos += s.size
		}
	}
	for n := range got {
		got[n] -= text
	}
	pos -= text
	for _, s := range secs {
		if _, ok := got[s.name]; ok || !strings.Contains(s.flags, "A") {
			continue
		}
		pos = alignUp(pos, s.align)
		got[s.name] = pos
		pos += s.size
	}
	return got
}

// TestRelocatableLayout compiles KernelModule into an object with each toolchain and checks
// the addresses Open gives its sections against the loader's rule applied to readelf's
// section table, and that its Loads are its executable sections.
func TestRelocatableLayout(t *testing.T) {
	for _, tc := range elfxtest.Toolchains(t) {
		t.Run(tc.Arch, func(t *testing.T) {
			obj := tc.CC(t, t.TempDir(), "mod.o", elfxtest.KernelModule, "-c", "-g", "-O2")
			want := kernelLayout(readelfSections(t, tc.Tool("readelf"), obj))
			f, closer, err := OpenPath(obj, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			if !f.LaidOut() {
				t.Fatal("not laid out")
			}
			for _, n := range []string{".text", ".text.unlikely", ".exit.text", ".init.text", ".rodata", ".data", ".bss"} {
				s := f.Section(n)
				if s == nil {
					t.Fatalf("no section %s", n)
				}
				if w, ok := want[n]; !ok || s.Addr != w {
					t.Errorf("%s at %#x, want %#x", n, s.Addr, w)
				}
			}
			if s := f.Section(".debug_info"); s.Addr != 0 {
				t.Errorf(".debug_info at %#x", s.Addr)
			}
			loads := f.Loads()
			if len(loads) != 4 || loads[0].Vaddr != 0 || loads[0].Offset != 0 || loads[0].Filesz != f.Section(".text").Size {
				t.Errorf("loads %+v", loads)
			}
			if _, err := f.DWARF(); err != nil {
				t.Errorf("DWARF: %v", err)
			}
		})
	}
}

// relaEntry locates entry n of section name's RELA table in the file at path.
func relaEntry(t *testing.T, path, name string, n int) int64 {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	s := ef.Section(name)
	if s == nil {
		t.Fatalf("no %s", name)
	}
	return int64(s.Offset) + int64(n)*24
}

// TestRelocationErrors breaks one relocation of .debug_info at a time: each gives an error
// that names the section and the problem, never a panic or silently wrong DWARF.
func TestRelocationErrors(t *testing.T) {
	for _, tc := range elfxtest.Toolchains(t) {
		t.Run(tc.Arch, func(t *testing.T) {
			obj := tc.CC(t, t.TempDir(), "mod.o", elfxtest.KernelModule, "-c", "-g", "-O2")
			good := elfxtest.Read(t, obj)
			at := relaEntry(t, obj, ".rela.debug_info", 1)
			bo := binaryOrder(good)
			tests := []struct {
				name, want string
				edit       func(e []byte)
			}{
				{"unknown type", "not supported", func(e []byte) {
					info := bo.Uint64(e[8:])
					bo.PutUint64(e[8:], info&^0xffffffff|4242)
				}},
				{"symbol index out of range", "symbol 1000000", func(e []byte) {
					info := bo.Uint64(e[8:])
					bo.PutUint64(e[8:], uint64(1000000)<<32|info&0xffffffff)
				}},
				{"offset past the section", "of a", func(e []byte) { bo.PutUint64(e, 1<<40) }},
				{"offset at the last byte", "of a", func(e []byte) {
					ef, _ := elf.NewFile(bytes.NewReader(good))
					bo.PutUint64(e, ef.Section(".debug_info").Size-1)
				}},
				{"32-bit value overflows", "does not fit", func(e []byte) {
					// Entry 1 is a 32-bit relocation against .debug_abbrev or .debug_str.
					bo.PutUint64(e[16:], 1<<33)
				}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					data := bytes.Clone(good)
					tt.edit(data[at : at+24])
					f, err := Open(bytes.NewReader(data), int64(len(data)), Limits{})
					if err != nil {
						t.Fatal(err)
					}
					_, err = f.DWARFSections()
					if err == nil || !errors.Is(err, ErrRelocation) || !strings.Contains(err.Error(), ".debug_info") || !strings.Contains(err.Error(), tt.want) {
						t.Fatalf("err %v, want ErrRelocation naming .debug_info and %q", err, tt.want)
					}
					if _, err := f.DWARF(); err == nil {
						t.Fatal("DWARF read past a bad relocation")
					}
				})
			}
		})
	}
}

// TestRelocationLeavesRawData checks that relocating works on buffers of the call's own: the
// raw bytes read again are unrelocated, and two reads agree.
func TestRelocationLeavesRawData(t *testing.T) {
	obj := elfxtest.Host.CC(t, t.TempDir(), "mod.o", elfxtest.KernelModule, "-c", "-g", "-O2")
	f, closer, err := OpenPath(obj, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	a, err := f.DWARFSections()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := f.SectionData(".debug_info")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(raw, a["info"]) {
		t.Fatal(".debug_info unchanged by its relocations")
	}
	b, err := f.DWARFSections()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a["info"], b["info"]) || &a["info"][0] == &b["info"][0] {
		t.Fatal("two reads differ or share a buffer")
	}
}

func binaryOrder(data []byte) interface {
	Uint64([]byte) uint64
	PutUint64([]byte, uint64)
} {
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		panic(err)
	}
	return ef.ByteOrder.(interface {
		Uint64([]byte) uint64
		PutUint64([]byte, uint64)
	})
}

// FuzzRelocate feeds mutated relocatable objects through the layout and the relocation of
// their DWARF sections: an error or an answer, never a panic.
func FuzzRelocate(f *testing.F) {
	for _, tc := range elfxtest.Toolchains(f) {
		dir := f.TempDir()
		f.Add(elfxtest.Read(f, tc.CC(f, dir, "mod.o", elfxtest.KernelModule, "-c", "-g", "-O2")))
		f.Add(elfxtest.Read(f, tc.CC(f, dir, "mod4.o", elfxtest.KernelModule, "-c", "-gdwarf-4", "-O1")))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := Limits{MaxSections: 1000, MaxSectionSize: 1 << 20, MaxDecompressedSize: 1 << 22}
		ef, err := Open(bytes.NewReader(data), int64(len(data)), lim)
		if err != nil {
			return
		}
		_, _ = ef.DWARFSections()
		_, _ = ef.DWARFSectionsJoinedOf(DWARFSectionNames, "info")
		ef.Loads()
	})
}
