// Package gopclntab reads the Go runtime's own symbol table, .gopclntab, into the
// symbolization index: functions, their files and lines, and the inline tree. Every Go binary
// keeps it, stripped or not, because the runtime needs it for tracebacks, so a stripped Go
// binary symbolizes as well as its DWARF twin.
//
// Formats: the pclntab layouts of Go 1.2 (used up to Go 1.15), 1.16, 1.18 and 1.20 (still
// written by current releases). Inline trees are decoded for Go 1.13 and later.
package gopclntab

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Stats describes what Load found.
type Stats struct {
	// Version is the pclntab format: "1.2", "1.16", "1.18" or "1.20".
	Version string
	// Functions counts the functions added, InlinedCalls the inline tree entries that became
	// nodes and LineRows the line-table rows.
	Functions, InlinedCalls, LineRows int
}

// ErrCorrupt is wrapped by every error about a malformed pclntab.
var ErrCorrupt = errors.New("corrupt pclntab")

// Limits against hostile input: a pclntab claiming more than these is rejected before any
// allocation sized by it.
const (
	maxSectionSize = 1 << 30
	maxFuncs       = 1 << 22
	maxFuncSize    = 1 << 26
	maxInlineIndex = 1 << 20
	maxInlineDepth = 1 << 10
	maxStringLen   = 1 << 16
)

type format uint8

const (
	ver12 format = iota + 1
	ver116
	ver118
	ver120
)

func (v format) String() string {
	switch v {
	case ver12:
		return "1.2"
	case ver116:
		return "1.16"
	case ver118:
		return "1.18"
	case ver120:
		return "1.20"
	}
	return "unknown"
}

const (
	magic12  = 0xfffffffb
	magic116 = 0xfffffffa
	magic118 = 0xfffffff0
	magic120 = 0xfffffff1
)

// sectionNames are where linkers put the pclntab: internal linking, and external linking of
// position-independent executables.
var sectionNames = []string{".gopclntab", ".data.rel.ro.gopclntab"}

func pclntabSection(f *elf.File) *elf.Section {
	for _, n := range sectionNames {
		if s := f.Section(n); s != nil && s.Type != elf.SHT_NOBITS {
			return s
		}
	}
	return nil
}

// Present reports whether f has a pclntab section with a header this package understands.
func Present(f *elf.File) bool {
	s := pclntabSection(f)
	if s == nil {
		return false
	}
	var hdr [8]byte
	if _, err := io.ReadFull(s.Open(), hdr[:]); err != nil {
		return false
	}
	_, _, err := parseMagic(hdr[:])
	return err == nil
}

func parseMagic(hdr []byte) (format, binary.ByteOrder, error) {
	if len(hdr) < 8 {
		return 0, nil, fmt.Errorf("%w: header of %d bytes", ErrCorrupt, len(hdr))
	}
	if hdr[4] != 0 || hdr[5] != 0 {
		return 0, nil, fmt.Errorf("%w: header padding is not zero", ErrCorrupt)
	}
	if q := hdr[6]; q != 1 && q != 2 && q != 4 {
		return 0, nil, fmt.Errorf("%w: pc quantum %d", ErrCorrupt, q)
	}
	if p := hdr[7]; p != 4 && p != 8 {
		return 0, nil, fmt.Errorf("%w: pointer size %d", ErrCorrupt, p)
	}
	for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		switch bo.Uint32(hdr) {
		case magic12:
			return ver12, bo, nil
		case magic116:
			return ver116, bo, nil
		case magic118:
			return ver118, bo, nil
		case magic120:
			return ver120, bo, nil
		}
	}
	return 0, nil, fmt.Errorf("%w: unknown magic %#x", ErrCorrupt, binary.LittleEndian.Uint32(hdr))
}

