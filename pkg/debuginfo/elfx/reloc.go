package elfx

import (
	"debug/elf"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
)

// Relocatable objects (ET_REL: Linux kernel modules, plain .o files) have no addresses of
// their own: every section starts at 0, and the DWARF names code through relocations (a
// function's DW_AT_low_pc is 0 plus a relocation against .text). This file gives such an
// object the addresses the kernel's module loader gives a module, and applies the relocations
// of the DWARF sections against them, so that an object is symbolized like a linked file.
//
// The address convention (profsym's collector sends module frames this way): an address in a
// module is its runtime address minus the runtime address of the module's ".text"
// (/sys/module/<m>/sections/.text). The loader (kernel/module/main.c: layout_sections with
// module_get_offset_and_type, get_offset in 5.10) puts the executable SHF_ALLOC sections whose
// names do not start with ".init" into the module's core text, in section-header order, each at
// ALIGN(end of the one before, sh_addralign or 1). ".exit.*" sections stay in core text
// (CONFIG_MODULE_UNLOAD, which every distribution kernel sets). So here those sections get
// their loader offset minus the offset of ".text": ".text" is at 0. The other SHF_ALLOC
// sections (".init.text", read-only and writable data, .bss) come after the end of that text
// region, in section-header order, so that they never share an address with it; where the
// loader puts them relative to ".text" is not fixed (other allocations, init memory freed
// after loading), and profiles seldom hold their addresses. Non-alloc sections stay at 0.
//
// Executable sections that the loader puts before ".text" (none in the modules seen; ".text"
// is the first code section of every module the kernel's build writes) would get negative
// addresses: they are placed after the others instead, where no module address lands, and so
// are not addressable through the convention. A relocatable object without a ".text" section
// (a DWARF package, a .dwo file) keeps its sh_addr values.

// ErrRelocation is wrapped by the errors about relocations that cannot be applied: an
// unsupported type or machine, a symbol index or offset out of range, a value that does not fit.
var ErrRelocation = errors.New("bad relocation")

// maxLayoutAddress bounds the addresses the layout assigns: sections summing to more are
// corrupt (a NOBITS section claiming exabytes), and are not laid out.
const maxLayoutAddress = 1 << 48

// LayoutSection is what the module layout reads of one section header.
type LayoutSection struct {
	Name  string
	Type  elf.SectionType
	Flags elf.SectionFlag
	Size  uint64
	Align uint64
}

// ModuleLayout returns the address of each of secs (section headers in file order) under the
// kernel module loader's rule described above, with ".text" at 0. ok is false when there is no
// ".text" section with SHF_ALLOC (the addresses are then not to be changed); err says why a
// layout is impossible (sizes that overflow the address space).
func ModuleLayout(secs []LayoutSection) (addrs []uint64, ok bool, err error) {
	text := -1
	for i, s := range secs {
		if s.Name == ".text" && s.Flags&elf.SHF_ALLOC != 0 {
			text = i
			break
		}
	}
	if text < 0 {
		return nil, false, nil
	}
	addrs = make([]uint64, len(secs))
	inText := make([]bool, len(secs))
	// The loader's offsets of the core text sections, from the start of the module's text.
	var pos, textOff uint64
	for i, s := range secs {
		if !isCoreText(s) {
			continue
		}
		start, end, err := place(pos, s)
		if err != nil {
			return nil, false, err
		}
		if i == text {
			textOff = start
		}
		addrs[i], pos, inText[i] = start, end, true
	}
	// Shift so that .text is at 0; the sections before it are placed with the rest.
	pos -= textOff
	for i := range secs {
		if inText[i] && i >= text {
			addrs[i] -= textOff
		} else {
			inText[i] = false
		}
	}
	for i, s := range secs {
		if inText[i] || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		start, end, err := place(pos, s)
		if err != nil {
			return nil, false, err
		}
		addrs[i], pos = start, end
	}
	return addrs, true, nil
}

