package cfi

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"math"
)

// SectionKind says which format a section's bytes are in.
type SectionKind uint8

const (
	// EHFrame is .eh_frame: CIE id 0, CIE pointers relative to the FDE, pointer encodings
	// chosen by the CIE's augmentation.
	EHFrame SectionKind = iota
	// DebugFrame is .debug_frame: CIE id all ones, CIE pointers as section offsets,
	// addresses of the CIE's address size.
	DebugFrame
)

func (k SectionKind) String() string {
	if k == DebugFrame {
		return ".debug_frame"
	}
	return ".eh_frame"
}

// Options says what the section's bytes alone do not: the machine, and the bases of pointer
// encodings that depend on more than the section.
type Options struct {
	// Arch is the machine the CFI describes: elf.EM_X86_64 or elf.EM_AARCH64. Zero
	// (elf.EM_NONE) means x86-64, what ParseSectionWith read before it knew of other
	// machines; any other machine is ErrUnsupportedMachine. It decides which DWARF
	// registers are the stack and frame pointers, and which instructions and augmentations
	// are valid: DW_CFA_AARCH64_negate_ra_state and the 'B' and 'G' augmentations on AArch64
	// only, the PLT expression (CFAPLT) on x86-64 only.
	Arch elf.Machine
	// TextBase is the base of DW_EH_PE_textrel pointers (the LSB says .text).
	TextBase uint64
	// DataBase is the base of DW_EH_PE_datarel pointers (the LSB says .got).
	DataBase uint64
}

// Limits on what one section may make the parser do. Every real compiler stays far below
// them; they exist so that hostile input costs bounded time and memory.
const (
	// maxStateDepth bounds DW_CFA_remember_state nesting. GCC and LLVM nest one or two
	// levels.
	maxStateDepth = 64
	// maxRAColumn bounds the return address column a CIE may name; x86-64 uses 16,
	// AArch64 30.
	maxRAColumn = 128
)

// arch holds what the parser needs to know of a machine.
type arch struct {
	machine elf.Machine
	sp, fp  uint64 // DWARF numbers of the stack pointer and the frame pointer register
	plt     bool   // binutils' PLT CFA expression is recognized (x86-64)
	pauth   bool   // DW_CFA_AARCH64_negate_ra_state and the 'B' and 'G' augmentations (AArch64)
}

var (
	archX86_64  = arch{machine: elf.EM_X86_64, sp: regRSP, fp: regRBP, plt: true}
	archAArch64 = arch{machine: elf.EM_AARCH64, sp: regSP, fp: regX29, pauth: true}
)

// archOf returns the parser's view of machine m, zero meaning x86-64.
func archOf(m elf.Machine) (*arch, error) {
	switch m {
	case elf.EM_NONE, elf.EM_X86_64:
		return &archX86_64, nil
	case elf.EM_AARCH64:
		return &archAArch64, nil
	}
	return nil, fmt.Errorf("%w: Options.Arch %v", ErrUnsupportedMachine, m)
}

// errUnsupported marks what is valid DWARF but outside what the table handles (an unknown
// augmentation, a SPARC or MIPS opcode): the CIE's or FDE's rows are skipped, the file is
// still read.
var errUnsupported = errors.New("unsupported")

// Pointer encodings (DW_EH_PE_*), as in the LSB.
const (
	peAbsptr  = 0x00
	peUleb128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSigned  = 0x08
	peSleb128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c

	pePcrel    = 0x10
	peTextrel  = 0x20
	peDatarel  = 0x30
	peFuncrel  = 0x40
	peAligned  = 0x50
	peIndirect = 0x80
	peOmit     = 0xff
)

// cie is a parsed CIE; its initial state is computed the first time an FDE needs it.
type cie struct {
	codeAlign uint64
	dataAlign int64
	raReg     uint64
	fpReg     uint64 // the frame pointer's DWARF number on the parser's machine
	fdeEnc    uint8
	addrSize  uint8
	augData   bool // 'z': FDEs carry an augmentation data length
	signal    bool // 'S': the FDEs describe signal trampolines
	insns     [2]int
	// err is set for a CIE this package does not handle; its FDEs are skipped.
	err error

	initDone bool
	init     state
}

