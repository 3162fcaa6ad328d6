package dwarfsym

import (
	"encoding/binary"
	"fmt"
)

// Split DWARF (-gsplit-dwarf): the executable keeps a skeleton unit per compilation unit (its
// ranges, line table, .debug_addr and a DWO ID) and the functions and inlined instances move
// to .dwo files, which dwp or llvm-dwp packs into one .dwp beside the executable. A DWARF
// package is read here: its .debug_cu_index says which part of each .dwo section belongs to
// which DWO ID.
//
// Two generations exist. DWARF 5 split units (unit types DW_UT_skeleton/DW_UT_split_compile,
// index version 5) and GNU's pre-standard DWARF 4 extension that gcc -gdwarf-4 -gsplit-dwarf
// still writes: an ordinary compile unit root with DW_AT_GNU_dwo_name/_dwo_id/_addr_base/
// _ranges_base, DW_FORM_GNU_addr_index/_str_index, a .debug_str_offsets.dwo without header,
// range lists left in the executable's .debug_ranges, and binutils' dwp index version 2. Both
// are read the same way.

// PackageSectionNames are the sections of a DWARF package that Load reads, by key (the
// section name without ".debug_").
var PackageSectionNames = []string{"info.dwo", "abbrev.dwo", "str.dwo", "str_offsets.dwo", "rnglists.dwo", "cu_index"}

// A Package is a parsed DWARF package (.dwp), ready for Load.
type Package struct {
	secs  map[string][]byte
	units map[uint64]contribution // by DWO ID
}

// contribution is where one unit's parts lie in the package's sections: offset and size in
// each, by DW_SECT kind. secs, when set, are the sections of the unit's own .dwo file.
type contribution struct {
	off, size [sectMax]uint64
	secs      map[string][]byte
}

// DW_SECT kinds of DWARF 5 unit indexes (section 7.3.5.3).
const (
	sectInfo       = 1
	sectAbbrev     = 3
	sectLine       = 4
	sectLoclists   = 5
	sectStrOffsets = 6
	sectMacro      = 7
	sectRnglists   = 8
	sectMax        = 9
)

// maxIndexUnits bounds the units an index may declare before any is read.
const maxIndexUnits = 1 << 22

// NewPackage parses the sections of a DWARF package (keys as in PackageSectionNames): DWARF 5
// packages (index version 5) and GNU's version 2 of DWARF 4 -gsplit-dwarf builds.
func NewPackage(secs map[string][]byte, order binary.ByteOrder) (*Package, error) {
	idx := secs["cu_index"]
	if len(idx) < 16 {
		return nil, fmt.Errorf("dwp: .debug_cu_index of %d bytes", len(idx))
	}
	r := &secReader{data: idx, order: order}
	// GNU's version is a 4-byte field; DWARF 5's is 2 bytes followed by 2 of padding.
	version := r.u32()
	if version != 2 {
		version = uint32(order.Uint16(idx))
	}
	nSect, nUnits, nSlots := uint64(r.u32()), uint64(r.u32()), uint64(r.u32())
	if version != 5 && version != 2 {
		return nil, fmt.Errorf("dwp: unit index version %d: only versions 2 (GNU, DWARF 4) and 5 are read", version)
	}
	if nSect == 0 || nSect > 64 || nUnits > maxIndexUnits || nSlots > 2*maxIndexUnits || nUnits > nSlots {
		return nil, fmt.Errorf("dwp: unit index of %d sections, %d units, %d slots", nSect, nUnits, nSlots)
	}
	need := 16 + nSlots*12 + nSect*4 + nUnits*nSect*8
	if need > uint64(len(idx)) {
		return nil, fmt.Errorf("dwp: unit index needs %d bytes, has %d", need, len(idx))
	}
	sigs := make([]uint64, nSlots)
	for i := range sigs {
		sigs[i] = r.u64()
	}
	rows := make([]uint32, nSlots)
	for i := range rows {
		rows[i] = r.u32()
	}
	kinds := make([]uint32, nSect)
	for i := range kinds {
		kinds[i] = r.u32()
		// Kind 2 is DW_SECT_TYPES in version 2 and reserved in version 5.
		if kinds[i] == 0 || kinds[i] >= sectMax || kinds[i] == 2 && version == 5 {
			return nil, fmt.Errorf("dwp: unit index version %d names section kind %d", version, kinds[i])
		}
	}
	offs, sizes := r.off, r.off+int(nUnits*nSect*4)
	p := &Package{secs: secs, units: make(map[uint64]contribution, nUnits)}
	for i, row := range rows {
		if row == 0 {
			continue
		}
		if uint64(row) > nUnits {
			return nil, fmt.Errorf("dwp: slot %d names row %d of %d", i, row, nUnits)
		}
		var c contribution
		for k, kind := range kinds {
			// Version 2 numbers the same kinds as version 5 up to DW_SECT_STR_OFFSETS (6);
			// its 2 (types), 7 (macinfo) and 8 (macro) are nothing read here, and 8 must not
			// be taken for version 5's range lists.
			if version == 2 && (kind == 2 || kind > sectStrOffsets) {
				continue
			}
			at := (uint64(row)-1)*nSect*4 + uint64(k)*4
			c.off[kind] = uint64(order.Uint32(idx[offs+int(at):]))
			c.size[kind] = uint64(order.Uint32(idx[sizes+int(at):]))
		}
		p.units[sigs[i]] = c
	}
	if r.err != nil {
		return nil, fmt.Errorf("dwp: unit index: %w", r.err)
	}
	return p, nil
}