// isCoreText reports whether the module loader puts s into the module's core text.
func isCoreText(s LayoutSection) bool {
	const x = elf.SHF_ALLOC | elf.SHF_EXECINSTR
	return s.Flags&x == x && !strings.HasPrefix(s.Name, ".init")
}

// place returns where s starts and ends when laid out at pos: ALIGN(pos, sh_addralign or 1),
// the kernel's ALIGN (a power of two is assumed, as the kernel assumes it).
func place(pos uint64, s LayoutSection) (start, end uint64, err error) {
	a := max(s.Align, 1)
	if pos > maxLayoutAddress || a > maxLayoutAddress || s.Size > maxLayoutAddress {
		return 0, 0, fmt.Errorf("section %s: size %#x, alignment %#x at %#x: too large to lay out: %w", s.Name, s.Size, s.Align, pos, ErrRelocation)
	}
	start = (pos + a - 1) &^ (a - 1)
	end = start + s.Size
	if end > maxLayoutAddress {
		return 0, 0, fmt.Errorf("section %s: size %#x at %#x: too large to lay out: %w", s.Name, s.Size, start, ErrRelocation)
	}
	return start, end, nil
}

// relocatableMachine reports whether relocatable objects of m are laid out and relocated.
func relocatableMachine(m elf.Machine) bool {
	return m == elf.EM_X86_64 || m == elf.EM_AARCH64
}

// layout gives the sections of a relocatable object of a supported machine their module
// layout addresses (in the parsed headers only: the file is not changed), so that the symbol
// table (symtab adds a symbol's section address in ET_REL files) and the relocated DWARF agree.
func (f *File) layout() {
	ef := f.f
	if ef.Type != elf.ET_REL || !relocatableMachine(ef.Machine) {
		return
	}
	secs := make([]LayoutSection, len(ef.Sections))
	for i, s := range ef.Sections {
		secs[i] = LayoutSection{Name: s.Name, Type: s.Type, Flags: s.Flags, Size: s.Size, Align: s.Addralign}
	}
	addrs, ok, err := ModuleLayout(secs)
	if err != nil {
		f.layoutErr = err
		return
	}
	if !ok {
		return
	}
	for i, s := range ef.Sections {
		s.Addr = addrs[i]
	}
	f.laidOut = true
}

// LaidOut reports whether the file is a relocatable object whose sections were given the
// module layout's addresses (see ModuleLayout): its code then starts at address 0, which in a
// linked file would mark code the linker discarded.
func (f *File) LaidOut() bool { return f.laidOut }

// relocatableLoads are the Loads of a laid-out relocatable object, which has no program
// headers: one per executable SHF_ALLOC section with its layout address, and the address as
// its file offset too (Offset = Vaddr), so that a mapping whose file offset is the distance
// from the module's ".text" places addresses as the all-zero mapping does.
func (f *File) relocatableLoads() []addrmap.Load {
	var out []addrmap.Load
	for _, s := range f.f.Sections {
		const x = elf.SHF_ALLOC | elf.SHF_EXECINSTR
		if s.Flags&x != x || s.Size == 0 {
			continue
		}
		l := addrmap.Load{Offset: s.Addr, Vaddr: s.Addr, Memsz: s.Size}
		if s.Type != elf.SHT_NOBITS {
			l.Filesz = s.Size
		}
		out = append(out, l)
	}
	return out
}

// relocTargets returns the relocation sections of a relocatable object by the index of the
// section they apply to (sh_info), read once.
func (f *File) relocTargets() map[uint32][]*elf.Section {
	f.relocOnce.Do(func() {
		for _, s := range f.f.Sections {
			if s.Type != elf.SHT_RELA && s.Type != elf.SHT_REL {
				continue
			}
			if f.relocs == nil {
				f.relocs = make(map[uint32][]*elf.Section)
			}
			f.relocs[s.Info] = append(f.relocs[s.Info], s)
		}
	})
	return f.relocs
}