// fde is an FDE found by the walk, to be run once the FDEs are in address order. It holds
// no pointer, so that the garbage collector does not scan the list.
type fde struct {
	start, end uint64
	insns      [2]int32 // the program: section offsets
	cie        int32    // index in parser.cieList; -1 once the program failed
	off        int32    // the FDE's offset: its position in the section, for errors and order
}

type parser struct {
	data []byte
	addr uint64
	kind SectionKind
	opt  Options
	arch *arch

	cies    map[int]int32 // section offset -> index in cieList
	cieList []*cie
	lastCIE int
	lastIdx int32

	rows []Row
	fdes []fde

	stack     []state // remember_state stack, reused across FDEs
	fdeStart  uint64  // the initial location of the FDE being run, for DW_EH_PE_funcrel
	cieBytes  int     // the sizes of the CIEs parsed so far
	insnBytes int     // the sizes of the FDEs' programs
	signal    bool    // the FDE being run describes a signal trampoline

	skipped    int
	skipReason error
}

// ParseSection builds the table of one .eh_frame or .debug_frame section whose bytes are
// data, loaded at the virtual address sectionAddr, for x86-64. It is ParseSectionWith without
// the bases of text- and data-relative pointers, which x86-64 compilers do not emit.
func ParseSection(data []byte, sectionAddr uint64, kind SectionKind) (*Table, error) {
	return ParseSectionWith(data, sectionAddr, kind, Options{})
}

// ParseSectionWith builds the table of one .eh_frame or .debug_frame section whose bytes are
// data, loaded at the virtual address sectionAddr, for the machine opt.Arch (x86-64 when
// zero). The table's Arch is that machine.
//
// A malformed entry frame (a length past the section's end, a CIE pointer that leads
// nowhere, a truncated CIE header) fails the whole section: the entries after it cannot be
// trusted. An FDE whose CIE is unsupported, or whose own header or program is malformed or
// unsupported, is skipped and counted in Table.Skipped: one function without rows costs the
// unwinder that function, not the file.
func ParseSectionWith(data []byte, sectionAddr uint64, kind SectionKind, opt Options) (*Table, error) {
	if kind != EHFrame && kind != DebugFrame {
		return nil, fmt.Errorf("cfi: unknown section kind %d", kind)
	}
	a, err := archOf(opt.Arch)
	if err != nil {
		return nil, err
	}
	p := &parser{
		data:    data,
		addr:    sectionAddr,
		kind:    kind,
		opt:     opt,
		arch:    a,
		cies:    make(map[int]int32, 4),
		lastCIE: -1,
		// GCC's and Clang's sections hold one FDE per 30 to 40 bytes.
		fdes: make([]fde, 0, len(data)/32+1),
	}
	if len(data) > math.MaxInt32 {
		return nil, fmt.Errorf("cfi: %v of %d bytes: larger than 2 GiB", kind, len(data))
	}
	if err := p.walk(); err != nil {
		return nil, err
	}
	kept := p.assemble()
	return &Table{Arch: a.machine, Rows: p.rows, Source: kind.String(), FDEs: kept, Skipped: p.skipped, SkipReason: p.skipReason}, nil
}

func (p *parser) errorf(off int, what, format string, args ...any) error {
	return fmt.Errorf("cfi: %v %s at %#x: %s", p.kind, what, off, fmt.Sprintf(format, args...))
}

// entry is the frame of one CIE or FDE.
type entry struct {
	start int    // offset of the length field
	idPos int    // offset of the CIE id / CIE pointer field
	body  int    // offset just after the id field
	end   int    // offset just after the entry
	id    uint64 // the CIE id or CIE pointer
	is64  bool   // 64-bit DWARF format
	zero  bool   // a zero length: a terminator, no id
}

// readEntry reads the frame of the entry at off. A zero length (a terminator) gives an
// entry with end = off+4 and body = end. Its errors name the entry, not the section: the
// caller says which section, and from where it came.
func (p *parser) readEntry(off int) (entry, error) {
	r := reader{data: p.data, pos: off, end: len(p.data)}
	e := entry{start: off}
	length := uint64(r.u32())
	if r.bad {
		return e, entryErrorf(off, "truncated length (%d bytes left)", len(p.data)-off)
	}
	if length == 0 {
		e.idPos, e.body, e.end, e.zero = r.pos, r.pos, r.pos, true
		return e, nil
	}
	if length == 0xffffffff {
		e.is64 = true
		length = r.u64()
		if r.bad {
			return e, entryErrorf(off, "truncated 64-bit length")
		}
	}
	if length > uint64(len(p.data)-r.pos) {
		return e, entryErrorf(off, "length %#x runs past the section end (%#x)", length, len(p.data))
	}
	e.end = r.pos + int(length)
	r.end = e.end
	e.idPos = r.pos
	// In .eh_frame the CIE id and CIE pointer stay 4 bytes with a 64-bit length, as
	// the LSB and the runtime unwinders (libunwind, LLVM) read them; .debug_frame's follow
	// the DWARF offset size.
	if e.is64 && p.kind == DebugFrame {
		e.id = r.u64()
	} else {
		e.id = uint64(r.u32())
	}
	if r.bad {
		return e, entryErrorf(off, "length %#x too short for the CIE id", length)
	}
	e.body = r.pos
	return e, nil
}