// table is a parsed pclntab header with the regions it points at.
type table struct {
	ver     format
	bo      binary.ByteOrder
	quantum uint32
	ptrSize int
	addr    uint64 // virtual address of the header
	data    []byte

	nfunc       int
	funcnametab []byte
	cutab       []byte
	filetab     []byte
	pctab       []byte
	funcdata    []byte // _func records: functab offsets are relative to this
	functab     []byte
	textStart   uint64

	// steps bounds the pc-value decoding of the whole table. The linker shares identical
	// tables between functions, so one table may be decoded many times, but a table whose
	// offsets were made to point at the same long run from every function must not turn
	// into quadratic work.
	steps int64
}

func (t *table) uintptr(b []byte) uint64 {
	if t.ptrSize == 8 {
		return t.bo.Uint64(b)
	}
	return uint64(t.bo.Uint32(b))
}

// sub returns data[off:], checking off.
func sub(data []byte, off uint64, what string) ([]byte, error) {
	if off > uint64(len(data)) {
		return nil, fmt.Errorf("%w: %s offset %#x beyond %d bytes", ErrCorrupt, what, off, len(data))
	}
	return data[off:], nil
}

func parseHeader(data []byte, addr uint64) (*table, error) {
	ver, bo, err := parseMagic(data)
	if err != nil {
		return nil, err
	}
	t := &table{ver: ver, bo: bo, quantum: uint32(data[6]), ptrSize: int(data[7]), addr: addr, data: data,
		steps: 4*int64(len(data)) + 1<<20}
	word := func(i int) (uint64, error) {
		off := 8 + i*t.ptrSize
		if off+t.ptrSize > len(data) {
			return 0, fmt.Errorf("%w: header word %d beyond %d bytes", ErrCorrupt, i, len(data))
		}
		return t.uintptr(data[off:]), nil
	}
	nfunc, err := word(0)
	if err != nil {
		return nil, err
	}
	if nfunc > maxFuncs {
		return nil, fmt.Errorf("%w: %d functions", ErrCorrupt, nfunc)
	}
	t.nfunc = int(nfunc)
	fieldSize := t.ptrSize
	if ver >= ver118 {
		fieldSize = 4
	}
	functabSize := uint64(2*t.nfunc+1) * uint64(fieldSize)

	switch ver {
	case ver12:
		t.funcnametab, t.pctab, t.funcdata = data, data, data
		ft, err := sub(data, uint64(8+t.ptrSize), "functab")
		if err != nil {
			return nil, err
		}
		if functabSize+4 > uint64(len(ft)) {
			return nil, fmt.Errorf("%w: functab of %d functions beyond section", ErrCorrupt, t.nfunc)
		}
		t.functab = ft[:functabSize]
		fileoff := bo.Uint32(ft[functabSize:])
		if t.filetab, err = sub(data, uint64(fileoff), "filetab"); err != nil {
			return nil, err
		}
		if len(t.filetab) < 4 {
			return nil, fmt.Errorf("%w: filetab truncated", ErrCorrupt)
		}
		nfiles := uint64(bo.Uint32(t.filetab))
		if nfiles*4 > uint64(len(t.filetab)) {
			return nil, fmt.Errorf("%w: filetab of %d files beyond section", ErrCorrupt, nfiles)
		}
		t.filetab = t.filetab[:nfiles*4]
	default:
		// Words after nfunc and nfiles: 1.18 added textStart before the offsets.
		first := 2
		if ver >= ver118 {
			ts, err := word(2)
			if err != nil {
				return nil, err
			}
			t.textStart = ts
			first = 3
		}
		var offs [5]uint64
		for i := range offs {
			if offs[i], err = word(first + i); err != nil {
				return nil, err
			}
		}
		regions := []*[]byte{&t.funcnametab, &t.cutab, &t.filetab, &t.pctab, &t.funcdata}
		names := []string{"funcnametab", "cutab", "filetab", "pctab", "pclntable"}
		for i, r := range regions {
			if *r, err = sub(data, offs[i], names[i]); err != nil {
				return nil, err
			}
		}
		if functabSize > uint64(len(t.funcdata)) {
			return nil, fmt.Errorf("%w: functab of %d functions beyond section", ErrCorrupt, t.nfunc)
		}
		t.functab = t.funcdata[:functabSize]
	}
	return t, nil
}