// relocSymbols returns the .symtab symbols of the file, with the null symbol first so that a
// relocation's symbol index is an index of the slice, read once.
func (f *File) relocSymbols() ([]elf.Symbol, error) {
	f.symOnce.Do(func() {
		syms, err := f.Symbols()
		if errors.Is(err, elf.ErrNoSymbols) {
			syms, err = nil, nil
		}
		if err != nil {
			f.symErr = err
			return
		}
		f.syms = append([]elf.Symbol{{}}, syms...)
	})
	return f.syms, f.symErr
}

// relocate applies the relocations of section s (of a relocatable object) to data, its
// contents as SectionDataOf returned them (decompressed, and the caller's own: nothing else
// holds that buffer, so it is changed in place). A file that is not ET_REL, or a section
// without relocations, is left as it is.
func (f *File) relocate(s *elf.Section, data []byte) error {
	ef := f.f
	if ef.Type != elf.ET_REL {
		return nil
	}
	idx := -1
	for i, t := range ef.Sections {
		if t == s {
			idx = i
			break
		}
	}
	rels := f.relocTargets()[uint32(idx)]
	if idx <= 0 || len(rels) == 0 {
		return nil
	}
	if f.layoutErr != nil {
		return fmt.Errorf("section %s: %w", s.Name, f.layoutErr)
	}
	for _, rs := range rels {
		if err := f.applyRelocs(s, data, rs); err != nil {
			return fmt.Errorf("section %s: %w", s.Name, err)
		}
	}
	return nil
}

func (f *File) applyRelocs(target *elf.Section, data []byte, rs *elf.Section) error {
	ef := f.f
	if !relocatableMachine(ef.Machine) {
		return fmt.Errorf("relocations (%s) of machine %s are not supported: %w", rs.Name, ef.Machine, ErrRelocation)
	}
	if ef.Class != elf.ELFCLASS64 {
		return fmt.Errorf("relocations (%s) of a %s %s object are not supported: %w", rs.Name, ef.Class, ef.Machine, ErrRelocation)
	}
	if rs.Type != elf.SHT_RELA {
		return fmt.Errorf("%s: %s relocations are not supported (%s uses SHT_RELA): %w", rs.Name, rs.Type, ef.Machine, ErrRelocation)
	}
	if int(rs.Link) >= len(ef.Sections) || ef.Sections[rs.Link].Type != elf.SHT_SYMTAB {
		return fmt.Errorf("%s: sh_link %d is not the symbol table: %w", rs.Name, rs.Link, ErrRelocation)
	}
	raw, err := f.SectionDataOf(rs)
	if err != nil {
		return err
	}
	const entSize = 24 // Elf64_Rela
	if len(raw)%entSize != 0 {
		return fmt.Errorf("%s: %d bytes, not a whole number of %d-byte entries: %w", rs.Name, len(raw), entSize, ErrRelocation)
	}
	syms, err := f.relocSymbols()
	if err != nil {
		return fmt.Errorf("%s: %w", rs.Name, err)
	}
	bo := ef.ByteOrder
	for n := 0; n < len(raw)/entSize; n++ {
		e := raw[n*entSize:]
		off, info, addend := bo.Uint64(e), bo.Uint64(e[8:]), bo.Uint64(e[16:])
		symIdx, typ := info>>32, uint32(info)
		size, kind := relocKind(ef.Machine, typ)
		if kind == relocNone {
			continue
		}
		if kind == relocUnknown {
			return fmt.Errorf("%s: entry %d: type %s not supported: %w", rs.Name, n, relocTypeName(ef.Machine, typ), ErrRelocation)
		}
		if symIdx >= uint64(len(syms)) {
			return fmt.Errorf("%s: entry %d: symbol %d of %d: %w", rs.Name, n, symIdx, len(syms), ErrRelocation)
		}
		if off > uint64(len(data)) || uint64(len(data))-off < uint64(size) {
			return fmt.Errorf("%s: entry %d: %d bytes at offset %#x of a %d-byte section: %w", rs.Name, n, size, off, len(data), ErrRelocation)
		}
		sv, err := f.symbolValue(syms[symIdx])
		if err != nil {
			return fmt.Errorf("%s: entry %d: %w", rs.Name, n, err)
		}
		v := sv + addend // S + A, modulo 2^64 as the linker computes it
		switch kind {
		case reloc64:
			bo.PutUint64(data[off:], v)
		case reloc32:
			if v > math.MaxUint32 {
				return fmt.Errorf("%s: entry %d: %s value %#x does not fit in 32 bits: %w", rs.Name, n, relocTypeName(ef.Machine, typ), v, ErrRelocation)
			}
			bo.PutUint32(data[off:], uint32(v))
		case reloc32S:
			if int64(v) != int64(int32(v)) {
				return fmt.Errorf("%s: entry %d: %s value %#x does not fit in 32 signed bits: %w", rs.Name, n, relocTypeName(ef.Machine, typ), v, ErrRelocation)
			}
			bo.PutUint32(data[off:], uint32(v))
		}
	}
	return nil
}