func entryErrorf(off int, format string, args ...any) error {
	return fmt.Errorf("entry at %#x: %s", off, fmt.Sprintf(format, args...))
}

func (p *parser) isCIE(e entry) bool {
	if p.kind == EHFrame {
		return e.id == 0
	}
	if e.is64 {
		return e.id == math.MaxUint64
	}
	return e.id == 0xffffffff
}

func (p *parser) walk() error {
	for off := 0; off < len(p.data); {
		if len(p.data)-off < 4 && allZero(p.data[off:]) {
			break // alignment padding after the last entry
		}
		e, err := p.readEntry(off)
		if err != nil {
			return fmt.Errorf("cfi: %v %w", p.kind, err)
		}
		off = e.end
		// A zero length ends the entries for the runtime's linear search, but a binary
		// search table (.eh_frame_hdr) still finds FDEs after it, and readelf reads on:
		// so do we.
		if e.zero {
			continue
		}
		if p.isCIE(e) {
			continue // parsed when an FDE refers to it
		}
		if err := p.readFDE(e); err != nil {
			return err
		}
	}
	return nil
}

// skip counts an FDE left out and keeps the first reason.
func (p *parser) skip(off int, err error) {
	p.skipped++
	if p.skipReason == nil {
		p.skipReason = fmt.Errorf("cfi: %v FDE at %#x: %w", p.kind, off, err)
	}
}

func (p *parser) readFDE(e entry) error {
	var cieOff int
	if p.kind == EHFrame {
		if e.id > uint64(e.idPos) {
			return p.errorf(e.start, "FDE", "CIE pointer %#x out of range", e.id)
		}
		cieOff = e.idPos - int(e.id)
	} else {
		if e.id >= uint64(len(p.data)) {
			return p.errorf(e.start, "FDE", "CIE pointer %#x out of range", e.id)
		}
		cieOff = int(e.id)
	}
	ci, err := p.cie(cieOff, e.start)
	if err != nil {
		return err
	}
	c := p.cieList[ci]
	if c.err != nil {
		// The CIE's error is counted with the FDEs it skips; the other entries go on.
		p.skip(e.start, c.err)
		return nil //nolint:nilerr // recorded by skip, not fatal to the section
	}
	r := reader{data: p.data, pos: e.body, end: e.end}
	var start, length uint64
	if p.kind == EHFrame {
		start, err = p.pointer(&r, c.fdeEnc, 0)
		if err != nil {
			p.skip(e.start, fmt.Errorf("initial location: %w", err))
			return nil
		}
		// The range is a length: only the encoding's format applies.
		length, err = p.pointer(&r, c.fdeEnc&0x0f, 0)
		if err != nil {
			p.skip(e.start, fmt.Errorf("address range: %w", err))
			return nil
		}
	} else {
		start = p.address(&r, c.addrSize)
		length = p.address(&r, c.addrSize)
		if r.bad {
			p.skip(e.start, errors.New("truncated header"))
			return nil
		}
	}
	if c.augData {
		n := r.uleb()
		r.bytes(n)
		if r.bad {
			p.skip(e.start, errors.New("augmentation data past the FDE's end"))
			return nil
		}
	}
	if length == 0 {
		return nil // covers nothing
	}
	end := start + length
	if end < start {
		p.skip(e.start, fmt.Errorf("range %#x+%#x wraps around", start, length))
		return nil
	}
	if !c.initDone {
		if err := p.runCIE(c); err != nil {
			c.err = err
			p.skip(e.start, err)
			return nil
		}
	}
	// Offsets fit in int32: the section is smaller than 2 GiB.
	p.fdes = append(p.fdes, fde{start: start, end: end, insns: [2]int32{int32(r.pos), int32(r.end)},
		cie: ci, off: int32(e.start)})
	p.insnBytes += r.end - r.pos
	return nil
}