// functabEntry returns the i'th entry PC (or text offset, 1.18+) and _func offset.
func (t *table) functabEntry(i int) (pc, funcOff uint64) {
	if t.ver >= ver118 {
		b := t.functab[8*i:]
		return uint64(t.bo.Uint32(b)), uint64(t.bo.Uint32(b[4:]))
	}
	b := t.functab[2*t.ptrSize*i:]
	return t.uintptr(b), t.uintptr(b[t.ptrSize:])
}

// entryAddr turns a functab PC field into a virtual address.
func (t *table) entryAddr(v uint64) uint64 {
	if t.ver >= ver118 {
		return t.textStart + v
	}
	return v
}

// cbytes returns the NUL-terminated string at off in data, without a copy.
func cbytes(data []byte, off uint64, what string) ([]byte, error) {
	if off >= uint64(len(data)) {
		return nil, fmt.Errorf("%w: %s offset %#x beyond %d bytes", ErrCorrupt, what, off, len(data))
	}
	b := data[off:]
	if len(b) > maxStringLen {
		b = b[:maxStringLen]
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i], nil
	}
	return nil, fmt.Errorf("%w: %s at %#x is not terminated", ErrCorrupt, what, off)
}

// funcInfo is one decoded _func record.
type funcInfo struct {
	entry     uint64
	nameOff   uint32
	pcfile    uint32
	pcln      uint32
	npcdata   uint32
	cuOffset  uint32
	startLine int32
	nfuncdata uint32
	pcdataAt  uint64 // offset in t.funcdata of the pcdata array
	recAddr   uint64 // virtual address of the record, for pointer alignment
}

func (t *table) readFunc(off uint64) (funcInfo, error) {
	var fi funcInfo
	rec, err := sub(t.funcdata, off, "_func")
	if err != nil {
		return fi, err
	}
	head := t.ptrSize // size of the entry field
	if t.ver >= ver118 {
		head = 4
	}
	fixed := head + 8*4 // entry, nameoff, args, deferreturn, pcsp, pcfile, pcln, npcdata, last word
	switch t.ver {
	case ver116, ver118:
		fixed += 4 // cuOffset
	case ver120:
		fixed += 8 // cuOffset, startLine
	}
	if len(rec) < fixed {
		return fi, fmt.Errorf("%w: _func at %#x truncated", ErrCorrupt, off)
	}
	if t.ver >= ver118 {
		fi.entry = t.entryAddr(uint64(t.bo.Uint32(rec)))
	} else {
		fi.entry = t.uintptr(rec)
	}
	u32 := func(i int) uint32 { return t.bo.Uint32(rec[head+4*i:]) }
	fi.nameOff = u32(0)
	fi.pcfile = u32(4)
	fi.pcln = u32(5)
	fi.npcdata = u32(6)
	if t.ver >= ver116 {
		fi.cuOffset = u32(7)
	}
	if t.ver == ver120 {
		fi.startLine = int32(u32(8))
	}
	// nfuncdata is the last byte of the last word in every layout since Go 1.10.
	fi.nfuncdata = uint32(rec[fixed-1])
	fi.pcdataAt = off + uint64(fixed)
	fi.recAddr = t.addr + uint64(len(t.data)-len(t.funcdata)) + off
	return fi, nil
}

// pcdata returns the pctab offset of pcdata table i, or 0.
func (t *table) pcdata(fi *funcInfo, i uint32) uint32 {
	if i >= fi.npcdata {
		return 0
	}
	off := fi.pcdataAt + 4*uint64(i)
	if off+4 > uint64(len(t.funcdata)) {
		return 0
	}
	return t.bo.Uint32(t.funcdata[off:])
}

