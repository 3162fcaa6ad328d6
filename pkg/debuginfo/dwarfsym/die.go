package dwarfsym

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// A purpose-built DIE reader. debug/dwarf decodes every attribute of every entry into
// interface values, which for a C++ binary (where most entries are types, members and
// parameters) spent 36% of Load's CPU time and 46% of its allocated bytes on entries this
// package skips anyway (measured on libstdc++'s 7.4 MiB of DWARF). This reader skips
// attributes by form and decodes only what function nodes need, without allocating.

const (
	tagCompileUnit       = 0x11
	tagPartialUnit       = 0x3c
	tagSkeletonUnit      = 0x4a
	tagSubprogram        = 0x2e
	tagInlinedSubroutine = 0x1d

	// langGo is DW_LANG_Go, the DW_AT_language of the units the Go compiler writes.
	langGo = 0x16

	// DWARF 5 unit types (DW_UT_*) of -gsplit-dwarf builds.
	utSkeleton     = 0x04
	utSplitCompile = 0x05
	utSplitType    = 0x06

	atName           = 0x03
	atStmtList       = 0x10
	atLowPC          = 0x11
	atHighPC         = 0x12
	atLanguage       = 0x13
	atCompDir        = 0x1b
	atAbstractOrigin = 0x31
	atDeclFile       = 0x3a
	atDeclLine       = 0x3b
	atSpecification  = 0x47
	atRanges         = 0x55
	atCallColumn     = 0x57
	atCallFile       = 0x58
	atCallLine       = 0x59
	atLinkageName    = 0x6e
	atStrOffsetsBase = 0x72
	atAddrBase       = 0x73
	atRnglistsBase   = 0x74
	atMIPSLinkage    = 0x2007
	atDwoName        = 0x76
	// DWARF 4 -gsplit-dwarf (GNU extension, the pre-standard form of DWARF 5's split units):
	// the skeleton names its .dwo file and carries the DWO ID and the bases the split unit's
	// address indexes and range list offsets are relative to; the split unit repeats the ID.
	atGNUDwoName    = 0x2130
	atGNUDwoID      = 0x2131
	atGNURangesBase = 0x2132
	atGNUAddrBase   = 0x2133
)

const (
	fAddr          = 0x01
	fBlock2        = 0x03
	fBlock4        = 0x04
	fData2         = 0x05
	fData4         = 0x06
	fData8         = 0x07
	fString        = 0x08
	fBlock         = 0x09
	fBlock1        = 0x0a
	fData1         = 0x0b
	fFlag          = 0x0c
	fSdata         = 0x0d
	fStrp          = 0x0e
	fUdata         = 0x0f
	fRefAddr       = 0x10
	fRef1          = 0x11
	fRef2          = 0x12
	fRef4          = 0x13
	fRef8          = 0x14
	fRefUdata      = 0x15
	fIndirect      = 0x16
	fSecOffset     = 0x17
	fExprloc       = 0x18
	fFlagPresent   = 0x19
	fStrx          = 0x1a
	fAddrx         = 0x1b
	fRefSup4       = 0x1c
	fStrpSup       = 0x1d
	fData16        = 0x1e
	fLineStrp      = 0x1f
	fRefSig8       = 0x20
	fImplicitConst = 0x21
	fLoclistx      = 0x22
	fRnglistx      = 0x23
	fRefSup8       = 0x24
	fStrx1         = 0x25
	fStrx2         = 0x26
	fStrx3         = 0x27
	fStrx4         = 0x28
	fAddrx1        = 0x29
	fAddrx2        = 0x2a
	fAddrx3        = 0x2b
	fAddrx4        = 0x2c
	fGNUAddrIndex  = 0x1f01
	fGNUStrIndex   = 0x1f02
	fGNURefAlt     = 0x1f20
	fGNUStrpAlt    = 0x1f21
)

type attrSpec struct {
	attr, form uint64
	implicit   int64
}

