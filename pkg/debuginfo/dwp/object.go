// Package dwp writes DWARF packages (.dwp) from split DWARF objects (.dwo), as binutils' dwp
// and llvm-dwp do: one section per kind holding every object's contribution one after the
// other, one .debug_str.dwo of the strings they use, each object's .debug_str_offsets.dwo
// rewritten to offsets into it, and a unit index (.debug_cu_index, and .debug_tu_index when
// there are type units) that says which part of each section belongs to which unit.
//
// It exists so that a client can send the store a -gsplit-dwarf build whose .dwo files were
// never packed: the server reads only what it is sent, and a .dwo is named by a path on the
// build machine. DWARF 5 split units get an index of version 5 (DWARF 5, section 7.3.5), GNU's
// DWARF 4 ones (gcc or clang -gdwarf-4 -gsplit-dwarf) the version 2 that binutils' dwp
// writes for them.
package dwp

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/profsym/profsym/pkg/debuginfo/dwarfsym"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
)

// sectionKeys are the .dwo sections a package carries, by name without ".debug_", in the
// order they are written.
var sectionKeys = []string{"info.dwo", "types.dwo", "abbrev.dwo", "line.dwo", "loc.dwo", "loclists.dwo",
	"rnglists.dwo", "str_offsets.dwo", "str.dwo", "macinfo.dwo", "macro.dwo"}

// Unit index section kinds (DW_SECT_*). Version 5 (DWARF 5, section 7.3.5.3) and GNU's
// version 2 agree up to DW_SECT_STR_OFFSETS and part after it.
const (
	sectInfo       = 1
	sectTypes      = 2 // version 2 only
	sectAbbrev     = 3
	sectLine       = 4
	sectLoc        = 5 // version 2: .debug_loc.dwo; version 5: .debug_loclists.dwo
	sectStrOffsets = 6
	sectMacinfoV2  = 7
	sectMacroV2    = 8
	sectMacroV5    = 7
	sectRnglistsV5 = 8
	sectMax        = 9
)

// kinds maps the sections that are indexed whole per object to their kind, by index
// version. .debug_info.dwo and .debug_types.dwo are indexed per unit, .debug_str.dwo not at
// all.
var kinds = map[int]map[string]int{
	5: {"abbrev.dwo": sectAbbrev, "line.dwo": sectLine, "loclists.dwo": sectLoc, "str_offsets.dwo": sectStrOffsets,
		"macro.dwo": sectMacroV5, "rnglists.dwo": sectRnglistsV5},
	2: {"abbrev.dwo": sectAbbrev, "line.dwo": sectLine, "loc.dwo": sectLoc, "str_offsets.dwo": sectStrOffsets,
		"macinfo.dwo": sectMacinfoV2, "macro.dwo": sectMacroV2},
}

// An Object is a split DWARF object (.dwo) read and checked, ready to be packed.
type Object struct {
	// Name says where the object came from, in errors.
	Name string
	// DWOID is the DWO ID of its split compilation unit, which the skeleton unit in the
	// executable names.
	DWOID uint64
	// Version is the unit index version its units need: 5 for DWARF 5 split units, 2 for
	// GNU's DWARF 4 ones.
	Version int

	class   elf.Class
	data    elf.Data
	osabi   elf.OSABI
	machine elf.Machine
	flags   uint32
	order   byteOrder
	secs    map[string][]byte
	units   []dwarfsym.DWOUnit
	// strOffHdr is the size of the header of .debug_str_offsets.dwo (0 in GNU's DWARF 4,
	// 8 or 16 in DWARF 5), strOffSize that of its entries; strs the strings they name.
	strOffHdr, strOffSize int
	strs                  [][]byte
}

// byteOrder reads and appends: what debug/elf's binary.LittleEndian and BigEndian both do.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// ErrNotDWO is wrapped by ReadObject's errors about files that are no split DWARF object
// at all (as opposed to damaged ones).
var ErrNotDWO = errors.New("not a split DWARF object")

// maxObjectSize bounds what ReadObject reads: a .dwo of one compilation unit is far smaller.
const maxObjectSize = 4 << 30