// symbolValue is S of a relocation against sym: its value plus the address of its section.
// A common symbol (no section yet) counts as 0: the DWARF refers to one only in a variable's
// location, which symbolization does not read.
func (f *File) symbolValue(sym elf.Symbol) (uint64, error) {
	switch {
	case sym.Section == elf.SHN_XINDEX:
		return 0, fmt.Errorf("symbol %q: extended section index not supported: %w", sym.Name, ErrRelocation)
	case sym.Section == elf.SHN_UNDEF || sym.Section == elf.SHN_ABS:
		return sym.Value, nil
	case sym.Section == elf.SHN_COMMON:
		return 0, nil
	case sym.Section >= elf.SHN_LORESERVE:
		return sym.Value, nil
	case int(sym.Section) >= len(f.f.Sections):
		return 0, fmt.Errorf("symbol %q: section %d of %d: %w", sym.Name, sym.Section, len(f.f.Sections), ErrRelocation)
	}
	return sym.Value + f.f.Sections[sym.Section].Addr, nil
}

type relocKindT int

const (
	relocUnknown relocKindT = iota
	relocNone
	reloc64  // 8 bytes, S + A
	reloc32  // 4 bytes, S + A, zero-extended
	reloc32S // 4 bytes, S + A, sign-extended
)

// relocKind says how a relocation type of machine m that DWARF uses is applied, and on how
// many bytes. The DTP-relative types (a thread-local variable's location) are S + A as well:
// the symbol's offset in its TLS section, as llvm's resolver computes them.
func relocKind(m elf.Machine, typ uint32) (size int, kind relocKindT) {
	switch m {
	case elf.EM_X86_64:
		switch elf.R_X86_64(typ) {
		case elf.R_X86_64_NONE:
			return 0, relocNone
		case elf.R_X86_64_64, elf.R_X86_64_DTPOFF64:
			return 8, reloc64
		case elf.R_X86_64_32:
			return 4, reloc32
		case elf.R_X86_64_32S, elf.R_X86_64_DTPOFF32:
			return 4, reloc32S
		}
	case elf.EM_AARCH64:
		switch elf.R_AARCH64(typ) {
		case elf.R_AARCH64_NONE, elf.R_AARCH64_NULL:
			return 0, relocNone
		case elf.R_AARCH64_ABS64, elf.R_AARCH64_TLS_DTPREL64:
			return 8, reloc64
		case elf.R_AARCH64_ABS32:
			return 4, reloc32
		}
	}
	return 0, relocUnknown
}

func relocTypeName(m elf.Machine, typ uint32) string {
	switch m {
	case elf.EM_X86_64:
		return fmt.Sprintf("%v (%d)", elf.R_X86_64(typ), typ)
	case elf.EM_AARCH64:
		return fmt.Sprintf("%v (%d)", elf.R_AARCH64(typ), typ)
	}
	return fmt.Sprintf("%d", typ)
}
