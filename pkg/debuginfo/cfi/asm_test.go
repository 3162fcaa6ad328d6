package cfi

import (
	"encoding/binary"
	"math"
)

// Helpers that assemble .eh_frame and .debug_frame bytes, so that tests state their input
// instruction by instruction.

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func u16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// cat joins bytes, ints (one byte each) and byte slices.
func cat(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case byte:
			b = append(b, v)
		case int:
			b = append(b, byte(v))
		case []byte:
			b = append(b, v...)
		default:
			panic("cat: unsupported part")
		}
	}
	return b
}

// Instructions.
func advance(n uint64) []byte {
	switch {
	case n < 0x40:
		return []byte{cfaAdvanceLoc | byte(n)}
	case n <= math.MaxUint8:
		return cat(cfaAdvanceLoc1, byte(n))
	case n <= math.MaxUint16:
		return cat(cfaAdvanceLoc2, u16(uint16(n)))
	default:
		return cat(cfaAdvanceLoc4, u32(uint32(n)))
	}
}
func defCFA(reg, off uint64) []byte    { return cat(cfaDefCFA, uleb(reg), uleb(off)) }
func defCFAOffset(off uint64) []byte   { return cat(cfaDefCFAOffset, uleb(off)) }
func defCFARegister(r uint64) []byte   { return cat(cfaDefCFARegister, uleb(r)) }
func offset(reg byte, n uint64) []byte { return cat(cfaOffset|reg, uleb(n)) }
func restore(reg byte) []byte          { return []byte{cfaRestore | reg} }
func undefined(reg uint64) []byte      { return cat(cfaUndefined, uleb(reg)) }
func defCFAExpr(expr []byte) []byte {
	return cat(cfaDefCFAExpression, uleb(uint64(len(expr))), expr)
}

// pltExpr is the CFA expression binutils writes for PLT entries with threshold lit.
func pltExpr(threshold byte) []byte {
	return []byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x30 + threshold, 0x2a, 0x33, 0x24, 0x22}
}

// section assembles entries of one frame section loaded at addr.
type section struct {
	kind SectionKind
	addr uint64
	b    []byte
}

// cieSpec describes a CIE; zero fields take x86-64 GCC's values.
type cieSpec struct {
	is64      bool // 64-bit DWARF length
	version   byte
	aug       string
	augData   []byte // after the length for "z" augmentations, raw otherwise
	codeAlign uint64
	dataAlign int64
	ra        uint64
	addrSize  byte // version 4
	segSize   byte
	insns     []byte
}

// stdCIE is the CIE GCC writes for x86-64 .eh_frame: CFA = rsp+8, return address at cfa-8.
func stdCIE() cieSpec {
	return cieSpec{version: 1, aug: "zR", augData: []byte{0x1b}, codeAlign: 1, dataAlign: -8, ra: 16,
		insns: cat(defCFA(regRSP, 8), offset(16, 1))}
}

// entry appends an entry with the given id field and body; it returns the entry's offset.
func (s *section) entry(is64 bool, id uint64, body func(pos int) []byte) int {
	off := len(s.b)
	hdr := 4
	if is64 {
		hdr = 12
	}
	idSize := 4
	if is64 && s.kind == DebugFrame {
		idSize = 8
	}
	content := body(off + hdr + idSize)
	length := uint64(idSize + len(content))
	if is64 {
		s.b = append(s.b, u32(0xffffffff)...)
		s.b = append(s.b, u64(length)...)
		if idSize == 8 {
			s.b = append(s.b, u64(id)...)
		} else {
			s.b = append(s.b, u32(uint32(id))...)
		}
	} else {
		s.b = append(s.b, u32(uint32(length))...)
		s.b = append(s.b, u32(uint32(id))...)
	}
	s.b = append(s.b, content...)
	return off
}

func (s *section) cie(c cieSpec) int {
	var id uint64
	if s.kind == DebugFrame {
		id = 0xffffffff
		if c.is64 {
			id = math.MaxUint64
		}
	}
	return s.entry(c.is64, id, func(int) []byte {
		b := cat(c.version, []byte(c.aug), 0)
		if c.aug == "eh" {
			b = append(b, c.augData...) // the EH data pointer follows the string
		}
		if c.version >= 4 {
			b = append(b, c.addrSize, c.segSize)
		}
		b = append(b, uleb(c.codeAlign)...)
		b = append(b, sleb(c.dataAlign)...)
		if c.version == 1 {
			b = append(b, byte(c.ra))
		} else {
			b = append(b, uleb(c.ra)...)
		}
		if len(c.aug) > 0 && c.aug[0] == 'z' {
			b = append(b, uleb(uint64(len(c.augData)))...)
		}
		if c.aug != "eh" {
			b = append(b, c.augData...)
		}
		return append(b, c.insns...)
	})
}

// fdeSpec describes an FDE. The initial location is written in enc (.eh_frame) or as an
// address of addrSize bytes (.debug_frame).
type fdeSpec struct {
	is64     bool
	cie      int
	enc      byte // pointer encoding of the CIE's 'R', 0x1b when zero in .eh_frame
	absptr   bool // enc is DW_EH_PE_absptr (a CIE without 'R')
	addrSize int  // .debug_frame: 4 or 8 (default)
	start    uint64
	length   uint64
	augData  []byte // written with its length when hasAug
	hasAug   bool
	insns    []byte
}

func (s *section) fde(f fdeSpec) int {
	off := len(s.b)
	hdr := 4
	if f.is64 {
		hdr = 12
	}
	var id uint64
	if s.kind == EHFrame {
		id = uint64(off + hdr - f.cie)
	} else {
		id = uint64(f.cie)
	}
	return s.entry(f.is64, id, func(pos int) []byte {
		var b []byte
		if s.kind == DebugFrame {
			if f.addrSize == 4 {
				b = cat(u32(uint32(f.start)), u32(uint32(f.length)))
			} else {
				b = cat(u64(f.start), u64(f.length))
			}
		} else {
			enc := f.enc
			if enc == 0 && !f.absptr {
				enc = 0x1b
			}
			b = s.pointer(enc, f.start, pos)
			b = append(b, s.pointer(enc&0x0f, f.length, pos+len(b))...)
		}
		if f.hasAug {
			b = append(b, uleb(uint64(len(f.augData)))...)
			b = append(b, f.augData...)
		}
		return append(b, f.insns...)
	})
}

// pointer encodes v in enc as written at section offset pos.
func (s *section) pointer(enc byte, v uint64, pos int) []byte {
	if enc&0x70 == peAligned {
		pad := (8 - (s.addr+uint64(pos))%8) % 8
		return append(make([]byte, pad), u64(v)...)
	}
	switch enc & 0x70 {
	case pePcrel:
		v -= s.addr + uint64(pos)
	case peTextrel:
		v -= testTextBase
	case peDatarel:
		v -= testDataBase
	}
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		return u64(v)
	case peUleb128:
		return uleb(v)
	case peSleb128:
		return sleb(int64(v))
	case peUdata2, peSdata2:
		return u16(uint16(v))
	case peUdata4, peSdata4:
		return u32(uint32(v))
	}
	panic("pointer: unsupported encoding")
}

func (s *section) zero() { s.b = append(s.b, 0, 0, 0, 0) }

const (
	testTextBase = 0x400000
	testDataBase = 0x600000
)