// part returns the slice of the package section key that unit c owns, by kind; nil when the
// unit has none there.
func (p *Package) part(c contribution, key string, kind int) ([]byte, error) {
	sec := p.sections(c)[key]
	if c.size[kind] == 0 {
		return nil, nil
	}
	off, size := c.off[kind], c.size[kind]
	if off > uint64(len(sec)) || size > uint64(len(sec))-off {
		return nil, fmt.Errorf("dwp: .debug_%s part [%#x, +%#x) beyond %d bytes", key, off, size, len(sec))
	}
	return sec[off : off+size], nil
}

// unit returns the contribution of the unit with DWO ID id; p may be nil.
func (p *Package) unit(id uint64) (contribution, bool) {
	if p == nil {
		return contribution{}, false
	}
	c, ok := p.units[id]
	return c, ok
}

func (p *Package) sections(c contribution) map[string][]byte {
	if c.secs != nil {
		return c.secs
	}
	return p.secs
}

// A SplitUnit is a skeleton unit's reference to its split unit: the DWO ID and the .dwo file
// the compiler wrote it to (DW_AT_dwo_name, relative to DW_AT_comp_dir unless absolute).
type SplitUnit struct {
	DWOID   uint64
	CompDir string
	DWOName string
}

// SplitUnits lists the skeleton units of DWARF sections (keys as in Load), so that a caller
// without the DWARF package can find the .dwo files.
func SplitUnits(secs map[string][]byte, order binary.ByteOrder) ([]SplitUnit, error) {
	units, err := scanUnits(secs["info"], order)
	if err != nil {
		return nil, fmt.Errorf("dwarfsym: %w", err)
	}
	s := &dieSecs{info: secs["info"], abbrev: secs["abbrev"], str: secs["str"], lineStr: secs["line_str"],
		strOffsets: secs["str_offsets"], addr: secs["addr"], order: order}
	cache := map[uint64]*abbrevTable{}
	var out []SplitUnit
	for _, h := range units {
		if h.version >= 5 && h.unitType != utSkeleton {
			continue
		}
		u, err := s.openUnit(h, cache)
		if err != nil {
			return nil, fmt.Errorf("dwarfsym: unit at offset %#x: %w", h.off, err)
		}
		if h.version < 5 && !u.gnuSkeleton {
			continue
		}
		out = append(out, SplitUnit{DWOID: u.hdr.dwoID, CompDir: u.compDir, DWOName: u.dwoName})
	}
	return out, nil
}

// HasSplitUnits reports whether the first unit of DWARF sections (keys as in Load) is a
// skeleton, DWARF 5's or GNU's: compilers split every unit of a build or none.
func HasSplitUnits(secs map[string][]byte, order binary.ByteOrder) bool {
	units, err := scanUnits(secs["info"], order)
	if err != nil || len(units) == 0 {
		return false
	}
	h := units[0]
	if h.version >= 5 {
		return h.unitType == utSkeleton
	}
	s := &dieSecs{info: secs["info"], abbrev: secs["abbrev"], str: secs["str"], lineStr: secs["line_str"],
		strOffsets: secs["str_offsets"], addr: secs["addr"], order: order}
	u, err := s.openUnit(h, map[uint64]*abbrevTable{})
	return err == nil && u.gnuSkeleton
}

