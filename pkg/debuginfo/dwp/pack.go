package dwp

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"math"
	"slices"
)

// A Builder collects split DWARF objects and writes their package.
type Builder struct {
	objs []*Object
	byID map[uint64]*Object
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder { return &Builder{byID: map[uint64]*Object{}} }

// Add adds o to the package. An object whose DWO ID is in the package already is skipped
// (added false) when its content is the same, as when two skeletons name one file, and
// refused when it differs: a unit index has one row per ID and either choice could be wrong.
// Objects of both index versions, or of different machines, cannot share a package.
func (b *Builder) Add(o *Object) (added bool, err error) {
	if p, ok := b.byID[o.DWOID]; ok {
		if p.sameContent(o) {
			return false, nil
		}
		return false, fmt.Errorf("%s: DWO ID %#x is %s's too, with different content: conflicting split units", o.Name, o.DWOID, p.Name)
	}
	if len(b.objs) > 0 {
		first := b.objs[0]
		if o.Version != first.Version {
			return false, fmt.Errorf("%s: %s split units, %s has %s ones: a package has one unit index version", o.Name, generation(o.Version), first.Name, generation(first.Version))
		}
		if o.class != first.class || o.data != first.data || o.machine != first.machine {
			return false, fmt.Errorf("%s: %v %v %v, %s is %v %v %v", o.Name, o.class, o.data, o.machine, first.Name, first.class, first.data, first.machine)
		}
	}
	b.objs = append(b.objs, o)
	b.byID[o.DWOID] = o
	return true, nil
}

func generation(version int) string {
	if version == 5 {
		return "DWARF 5"
	}
	return "GNU DWARF 4"
}

// Units returns the number of split compilation units added.
func (b *Builder) Units() int { return len(b.objs) }

// row is one unit's line of a unit index: its ID and its contribution to each section kind.
type row struct {
	id        uint64
	off, size [sectMax]uint64
}

// Stats describes a written package.
type Stats struct {
	Units     int   // split compilation units
	TypeUnits int   // type units kept (one per signature)
	Strings   int   // distinct strings in .debug_str.dwo
	Size      int64 // bytes written
}

// strPool is .debug_str.dwo of the package: each string once, in the order first used, as
// llvm-dwp writes it.
type strPool struct {
	data []byte
	at   map[string]uint64
}

func (p *strPool) offset(s []byte) uint64 {
	if off, ok := p.at[string(s)]; ok {
		return off
	}
	off := uint64(len(p.data))
	p.at[string(s)] = off
	p.data = append(append(p.data, s...), 0)
	return off
}

// Write writes the package as an ELF file of the objects' class, byte order and machine.
// Nothing is written when the package cannot be made.
func (b *Builder) Write(w io.Writer) (Stats, error) {
	if len(b.objs) == 0 {
		return Stats{}, fmt.Errorf("dwp: no split units to pack")
	}
	first := b.objs[0]
	version, order := first.Version, first.order
	out := map[string]*bytes.Buffer{}
	for _, key := range sectionKeys {
		out[key] = &bytes.Buffer{}
	}
	pool := &strPool{at: map[string]uint64{}}
	var cus, tus []row
	seenTU := map[uint64]bool{}
	for _, o := range b.objs {
		// The parts of the object every unit of it shares: its abbreviations, line tables,
		// location and range lists, macros and string offsets.
		var shared row
		for key, kind := range kinds[version] {
			data := o.secs[key]
			if key == "str_offsets.dwo" {
				var err error
				if data, err = o.rewriteStrOffsets(pool); err != nil {
					return Stats{}, err
				}
			}
			if len(data) > 0 { // an empty contribution is all zeros, as llvm-dwp writes it
				shared.off[kind], shared.size[kind] = uint64(out[key].Len()), uint64(len(data))
				out[key].Write(data)
			}
		}
		for _, u := range o.units {
			key, kind := "info.dwo", sectInfo
			if u.Type && version == 2 {
				key, kind = "types.dwo", sectTypes
			}
			if u.Type {
				// Type units of one signature describe one type: dwp and llvm-dwp keep the
				// first.
				if seenTU[u.ID] {
					continue
				}
				seenTU[u.ID] = true
			}
			r := shared
			r.id = u.ID
			r.off[kind], r.size[kind] = uint64(out[key].Len()), u.End-u.Off
			out[key].Write(o.secs[key][u.Off:u.End])
			if u.Type {
				// Its row names all of its object's parts, as llvm-dwp's does.
				tus = append(tus, r)
			} else {
				cus = append(cus, r)
			}
		}
	}
	out["str.dwo"].Write(pool.data)
	for _, key := range sectionKeys {
		// Unit indexes hold 32-bit offsets and sizes.
		if out[key].Len() > math.MaxUint32 {
			return Stats{}, fmt.Errorf("dwp: .debug_%s of the package would be %d bytes, more than a unit index can address", key, out[key].Len())
		}
	}
	var secs []section
	for _, key := range sectionKeys {
		if out[key].Len() > 0 {
			s := section{name: ".debug_" + key, data: out[key].Bytes(), flags: shfExclude}
			if key == "str.dwo" {
				s.flags |= elf.SHF_MERGE | elf.SHF_STRINGS
				s.entsize = 1
			}
			secs = append(secs, s)
		}
	}
	cuIndex, err := unitIndex(version, cus, order)
	if err != nil {
		return Stats{}, fmt.Errorf("dwp: .debug_cu_index: %w", err)
	}
	secs = append(secs, section{name: ".debug_cu_index", data: cuIndex, align: 4})
	if len(tus) > 0 {
		tuIndex, err := unitIndex(version, tus, order)
		if err != nil {
			return Stats{}, fmt.Errorf("dwp: .debug_tu_index: %w", err)
		}
		secs = append(secs, section{name: ".debug_tu_index", data: tuIndex, align: 4})
	}
	n, err := writeELF(w, elfHeader{class: first.class, data: first.data, osabi: first.osabi, machine: first.machine, flags: first.flags}, order, secs)
	st := Stats{Units: len(cus), TypeUnits: len(tus), Strings: len(pool.at), Size: n}
	if err != nil {
		return st, fmt.Errorf("dwp: write: %w", err)
	}
	return st, nil
}

// rewriteStrOffsets returns o's .debug_str_offsets.dwo with each entry naming its string's
// offset in the package's .debug_str.dwo; the header, if any, is kept.
func (o *Object) rewriteStrOffsets(pool *strPool) ([]byte, error) {
	so := o.secs["str_offsets.dwo"]
	if len(so) == 0 {
		return nil, nil
	}
	buf := slices.Clone(so[:o.strOffHdr])
	for i, s := range o.strs {
		off := pool.offset(s)
		if o.strOffSize == 4 {
			if off > math.MaxUint32 {
				return nil, fmt.Errorf("%s: .debug_str_offsets.dwo entry %d: the package's strings pass 4 GiB, beyond 32-bit DWARF", o.Name, i)
			}
			buf = o.order.AppendUint32(buf, uint32(off))
		} else {
			buf = o.order.AppendUint64(buf, off)
		}
	}
	return buf, nil
}

// unitIndex encodes a unit index (DWARF 5, section 7.3.5.3): a header, a hash table of S
// slots (the smallest power of two above 3U/2) mapping IDs to rows, the section kinds in
// use, then each row's offsets and sizes. Version 2 differs in its 4-byte version field and
// in its kinds' numbers.
func unitIndex(version int, rows []row, order byteOrder) ([]byte, error) {
	var cols []int
	for k := 1; k < sectMax; k++ {
		for _, r := range rows {
			if r.size[k] != 0 {
				cols = append(cols, k)
				break
			}
		}
	}
	u := uint64(len(rows))
	s := uint64(1)
	for s <= 3*u/2 {
		s <<= 1
	}
	if s > math.MaxUint32 {
		return nil, fmt.Errorf("%d units", u)
	}
	mask := s - 1
	ids := make([]uint64, s)
	slot := make([]uint32, s) // 1-based rows, 0 for an empty slot
	for i, r := range rows {
		h := r.id & mask
		step := ((r.id >> 32) & mask) | 1
		for slot[h] != 0 {
			if ids[h] == r.id {
				return nil, fmt.Errorf("ID %#x twice", r.id)
			}
			h = (h + step) & mask
		}
		ids[h], slot[h] = r.id, uint32(i+1)
	}
	var b []byte
	if version == 5 {
		b = order.AppendUint16(b, 5)
		b = order.AppendUint16(b, 0)
	} else {
		b = order.AppendUint32(b, uint32(version))
	}
	b = order.AppendUint32(b, uint32(len(cols)))
	b = order.AppendUint32(b, uint32(u))
	b = order.AppendUint32(b, uint32(s))
	for _, id := range ids {
		b = order.AppendUint64(b, id)
	}
	for _, r := range slot {
		b = order.AppendUint32(b, r)
	}
	for _, k := range cols {
		b = order.AppendUint32(b, uint32(k))
	}
	for _, r := range rows {
		for _, k := range cols {
			b = order.AppendUint32(b, uint32(r.off[k]))
		}
	}
	for _, r := range rows {
		for _, k := range cols {
			b = order.AppendUint32(b, uint32(r.size[k]))
		}
	}
	return b, nil
}