// ReadObject reads the split DWARF object of size bytes at r; name says where it came from
// in errors. Everything a package needs from it is checked here, so that packing it fails
// only on what depends on the other objects (duplicate IDs, a mix of versions, sizes).
func ReadObject(name string, r io.ReaderAt, size int64) (*Object, error) {
	if size > maxObjectSize {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a split DWARF object may have", name, size, int64(maxObjectSize))
	}
	f, err := elfx.Open(r, size, elfx.Limits{MaxSections: 1 << 16, MaxSectionSize: maxObjectSize, MaxDecompressedSize: maxObjectSize})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ef := f.ELF()
	if f.Section(".debug_cu_index") != nil || f.Section(".debug_tu_index") != nil {
		return nil, fmt.Errorf("%s: %w: it is a DWARF package already (it has a unit index)", name, ErrNotDWO)
	}
	for _, s := range ef.Sections {
		// A .dwo is written final by the compiler; one that needs relocating is an object
		// file whose DWARF a package would carry wrong.
		if (s.Type == elf.SHT_REL || s.Type == elf.SHT_RELA) && s.Info < uint32(len(ef.Sections)) &&
			bytes.HasPrefix([]byte(ef.Sections[s.Info].Name), []byte(".debug_")) {
			return nil, fmt.Errorf("%s: %w: %s relocates %s", name, ErrNotDWO, s.Name, ef.Sections[s.Info].Name)
		}
	}
	secs, err := dwoSections(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(secs["info.dwo"]) == 0 {
		return nil, fmt.Errorf("%s: %w: no .debug_info.dwo", name, ErrNotDWO)
	}
	order, ok := ef.ByteOrder.(byteOrder)
	if !ok {
		return nil, fmt.Errorf("%s: byte order %v", name, ef.Data)
	}
	o := &Object{Name: name, class: ef.Class, data: ef.Data, osabi: ef.OSABI, machine: ef.Machine, order: order, secs: secs}
	if err := o.readFlags(r); err != nil {
		return nil, err
	}
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return o, nil
}

// dwoSections returns the .dwo sections of f, decompressed, by key (sectionKeys). Units may
// come in several sections of one name (gcc 12 writes each DWARF 5 type unit in a
// .debug_info.dwo of its own, and DWARF 4 ones in .debug_types.dwo sections): those are
// joined in file order, as a package holds them, and as the engine reads a .dwo. Every other
// section must be one, since unit headers and the string offsets name offsets into it.
func dwoSections(f *elfx.File) (map[string][]byte, error) {
	return f.DWARFSectionsJoinedOf(sectionKeys, dwarfsym.DWOJoinedSections...)
}

// readFlags reads e_flags, which debug/elf does not keep and which some machines' readers
// look at to tell ABIs apart.
func (o *Object) readFlags(r io.ReaderAt) error {
	at, n := int64(48), 4 // ELF64: after ident, type, machine, version, entry, phoff, shoff
	if o.class == elf.ELFCLASS32 {
		at = 36
	}
	b := make([]byte, n)
	if _, err := r.ReadAt(b, at); err != nil {
		return fmt.Errorf("%s: ELF header: %w", o.Name, err)
	}
	o.flags = o.order.Uint32(b)
	return nil
}

// check finds the object's units and strings and refuses what a package could not carry.
func (o *Object) check() error {
	units, err := dwarfsym.DWOUnits(o.secs, o.order)
	if err != nil {
		return err
	}
	var cu *dwarfsym.DWOUnit
	for i, u := range units {
		if u.Type {
			continue
		}
		if cu != nil {
			return fmt.Errorf("two split compilation units (DWO IDs %#x and %#x): a .dwo holds one", cu.ID, u.ID)
		}
		cu = &units[i]
	}
	if cu == nil {
		return errors.New("no split compilation unit in .debug_info.dwo")
	}
	for _, u := range units {
		if (u.Version >= 5) != (cu.Version >= 5) {
			return fmt.Errorf("units of DWARF versions %d and %d in one object", cu.Version, u.Version)
		}
	}
	o.units, o.DWOID, o.Version = units, cu.ID, 2
	if cu.Version >= 5 {
		o.Version = 5
	}
	for _, key := range slices.Sorted(maps.Keys(o.secs)) {
		// Units and strings are packed apart from the index's columns; DWARF 4 type units too.
		packedApart := key == "info.dwo" || key == "str.dwo" || key == "types.dwo" && o.Version == 2
		if _, ok := kinds[o.Version][key]; !ok && !packedApart && len(o.secs[key]) > 0 {
			return fmt.Errorf(".debug_%s beside DWARF %d split units: a unit index of version %d has no place for it", key, cu.Version, o.Version)
		}
	}
	return o.readStrOffsets(cu.DWARF64)
}

// readStrOffsets reads .debug_str_offsets.dwo: in DWARF 5 one contribution with its header
// (every unit of a .dwo shares it), in GNU's DWARF 4 bare offsets. Each must name a
// NUL-terminated string of .debug_str.dwo.
func (o *Object) readStrOffsets(dwarf64 bool) error {
	so, str := o.secs["str_offsets.dwo"], o.secs["str.dwo"]
	o.strOffSize = 4
	if dwarf64 {
		o.strOffSize = 8
	}
	if o.Version == 5 && len(so) > 0 {
		if len(so) < 8 {
			return fmt.Errorf(".debug_str_offsets.dwo of %d bytes: shorter than its header", len(so))
		}
		length, hdr := uint64(o.order.Uint32(so)), 8
		if length == 0xffffffff {
			if len(so) < 16 {
				return fmt.Errorf(".debug_str_offsets.dwo of %d bytes: shorter than its 64-bit header", len(so))
			}
			length, hdr, o.strOffSize = o.order.Uint64(so[4:]), 16, 8
		} else if length >= 0xfffffff0 {
			return fmt.Errorf(".debug_str_offsets.dwo: reserved length %#x", length)
		}
		if v := o.order.Uint16(so[hdr-4:]); v != 5 {
			return fmt.Errorf(".debug_str_offsets.dwo: version %d, want 5", v)
		}
		// One contribution, all of the section: the units of a .dwo have no
		// DW_AT_str_offsets_base to choose another.
		if length != uint64(len(so)-hdr+4) {
			return fmt.Errorf(".debug_str_offsets.dwo: its header says %d bytes follow its length, the section has %d", length, len(so)-hdr+4)
		}
		o.strOffHdr = hdr
	}
	body := so[o.strOffHdr:]
	if len(body)%o.strOffSize != 0 {
		return fmt.Errorf(".debug_str_offsets.dwo: %d bytes of offsets, not a multiple of %d", len(body), o.strOffSize)
	}
	o.strs = make([][]byte, 0, len(body)/o.strOffSize)
	for i := 0; i < len(body); i += o.strOffSize {
		var off uint64
		if o.strOffSize == 8 {
			off = o.order.Uint64(body[i:])
		} else {
			off = uint64(o.order.Uint32(body[i:]))
		}
		if off >= uint64(len(str)) {
			return fmt.Errorf(".debug_str_offsets.dwo entry %d: offset %#x beyond .debug_str.dwo of %d bytes", i/o.strOffSize, off, len(str))
		}
		end := bytes.IndexByte(str[off:], 0)
		if end < 0 {
			return fmt.Errorf(".debug_str_offsets.dwo entry %d: the string at %#x of .debug_str.dwo has no terminating NUL", i/o.strOffSize, off)
		}
		o.strs = append(o.strs, str[off:off+uint64(end)])
	}
	return nil
}

// TypeUnits returns the number of type units in the object.
func (o *Object) TypeUnits() int {
	n := 0
	for _, u := range o.units {
		if u.Type {
			n++
		}
	}
	return n
}

// sameContent reports whether o and p hold the same bytes in every section.
func (o *Object) sameContent(p *Object) bool {
	for _, key := range sectionKeys {
		if !bytes.Equal(o.secs[key], p.secs[key]) {
			return false
		}
	}
	return true
}