// DWOJoinedSections are the keys (as in PackageSectionNames) of the .dwo sections that an
// object may hold several of: gcc writes each type unit in a section of its own, a
// .debug_info.dwo in DWARF 5 and a .debug_types.dwo in DWARF 4, beside the one of the split
// compilation unit. Joined in file order, as a DWARF package holds them, they are what
// NewPackageFromObjects and DWOUnits read; every other section must be one.
var DWOJoinedSections = []string{"info.dwo", "types.dwo"}

// splitCompileUnit returns the one split compilation unit of a .dwo file's sections (keys as
// in PackageSectionNames, several .debug_info.dwo joined as DWOJoinedSections says), wherever
// among its type units it lies.
func splitCompileUnit(secs map[string][]byte, order binary.ByteOrder) (DWOUnit, error) {
	units, err := DWOUnits(map[string][]byte{"info.dwo": secs["info.dwo"], "abbrev.dwo": secs["abbrev.dwo"],
		"str.dwo": secs["str.dwo"], "str_offsets.dwo": secs["str_offsets.dwo"]}, order)
	if err != nil {
		return DWOUnit{}, err
	}
	var cu *DWOUnit
	for i, u := range units {
		if u.Type {
			continue
		}
		if cu != nil {
			return DWOUnit{}, fmt.Errorf("two split compilation units (DWO IDs %#x and %#x at offsets %#x and %#x of .debug_info.dwo): a .dwo holds one",
				cu.ID, u.ID, cu.Off, u.Off)
		}
		cu = &units[i]
	}
	if cu == nil {
		return DWOUnit{}, fmt.Errorf("no split compilation unit among the %d units of .debug_info.dwo", len(units))
	}
	return *cu, nil
}

// DWOUnitID returns the DWO ID of the split compilation unit of a .dwo file's sections (keys
// as in PackageSectionNames, several .debug_info.dwo joined as DWOJoinedSections says), or
// why NewPackageFromObjects would refuse the object.
func DWOUnitID(secs map[string][]byte, order binary.ByteOrder) (uint64, error) {
	cu, err := splitCompileUnit(secs, order)
	return cu.ID, err
}

// NewPackageFromObjects makes a Package of .dwo files (each one's sections, keyed as in
// PackageSectionNames without cu_index, several .debug_info.dwo joined as DWOJoinedSections
// says): what Load reads when the .dwo files were not packed. Each object's split
// compilation unit is found among its type units, which are not read, as a package's unit
// index finds it.
func NewPackageFromObjects(objs []map[string][]byte, order binary.ByteOrder) (*Package, error) {
	p := &Package{units: make(map[uint64]contribution, len(objs))}
	for i, secs := range objs {
		cu, err := splitCompileUnit(secs, order)
		if err != nil {
			return nil, fmt.Errorf("dwo %d: %w", i, err)
		}
		c := contribution{secs: secs}
		for kind, key := range map[int]string{sectAbbrev: "abbrev.dwo", sectStrOffsets: "str_offsets.dwo", sectRnglists: "rnglists.dwo"} {
			c.size[kind] = uint64(len(secs[key]))
		}
		c.off[sectInfo], c.size[sectInfo] = cu.Off, cu.End-cu.Off
		p.units[cu.ID] = c
	}
	return p, nil
}

// splitUnit decodes the split unit of skeleton unit u from the package into the unit result
// dc is filling, with the skeleton's line table (files), addresses and base: a split unit
// names files by the skeleton's line table and addresses by index into the executable's
// .debug_addr; a DWARF 4 one keeps its range lists in the executable's .debug_ranges too.
func (dc *decoder) splitUnit(u *unitCtx, files *lineFiles) error {
	c, ok := dc.pkg.unit(u.hdr.dwoID)
	if !ok {
		return fmt.Errorf("skeleton unit %q: DWO ID %#x is not in the DWARF package", u.name, u.hdr.dwoID)
	}
	secs := map[string][]byte{"str": dc.pkg.sections(c)["str.dwo"], "addr": dc.sec["addr"], "ranges": dc.sec["ranges"]}
	for _, p := range []struct {
		key, dwo string
		kind     int
	}{{"info", "info.dwo", sectInfo}, {"abbrev", "abbrev.dwo", sectAbbrev}, {"str_offsets", "str_offsets.dwo", sectStrOffsets}, {"rnglists", "rnglists.dwo", sectRnglists}} {
		b, err := dc.pkg.part(c, p.dwo, p.kind)
		if err != nil {
			return err
		}
		secs[p.key] = b
	}
	units, err := scanUnits(secs["info"], dc.s.order)
	if err != nil {
		return fmt.Errorf("split unit of DWO ID %#x: %w", u.hdr.dwoID, err)
	}
	if len(units) != 1 {
		return fmt.Errorf("split unit of DWO ID %#x: the package's part holds %d units, not one", u.hdr.dwoID, len(units))
	}
	sub := newDecoder(secs, dc.s.order, units)
	sub.res, sub.strIdx = dc.res, dc.strIdx
	su, err := sub.unitCtx(0)
	if err != nil {
		return fmt.Errorf("split unit of DWO ID %#x: %w", u.hdr.dwoID, err)
	}
	if su.hdr.dwoID != u.hdr.dwoID {
		return fmt.Errorf("split unit of DWO ID %#x: the package's part holds the unit of DWO ID %#x", u.hdr.dwoID, su.hdr.dwoID)
	}
	// Its addresses are indexes into the skeleton's part of .debug_addr, its DWARF 4 range
	// list offsets relative to the skeleton's DW_AT_GNU_ranges_base.
	su.addrBase = u.addrBase
	su.rangesBase = u.gnuRangesBase
	if su.base == 0 {
		su.base = u.base
	}
	if !su.rootChildren {
		return nil
	}
	return sub.walk(su, files)
}