type abbrev struct {
	tag      uint64
	children bool
	// mayHaveCode: the entries have DW_AT_low_pc or DW_AT_ranges. A function entry without
	// either (a declaration, an abstract instance) has no code, and the walk skips it as it
	// skips other entries: C++ classes declare most of a program's subprograms, and decoding
	// each one's attributes to find no range was a third of the walk's CPU on bench/bigdwarf.
	mayHaveCode bool
	attrs       []attrSpec
	// The attributes' size, when every form has one of its own (see sizeOf): fixed bytes,
	// plus nAddr addresses and nOff offsets of the unit's sizes; variable when a form's size
	// is in its value (LEB128, strings, blocks). Most entries of C++ (types, members,
	// parameters) have fixed sizes in g++'s DWARF 5, and skipAttrs then moves past them in one
	// step.
	fixed, nAddr, nOff int
	variable           bool
}

// sizeOf classifies a form for abbrev.fixed: bytes of its own, or an address or an offset of
// the unit's size; ok false when the size is in the value or depends on more (DW_FORM_ref_addr
// on the version).
func sizeOf(form uint64) (n int, addr, off, ok bool) {
	switch form {
	case fFlagPresent, fImplicitConst:
		return 0, false, false, true
	case fData1, fRef1, fFlag, fStrx1, fAddrx1:
		return 1, false, false, true
	case fData2, fRef2, fStrx2, fAddrx2:
		return 2, false, false, true
	case fStrx3, fAddrx3:
		return 3, false, false, true
	case fData4, fRef4, fStrx4, fAddrx4, fRefSup4:
		return 4, false, false, true
	case fData8, fRef8, fRefSig8, fRefSup8:
		return 8, false, false, true
	case fData16:
		return 16, false, false, true
	case fAddr:
		return 0, true, false, true
	case fStrp, fLineStrp, fStrpSup, fGNUStrpAlt, fSecOffset, fGNURefAlt:
		return 0, false, true, true
	}
	return 0, false, false, false
}

type abbrevTable struct {
	dense  []*abbrev // by code, for the usual 1..n numbering
	sparse map[uint64]*abbrev
}

func (t *abbrevTable) get(code uint64) *abbrev {
	if code < uint64(len(t.dense)) {
		return t.dense[code]
	}
	return t.sparse[code]
}

func parseAbbrevs(sec []byte, off uint64) (*abbrevTable, error) {
	if off > uint64(len(sec)) {
		return nil, fmt.Errorf("abbreviation offset %#x beyond section of %d bytes", off, len(sec))
	}
	r := &secReader{data: sec, off: int(off)}
	t := &abbrevTable{}
	for {
		code := r.uleb()
		if r.err != nil {
			return nil, fmt.Errorf("abbreviations at %#x: %w", off, r.err)
		}
		if code == 0 {
			return t, nil
		}
		a := &abbrev{tag: r.uleb(), children: r.u8() != 0}
		for {
			at, form := r.uleb(), r.uleb()
			if r.err != nil {
				return nil, fmt.Errorf("abbreviations at %#x: %w", off, r.err)
			}
			if at == 0 && form == 0 {
				break
			}
			s := attrSpec{attr: at, form: form}
			if form == fImplicitConst {
				s.implicit = r.sleb()
			}
			a.attrs = append(a.attrs, s)
			a.mayHaveCode = a.mayHaveCode || at == atLowPC || at == atRanges
			switch n, addr, off, ok := sizeOf(form); {
			case !ok:
				a.variable = true
			case addr:
				a.nAddr++
			case off:
				a.nOff++
			default:
				a.fixed += n
			}
		}
		switch {
		case code < 1<<14:
			for uint64(len(t.dense)) <= code {
				t.dense = append(t.dense, nil)
			}
			if t.dense[code] == nil {
				t.dense[code] = a
			}
		default:
			if t.sparse == nil {
				t.sparse = map[uint64]*abbrev{}
			}
			if _, dup := t.sparse[code]; !dup {
				t.sparse[code] = a
			}
		}
	}
}