// cie returns the index in cieList of the CIE at off, parsing it the first time. An error
// is a malformed CIE (the file's framing cannot be trusted); an unsupported one comes back
// with its err set.
func (p *parser) cie(off, fdeOff int) (int32, error) {
	if off == p.lastCIE {
		return p.lastIdx, nil
	}
	i, ok := p.cies[off]
	if !ok {
		c, err := p.parseCIE(off, fdeOff)
		if err != nil {
			return 0, err
		}
		i = int32(len(p.cieList))
		p.cieList = append(p.cieList, c)
		p.cies[off] = i
	}
	p.lastCIE, p.lastIdx = off, i
	return i, nil
}

func (p *parser) parseCIE(off, fdeOff int) (*cie, error) {
	e, err := p.readEntry(off)
	if err != nil {
		return nil, fmt.Errorf("cfi: %v FDE at %#x: CIE pointer %#x: %w", p.kind, fdeOff, off, err)
	}
	if e.zero || !p.isCIE(e) {
		return nil, p.errorf(fdeOff, "FDE", "CIE pointer %#x leads to an entry that is not a CIE", off)
	}
	// CIEs are parsed where FDEs point, not where the walk finds them: pointers into
	// the middle of other entries could make the same bytes parse as many overlapping
	// CIEs, each run in full. Real CIEs are disjoint, so their sizes add up to at most the
	// section's.
	p.cieBytes += e.end - e.start
	if p.cieBytes > len(p.data) {
		return nil, p.errorf(fdeOff, "FDE", "CIE pointer %#x: CIEs overlap", off)
	}
	r := reader{data: p.data, pos: e.body, end: e.end}
	c := &cie{addrSize: 8, fdeEnc: peAbsptr, fpReg: p.arch.fp}
	version := r.u8()
	aug := r.cstring()
	if r.bad {
		return nil, p.errorf(off, "CIE", "truncated header")
	}
	if version != 1 && version != 3 && version != 4 {
		c.err = fmt.Errorf("CIE at %#x: version %d: %w", off, version, errUnsupported)
		return c, nil
	}
	if string(aug) == "eh" {
		r.bytes(8) // the EH data pointer of GCC before 3.0
	}
	if version >= 4 {
		c.addrSize = r.u8()
		if seg := r.u8(); seg != 0 && !r.bad {
			c.err = fmt.Errorf("CIE at %#x: segment selector size %d: %w", off, seg, errUnsupported)
			return c, nil
		}
		if c.addrSize != 4 && c.addrSize != 8 && !r.bad {
			c.err = fmt.Errorf("CIE at %#x: address size %d: %w", off, c.addrSize, errUnsupported)
			return c, nil
		}
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if r.bad {
		return nil, p.errorf(off, "CIE", "truncated header")
	}
	if c.raReg == p.arch.fp || c.raReg > maxRAColumn {
		c.err = fmt.Errorf("CIE at %#x: return address column %d: %w", off, c.raReg, errUnsupported)
		return c, nil
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.augData = true
		n := r.uleb()
		data := r.bytes(n)
		if r.bad {
			return nil, p.errorf(off, "CIE", "augmentation data past the CIE's end")
		}
		ar := reader{data: p.data, pos: r.pos - len(data), end: r.pos}
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.fdeEnc = ar.u8()
				if !validEncoding(c.fdeEnc) || c.fdeEnc == peOmit || c.fdeEnc&peIndirect != 0 {
					c.err = fmt.Errorf("CIE at %#x: FDE pointer encoding %#x: %w", off, c.fdeEnc, errUnsupported)
					return c, nil
				}
			case 'L':
				if enc := ar.u8(); !validEncoding(enc) {
					c.err = fmt.Errorf("CIE at %#x: LSDA pointer encoding %#x: %w", off, enc, errUnsupported)
					return c, nil
				}
			case 'P':
				enc := ar.u8()
				if !validEncoding(enc) {
					c.err = fmt.Errorf("CIE at %#x: personality pointer encoding %#x: %w", off, enc, errUnsupported)
					return c, nil
				}
				// The personality routine does not matter for unwinding; only its size
				// does, to find the letters after it. An indirect one is read as the
				// address of its pointer, which is all the size needs.
				if enc != peOmit {
					if _, err := p.pointer(&ar, enc&^peIndirect, 0); err != nil && !ar.bad {
						c.err = fmt.Errorf("CIE at %#x: personality pointer: %w", off, err)
						return c, nil
					}
				}
			case 'S':
				// A signal trampoline: its rows become CFASignalFrame, the unwinder
				// reads the interrupted registers from the kernel's signal frame.
				c.signal = true
			case 'B', 'G':
				// AArch64: return addresses signed with the B key instead of the A
				// key; an MTE-tagged stack frame. Neither has operands nor changes
				// where the caller's registers are.
				if !p.arch.pauth {
					c.err = fmt.Errorf("CIE at %#x: augmentation %q on %v: %w", off, aug, p.arch.machine, errUnsupported)
					return c, nil
				}
			default:
				c.err = fmt.Errorf("CIE at %#x: augmentation %q: %w", off, aug, errUnsupported)
				return c, nil
			}
			if ar.bad {
				return nil, p.errorf(off, "CIE", "augmentation data too short for %q", aug)
			}
		}
	} else if len(aug) > 0 && string(aug) != "eh" && string(aug) != "S" {
		c.err = fmt.Errorf("CIE at %#x: augmentation %q: %w", off, aug, errUnsupported)
		return c, nil
	} else if string(aug) == "S" {
		c.signal = true
	}
	if r.bad {
		return nil, p.errorf(off, "CIE", "truncated header")
	}
	c.insns = [2]int{r.pos, e.end}
	return c, nil
}