// Units returns the number of split units the package holds.
func (p *Package) Units() int { return len(p.units) }

// A DWOUnit is one unit of a split DWARF object's .debug_info.dwo or .debug_types.dwo, as a
// packer of DWARF packages needs it: where it lies and the ID a unit index files it under.
type DWOUnit struct {
	Off, End uint64 // the unit's bytes in its section, header included
	Version  int
	DWARF64  bool
	// Type is set for type units (DWARF 5 split type units in .debug_info.dwo, DWARF 4 units
	// of .debug_types.dwo); ID is then the type signature, else the DWO ID.
	Type bool
	ID   uint64
}

// DWOUnits lists the units of a .dwo file's sections (keys as in PackageSectionNames, with
// "types.dwo" for DWARF 4 type units): the split compilation unit with its DWO ID (from the
// header in DWARF 5, from the root's DW_AT_GNU_dwo_id before) and any type units with their
// signatures. Units of other types are refused: a .dwo holds nothing else.
func DWOUnits(secs map[string][]byte, order binary.ByteOrder) ([]DWOUnit, error) {
	var out []DWOUnit
	for _, key := range []string{"info.dwo", "types.dwo"} {
		units, err := scanUnits(secs[key], order)
		if err != nil {
			return nil, fmt.Errorf(".debug_%s: %w", key, err)
		}
		for _, h := range units {
			u := DWOUnit{Off: h.off, End: h.end, Version: h.version, DWARF64: h.dwarf64}
			offSize, lenSize := uint64(4), uint64(4)
			if h.dwarf64 {
				offSize, lenSize = 8, 12
			}
			switch {
			case key == "types.dwo":
				if h.version != 4 {
					return nil, fmt.Errorf(".debug_types.dwo: unit at offset %#x of DWARF version %d, want 4", h.off, h.version)
				}
				// unit_length, version, debug_abbrev_offset, address_size, type_signature.
				at := h.off + lenSize + 2 + offSize + 1
				if at+8 > h.end {
					return nil, fmt.Errorf(".debug_types.dwo: unit at offset %#x: truncated header", h.off)
				}
				u.Type, u.ID = true, order.Uint64(secs[key][at:])
			case h.version >= 5 && h.unitType == utSplitCompile:
				u.ID = h.dwoID
			case h.version >= 5 && h.unitType == utSplitType:
				// unit_length, version, unit_type, address_size, debug_abbrev_offset, type_signature.
				at := h.off + lenSize + 2 + 1 + 1 + offSize
				u.Type, u.ID = true, order.Uint64(secs[key][at:])
			case h.version >= 5:
				return nil, fmt.Errorf(".debug_info.dwo: unit at offset %#x of type %#x, want a split compilation or type unit", h.off, h.unitType)
			default:
				s := &dieSecs{info: secs[key], abbrev: secs["abbrev.dwo"], str: secs["str.dwo"],
					strOffsets: secs["str_offsets.dwo"], order: order}
				cu, err := s.openUnit(h, map[uint64]*abbrevTable{})
				if err != nil {
					return nil, fmt.Errorf(".debug_info.dwo: unit at offset %#x: %w", h.off, err)
				}
				if cu.hdr.dwoID == 0 {
					return nil, fmt.Errorf(".debug_info.dwo: DWARF %d unit at offset %#x without DW_AT_GNU_dwo_id", h.version, h.off)
				}
				u.ID = cu.hdr.dwoID
			}
			out = append(out, u)
		}
	}
	return out, nil
}