// funcdataValue returns funcdata slot i: an offset from gofunc (1.18+) or an absolute address,
// and whether the slot is set.
func (t *table) funcdataValue(fi *funcInfo, i uint32) (uint64, bool) {
	if i >= fi.nfuncdata || fi.npcdata > maxFuncs {
		return 0, false
	}
	off := fi.pcdataAt + 4*uint64(fi.npcdata)
	if t.ver >= ver118 {
		off += 4 * uint64(i)
		if off+4 > uint64(len(t.funcdata)) {
			return 0, false
		}
		v := t.bo.Uint32(t.funcdata[off:])
		return uint64(v), v != ^uint32(0)
	}
	// Pointers are aligned in memory; the pclntab itself is pointer-aligned.
	base := t.addr + uint64(len(t.data)-len(t.funcdata))
	if rem := (base + off) % uint64(t.ptrSize); rem != 0 {
		off += uint64(t.ptrSize) - rem
	}
	off += uint64(t.ptrSize) * uint64(i)
	if off+uint64(t.ptrSize) > uint64(len(t.funcdata)) {
		return 0, false
	}
	v := t.uintptr(t.funcdata[off:])
	return v, v != 0
}

// run is one step of a pc-value table: val holds from pc up to the next run's pc.
type run struct {
	pc  uint64
	val int32
}

// decodePCValue decodes the pc-value table at off in pctab for a function at entry. It returns
// the runs and the end PC. No PC may reach beyond limit.
func (t *table) decodePCValue(dst []run, off uint32, entry, limit uint64) ([]run, uint64, error) {
	dst = dst[:0]
	p, err := sub(t.pctab, uint64(off), "pc-value table")
	if err != nil {
		return dst, 0, err
	}
	val := int32(-1)
	pc := entry
	for first := true; ; first = false {
		uv, n := binary.Uvarint(p)
		if n <= 0 || uv > 0xffffffff {
			return dst, 0, fmt.Errorf("%w: pc-value table at %#x: bad varint", ErrCorrupt, off)
		}
		p = p[n:]
		if uv == 0 && !first {
			return dst, pc, nil
		}
		if t.steps--; t.steps < 0 {
			return dst, 0, fmt.Errorf("%w: pc-value tables decode to more steps than the table has bytes", ErrCorrupt)
		}
		d := uint32(uv)
		if d&1 != 0 {
			d = ^(d >> 1)
		} else {
			d >>= 1
		}
		val += int32(d)
		pcd, n := binary.Uvarint(p)
		if n <= 0 || pcd > 0xffffffff {
			return dst, 0, fmt.Errorf("%w: pc-value table at %#x: bad varint", ErrCorrupt, off)
		}
		p = p[n:]
		next := pc + pcd*uint64(t.quantum)
		if next > limit {
			return dst, 0, fmt.Errorf("%w: pc-value table at %#x runs past the function end", ErrCorrupt, off)
		}
		if next > pc {
			dst = append(dst, run{pc: pc, val: val})
		}
		pc = next
	}
}

// valueAt returns the value of runs at pc, or -1.
func valueAt(runs []run, end, pc uint64) int32 {
	if pc >= end || len(runs) == 0 || pc < runs[0].pc {
		return -1
	}
	lo, hi := 0, len(runs)
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if runs[m].pc <= pc {
			lo = m
		} else {
			hi = m
		}
	}
	return runs[lo].val
}

// functabPC returns the PC field of functab entry i; entry nfunc holds the end of the text.
func (t *table) functabPC(i int) (uint64, error) {
	if t.ver >= ver118 {
		o := 8 * i
		if o+4 > len(t.functab) {
			return 0, fmt.Errorf("%w: functab entry %d truncated", ErrCorrupt, i)
		}
		return uint64(t.bo.Uint32(t.functab[o:])), nil
	}
	o := 2 * t.ptrSize * i
	if o+t.ptrSize > len(t.functab) {
		return 0, fmt.Errorf("%w: functab entry %d truncated", ErrCorrupt, i)
	}
	return t.uintptr(t.functab[o:]), nil
}