func validEncoding(enc uint8) bool {
	if enc == peOmit {
		return true
	}
	switch enc & 0x0f {
	case peAbsptr, peUleb128, peUdata2, peUdata4, peUdata8, peSleb128, peSdata2, peSdata4, peSdata8:
	default:
		return false
	}
	return enc&0x70 <= peAligned
}

// address reads a .debug_frame address of the CIE's size.
func (p *parser) address(r *reader, size uint8) uint64 {
	if size == 4 {
		return uint64(r.u32())
	}
	return r.u64()
}

// pointer reads a pointer in encoding enc. funcBase is the base of DW_EH_PE_funcrel (the
// FDE's initial location; zero where there is none yet).
func (p *parser) pointer(r *reader, enc uint8, funcBase uint64) (uint64, error) {
	if enc == peOmit {
		return 0, errors.New("pointer encoding omit where a pointer is required")
	}
	pos := r.pos
	if enc&0x70 == peAligned {
		// Aligned to the pointer size in the loaded image.
		a := (p.addr + uint64(pos)) % 8
		if a != 0 {
			r.bytes(8 - a)
		}
		pos = r.pos
	}
	var v uint64
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		v = r.u64()
	case peUleb128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peSleb128:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	default:
		return 0, fmt.Errorf("pointer encoding %#x: %w", enc, errUnsupported)
	}
	if r.bad {
		return 0, fmt.Errorf("pointer (encoding %#x) past the entry's end", enc)
	}
	switch enc & 0x70 {
	case 0, peAligned:
	case pePcrel:
		v += p.addr + uint64(pos)
	case peTextrel:
		v += p.opt.TextBase
	case peDatarel:
		v += p.opt.DataBase
	case peFuncrel:
		v += funcBase
	default:
		return 0, fmt.Errorf("pointer encoding %#x: %w", enc, errUnsupported)
	}
	if enc&peIndirect != 0 {
		// The value is where the pointer is stored at run time; the table is built
		// from the file alone.
		return 0, fmt.Errorf("indirect pointer (encoding %#x): %w", enc, errUnsupported)
	}
	return v, nil
}

// isPLTExpression reports whether expr is the CFA expression binutils writes for PLT
// entries, and its threshold: DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and;
// DW_OP_lit11 (or lit10); DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus.
func isPLTExpression(expr []byte) (int32, bool) {
	if len(expr) != 11 {
		return 0, false
	}
	if !bytes.Equal(expr[:7], []byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b}) &&
		!bytes.Equal(expr[:7], []byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3a}) {
		return 0, false
	}
	if !bytes.Equal(expr[7:], []byte{0x2a, 0x33, 0x24, 0x22}) {
		return 0, false
	}
	return int32(expr[6] - 0x30), true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