func (r *secReader) sleb() int64 {
	var v int64
	var shift uint
	for {
		if r.off >= len(r.data) {
			r.fail()
			return 0
		}
		b := r.data[r.off]
		r.off++
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

// unitCtx is what decoding a unit's entries needs from its header and its root entry.
type unitCtx struct {
	hdr            unitHeader
	addrSize       int
	offSize        int
	abbrevs        *abbrevTable
	strOffsetsBase uint64
	addrBase       uint64
	rnglistsBase   uint64
	base           uint64 // the unit's low_pc: base address of DWARF 4 range lists
	compDir        string
	stmtList       int64 // -1 when the unit has no line table
	name           string
	language       uint64 // DW_AT_language, 0 when absent
	gnuSkeleton    bool   // a DWARF 4 GNU skeleton: its functions are in a .dwo file
	dwoName        string // the .dwo file of a skeleton unit (DWARF 5 or GNU)
	// gnuRangesBase is a GNU skeleton's DW_AT_GNU_ranges_base: its split unit's range list
	// offsets are relative to it, in the executable's .debug_ranges. rangesBase is what this
	// unit's own DWARF 4 range list offsets are relative to (the skeleton's own are absolute,
	// as llvm and gdb read them).
	gnuRangesBase, rangesBase uint64
	tag                       uint64
	rootOff                   uint64 // offset of the first child entry
	rootChildren              bool
}

// attrVal is one decoded attribute: strings in s, numbers and references in u.
type attrVal struct {
	u     uint64
	s     string
	isStr bool
	class uint8
}

const (
	clsNone uint8 = iota
	clsAddr
	clsConst
	clsRef    // u is an absolute .debug_info offset
	clsRefSup // u is an absolute offset in the supplementary file's .debug_info
	clsSecOff
	clsString
	clsRnglistx
	clsUnsupported
)

type dieSecs struct {
	info, abbrev, str, lineStr, strOffsets, addr, ranges, rnglists []byte
	order                                                          binary.ByteOrder
	// supStr is the supplementary file's .debug_str, which DW_FORM_GNU_strp_alt and
	// DW_FORM_strp_sup point into; nil when there is none.
	supStr []byte
	hasSup bool
	// views: strings read are views of the sections' bytes, not copies. Load's decoders
	// read so: what they read goes to the index through index.Builder.String, which copies
	// each string the first time it is added, and Load returns before the sections may be
	// released (elfx.File.DWARFSectionsMappedOf). Copying every name read was 0.4 s of
	// CPU and 130 MB of allocations on bench/bigdwarf, of strings nearly all seen before.
	views bool
}

// cstrAt reads the string at off of sec, a view of it with views set.
func (s *dieSecs) cstrAt(sec []byte, off uint64) (string, error) {
	if s.views {
		return cstrView(sec, off)
	}
	return cstrAt(sec, off)
}

// ErrNoSupplementary: the DWARF points into a supplementary file (dwz's .gnu_debugaltlink or
// DWARF 5's .debug_sup) that Options.Supplementary does not provide.
var ErrNoSupplementary = errors.New("DWARF refers to a supplementary file that was not provided")

// readAttr reads one attribute value of form form at r. Values the caller does not want
// (want false) are skipped without building strings.
func (s *dieSecs) readAttr(r *secReader, u *unitCtx, form uint64, implicit int64, want bool) (attrVal, error) {
	var v attrVal
	switch form {
	case fAddr:
		v.u, v.class = r.uN(u.addrSize), clsAddr
	case fAddrx, fGNUAddrIndex:
		idx := r.uleb()
		if want {
			a, err := s.addrx(u, idx)
			if err != nil {
				return v, err
			}
			v.u, v.class = a, clsAddr
		}
	case fAddrx1, fAddrx2, fAddrx3, fAddrx4:
		idx := r.uN(int(form-fAddrx1) + 1)
		if want {
			a, err := s.addrx(u, idx)
			if err != nil {
				return v, err
			}
			v.u, v.class = a, clsAddr
		}
	case fData1, fRef1, fFlag:
		v.u = r.uN(1)
	case fData2, fRef2:
		v.u = r.uN(2)
	case fData4, fRef4:
		v.u = r.uN(4)
	case fData8, fRef8, fRefSig8:
		v.u = r.uN(8)
	case fRefSup4, fRefSup8, fGNURefAlt:
		n := u.offSize
		switch form {
		case fRefSup4:
			n = 4
		case fRefSup8:
			n = 8
		}
		v.u, v.class = r.uN(n), clsRefSup
		return v, r.err
	case fData16:
		r.skip(16)
	case fSdata:
		v.u = uint64(r.sleb())
	case fUdata, fRefUdata:
		v.u = r.uleb()
	case fImplicitConst:
		v.u = uint64(implicit)
	case fFlagPresent:
		v.u = 1
	case fString:
		if want && s.views {
			v.s, v.isStr = r.cstrView()
			v.isStr = true
		} else if want {
			v.s, v.isStr = r.cstr(), true
		} else {
			for r.off < len(r.data) && r.data[r.off] != 0 {
				r.off++
			}
			r.skip(1)
		}
	case fStrp, fLineStrp, fStrpSup, fGNUStrpAlt:
		off := r.uN(u.offSize)
		if want {
			sec := s.str
			switch form {
			case fLineStrp:
				sec = s.lineStr
			case fStrpSup, fGNUStrpAlt:
				if !s.hasSup {
					return v, fmt.Errorf("string at %#x of the supplementary file: %w", off, ErrNoSupplementary)
				}
				sec = s.supStr
			}
			str, err := s.cstrAt(sec, off)
			if err != nil {
				return v, err
			}
			v.s, v.isStr = str, true
		}
	case fStrx, fGNUStrIndex, fStrx1, fStrx2, fStrx3, fStrx4:
		var idx uint64
		switch form {
		case fStrx, fGNUStrIndex:
			idx = r.uleb()
		case fStrx1:
			idx = r.uN(1)
		case fStrx2:
			idx = r.uN(2)
		case fStrx3:
			idx = r.uN(3)
		default:
			idx = r.uN(4)
		}
		if want {
			str, err := s.strx(u, idx)
			if err != nil {
				return v, err
			}
			v.s, v.isStr = str, true
		}
	case fRefAddr:
		if u.hdr.version <= 2 {
			v.u = r.uN(u.addrSize)
		} else {
			v.u = r.uN(u.offSize)
		}
		v.class = clsRef
		return v, r.err
	case fSecOffset:
		v.u, v.class = r.uN(u.offSize), clsSecOff
		return v, r.err
	case fBlock1:
		r.skip(r.uN(1))
	case fBlock2:
		r.skip(r.uN(2))
	case fBlock4:
		r.skip(r.uN(4))
	case fBlock, fExprloc:
		r.skip(r.uleb())
	case fLoclistx:
		r.uleb()
	case fRnglistx:
		v.u, v.class = r.uleb(), clsRnglistx
		return v, r.err
	case fIndirect:
		f := r.uleb()
		if r.err != nil {
			return v, r.err
		}
		if f == fIndirect {
			return v, fmt.Errorf("nested DW_FORM_indirect")
		}
		return s.readAttr(r, u, f, implicit, want)
	default:
		return v, fmt.Errorf("unknown form %#x", form)
	}
	if r.err != nil {
		return v, r.err
	}
	if v.class == clsNone {
		switch {
		case v.isStr:
			v.class = clsString
		case form == fRef1 || form == fRef2 || form == fRef4 || form == fRef8 || form == fRefUdata:
			v.u += u.hdr.off
			v.class = clsRef
		case form == fRefSig8:
			v.class = clsUnsupported
		default:
			v.class = clsConst
		}
	}
	return v, nil
}

// skipAttrs moves r past the attribute values of an entry of abbreviation a, as readAttr
// would, without decoding them: a walk skips most entries (types, variables, and in a Go
// binary the entries of every function left to pclntab), and readAttr's decoding of each value
// was two thirds of the cost of walking MinIO's 1.7 M entries.
func skipAttrs(r *secReader, u *unitCtx, a *abbrev) error {
	if !a.variable {
		r.skip(uint64(a.fixed + a.nAddr*u.addrSize + a.nOff*u.offSize))
		return r.err
	}
	for _, sp := range a.attrs {
		form := sp.form
		for form == fIndirect {
			if form = r.uleb(); form == fIndirect {
				return fmt.Errorf("nested DW_FORM_indirect")
			}
		}
		var n uint64
		switch form {
		case fFlagPresent, fImplicitConst:
		case fData1, fRef1, fFlag, fStrx1, fAddrx1:
			n = 1
		case fData2, fRef2, fStrx2, fAddrx2:
			n = 2
		case fStrx3, fAddrx3:
			n = 3
		case fData4, fRef4, fStrx4, fAddrx4, fRefSup4:
			n = 4
		case fData8, fRef8, fRefSig8, fRefSup8:
			n = 8
		case fData16:
			n = 16
		case fAddr:
			n = uint64(u.addrSize)
		case fStrp, fLineStrp, fStrpSup, fGNUStrpAlt, fSecOffset, fGNURefAlt:
			n = uint64(u.offSize)
		case fRefAddr:
			n = uint64(u.offSize)
			if u.hdr.version <= 2 {
				n = uint64(u.addrSize)
			}
		case fUdata, fSdata, fRefUdata, fAddrx, fGNUAddrIndex, fStrx, fGNUStrIndex, fLoclistx, fRnglistx:
			// A signed LEB128 ends where an unsigned one does.
			r.uleb()
		case fString:
			i := bytes.IndexByte(r.data[r.off:], 0)
			if i < 0 {
				r.fail()
				return r.err
			}
			r.off += i + 1
		case fBlock1:
			n = r.uN(1)
		case fBlock2:
			n = r.uN(2)
		case fBlock4:
			n = r.uN(4)
		case fBlock, fExprloc:
			n = r.uleb()
		default:
			return fmt.Errorf("unknown form %#x", form)
		}
		r.skip(n)
		if r.err != nil {
			return r.err
		}
	}
	return nil
}

func (s *dieSecs) addrx(u *unitCtx, idx uint64) (uint64, error) {
	p := u.addrBase + idx*uint64(u.addrSize)
	if idx > uint64(len(s.addr)) || p < u.addrBase || p+uint64(u.addrSize) > uint64(len(s.addr)) {
		return 0, fmt.Errorf("address index %d beyond .debug_addr", idx)
	}
	r := &secReader{data: s.addr, off: int(p), order: s.order}
	return r.uN(u.addrSize), nil
}

func (s *dieSecs) strx(u *unitCtx, idx uint64) (string, error) {
	p := u.strOffsetsBase + idx*uint64(u.offSize)
	if idx > uint64(len(s.strOffsets)) || p < u.strOffsetsBase || p+uint64(u.offSize) > uint64(len(s.strOffsets)) {
		return "", fmt.Errorf("string index %d beyond .debug_str_offsets", idx)
	}
	r := &secReader{data: s.strOffsets, off: int(p), order: s.order}
	return s.cstrAt(s.str, r.uN(u.offSize))
}

// openUnit reads a unit's root entry and the bases its other entries are decoded against.
func (s *dieSecs) openUnit(h unitHeader, cache map[uint64]*abbrevTable) (*unitCtx, error) {
	u := &unitCtx{hdr: h, offSize: 4, stmtList: -1}
	if h.dwarf64 {
		u.offSize = 8
	}
	r := &secReader{data: s.info[:h.end], order: s.order, off: int(h.off)}
	if h.dwarf64 {
		r.skip(12)
	} else {
		r.skip(4)
	}
	r.skip(2)
	var abbrOff uint64
	if h.version >= 5 {
		r.u8() // unit type
		u.addrSize = int(r.u8())
		abbrOff = r.uN(u.offSize)
	} else {
		abbrOff = r.uN(u.offSize)
		u.addrSize = int(r.u8())
	}
	if r.err != nil {
		return nil, fmt.Errorf("unit header: %w", r.err)
	}
	switch u.addrSize {
	case 1, 2, 4, 8:
	default:
		return nil, fmt.Errorf("unsupported address size %d", u.addrSize)
	}
	t, ok := cache[abbrOff]
	if !ok {
		var err error
		if t, err = parseAbbrevs(s.abbrev, abbrOff); err != nil {
			return nil, err
		}
		cache[abbrOff] = t
	}
	u.abbrevs = t
	r.off = int(h.dieOff)
	code := r.uleb()
	if r.err != nil || code == 0 {
		return nil, fmt.Errorf("unit has no root entry")
	}
	a := t.get(code)
	if a == nil {
		return nil, fmt.Errorf("root entry: unknown abbreviation %d", code)
	}
	u.tag, u.rootChildren = a.tag, a.children
	// The bases must be known before strx/addrx values of the root itself are decoded, so
	// the root is read twice: bases first, then everything else.
	start := r.off
	for pass := 0; pass < 2; pass++ {
		r.off = start
		if pass == 1 && h.unitType == utSplitCompile {
			// A split unit's bases are implicit: its parts of .debug_str_offsets and
			// .debug_rnglists in the package each start with their header.
			hdr := uint64(8)
			if h.dwarf64 {
				hdr = 16
			}
			if u.strOffsetsBase == 0 {
				u.strOffsetsBase = hdr
			}
			if u.rnglistsBase == 0 {
				u.rnglistsBase = hdr + 4
			}
		}
		for _, sp := range a.attrs {
			want := pass == 0 && (sp.attr == atStrOffsetsBase || sp.attr == atAddrBase || sp.attr == atRnglistsBase || sp.attr == atGNUAddrBase) ||
				pass == 1 && (sp.attr == atCompDir || sp.attr == atName || sp.attr == atLowPC || sp.attr == atStmtList || sp.attr == atLanguage ||
					sp.attr == atGNUDwoName || sp.attr == atDwoName || sp.attr == atGNUDwoID || sp.attr == atGNURangesBase)
			v, err := s.readAttr(r, u, sp.form, sp.implicit, want)
			if err != nil {
				return nil, fmt.Errorf("root entry: %w", err)
			}
			if !want {
				continue
			}
			switch sp.attr {
			case atStrOffsetsBase:
				u.strOffsetsBase = v.u
			case atAddrBase, atGNUAddrBase:
				u.addrBase = v.u
			case atRnglistsBase:
				u.rnglistsBase = v.u
			case atCompDir:
				u.compDir = v.s
			case atName:
				u.name = v.s
			case atLanguage:
				if v.class == clsConst {
					u.language = v.u
				}
			case atLowPC:
				if v.class == clsAddr {
					u.base = v.u
				}
			case atStmtList:
				if v.class == clsSecOff || v.class == clsConst {
					u.stmtList = int64(v.u)
				}
			case atGNUDwoName:
				u.gnuSkeleton, u.dwoName = true, v.s
			case atDwoName:
				u.dwoName = v.s
			case atGNUDwoID:
				// Before DWARF 5 the DWO ID is an attribute of the root, not of the header.
				if h.version < 5 && v.class == clsConst {
					u.hdr.dwoID = v.u
				}
			case atGNURangesBase:
				if v.class == clsSecOff || v.class == clsConst {
					u.gnuRangesBase = v.u
				}
			}
		}
	}
	u.rootOff = uint64(r.off)
	return u, nil
}

// ranges decodes a DW_AT_ranges value: an offset into .debug_ranges (DWARF 4) or
// .debug_rnglists, or a DW_FORM_rnglistx index. At most maxRanges entries are read.
func (s *dieSecs) rangeList(u *unitCtx, v attrVal, out [][2]uint64) ([][2]uint64, error) {
	const maxRanges = 1 << 20
	if u.hdr.version < 5 {
		if v.class != clsSecOff && v.class != clsConst {
			return out, fmt.Errorf("DW_AT_ranges of class %d", v.class)
		}
		off := v.u + u.rangesBase
		if off < v.u || off >= uint64(len(s.ranges)) {
			return out, fmt.Errorf("range list offset %#x beyond .debug_ranges", off)
		}
		r := &secReader{data: s.ranges, off: int(off), order: s.order}
		base := u.base
		maxAddr := ^uint64(0) >> (64 - 8*uint(u.addrSize))
		for n := 0; n < maxRanges; n++ {
			lo, hi := r.uN(u.addrSize), r.uN(u.addrSize)
			if r.err != nil {
				return out, fmt.Errorf("range list at %#x: %w", off, r.err)
			}
			switch {
			case lo == 0 && hi == 0:
				return out, nil
			case lo == maxAddr:
				base = hi
			default:
				out = append(out, [2]uint64{base + lo, base + hi})
			}
		}
		return out, fmt.Errorf("range list at %#x: more than %d entries", off, maxRanges)
	}
	off := v.u
	switch v.class {
	case clsRnglistx:
		p := u.rnglistsBase + v.u*uint64(u.offSize)
		if v.u > uint64(len(s.rnglists)) || p < u.rnglistsBase || p+uint64(u.offSize) > uint64(len(s.rnglists)) {
			return out, fmt.Errorf("range list index %d beyond .debug_rnglists", v.u)
		}
		r := &secReader{data: s.rnglists, off: int(p), order: s.order}
		off = u.rnglistsBase + r.uN(u.offSize)
	case clsSecOff, clsConst:
	default:
		return out, fmt.Errorf("DW_AT_ranges of class %d", v.class)
	}
	if off >= uint64(len(s.rnglists)) {
		return out, fmt.Errorf("range list offset %#x beyond .debug_rnglists", off)
	}
	r := &secReader{data: s.rnglists, off: int(off), order: s.order}
	base := u.base
	for n := 0; n < maxRanges; n++ {
		kind := r.u8()
		var lo, hi uint64
		var err error
		switch kind {
		case 0: // end_of_list
			return out, r.err
		case 1: // base_addressx
			base, err = s.addrx(u, r.uleb())
			if err != nil {
				return out, err
			}
			continue
		case 2: // startx_endx
			i, j := r.uleb(), r.uleb()
			if lo, err = s.addrx(u, i); err == nil {
				hi, err = s.addrx(u, j)
			}
		case 3: // startx_length
			i, l := r.uleb(), r.uleb()
			lo, err = s.addrx(u, i)
			hi = lo + l
		case 4: // offset_pair
			a, b := r.uleb(), r.uleb()
			lo, hi = base+a, base+b
		case 5: // base_address
			base = r.uN(u.addrSize)
			continue
		case 6: // start_end
			lo, hi = r.uN(u.addrSize), r.uN(u.addrSize)
		case 7: // start_length
			lo = r.uN(u.addrSize)
			hi = lo + r.uleb()
		default:
			return out, fmt.Errorf("range list at %#x: unknown entry kind %d", off, kind)
		}
		if err != nil {
			return out, err
		}
		if r.err != nil {
			return out, fmt.Errorf("range list at %#x: %w", off, r.err)
		}
		out = append(out, [2]uint64{lo, hi})
	}
	return out, fmt.Errorf("range list at %#x: more than %d entries", off, maxRanges)
}

// unitIndexOf finds the unit holding a .debug_info offset.
func unitIndexOf(units []unitHeader, off uint64) int {
	i := sort.Search(len(units), func(i int) bool { return units[i].end > off })
	if i == len(units) || off < units[i].dieOff {
		return -1
	}
	return i
}
