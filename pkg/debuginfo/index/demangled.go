package index

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	"github.com/profsym/profsym/pkg/debuginfo/demangle"
)

// Names are demangled when they are read, not when the index is built. A C++ binary's DWARF
// names a function by its linkage name, and llvm-symbolizer prints that name demangled; it
// demangles only the names it prints, where demangling every function of the index at build
// time was a quarter of the CPU time of indexing a C++ program with 1.39 GB of DWARF. An
// index therefore holds, for each such name, a string ID whose string is shown demangled
// (Builder.Demangled): it stores the mangled bytes once, under the linkage name's ID, and the
// demangled spelling is made by String, Frame and the StringTable when first asked for, and
// kept.

// demangled marks the string IDs whose string is a mangled name shown demangled.
type demangled struct {
	bits []uint64 // by string ID
	rank []uint32 // rank[w]: the marks in bits[:w]
	refs []demangledRef

	// memo holds each name once demangled, by its rank among the marks: made on the first
	// read, it costs 8 bytes per mark, and the names it keeps are at most those an index that
	// demangled every name when built would hold.
	memoOnce sync.Once
	memo     []atomic.Pointer[string]
}

// demangledRef says that string id is string src shown demangled.
type demangledRef struct{ id, src uint32 }

func newDemangled(ns int, refs []demangledRef) *demangled {
	if len(refs) == 0 {
		return nil
	}
	d := &demangled{bits: make([]uint64, (ns+63)/64), refs: refs}
	for _, r := range refs {
		d.bits[r.id/64] |= 1 << (r.id % 64)
	}
	d.rank = make([]uint32, len(d.bits))
	n := uint32(0)
	for w, b := range d.bits {
		d.rank[w] = n
		n += uint32(bits.OnesCount64(b))
	}
	return d
}

// readBytes estimates the memory the names of d take once all are read and kept: a slot, a
// string header and twice the mangled length each (a demangled C++ name runs about 1.5 to 2
// times its mangled one), plus the marks themselves. Index.Stats counts it, so that a cache
// of indexes sized by Stats().Bytes holds them to about what they held when names were
// demangled at build time.
func (d *demangled) readBytes(strs []string) int64 {
	if d == nil {
		return 0
	}
	n := int64(len(d.bits))*12 + int64(len(d.refs))*int64(unsafe.Sizeof(demangledRef{}))
	for _, r := range d.refs {
		n += 8 + 16 + 2*int64(len(strs[r.src]))
	}
	return n
}

func (d *demangled) has(id uint32) bool {
	return d != nil && int(id/64) < len(d.bits) && d.bits[id/64]&(1<<(id%64)) != 0
}

// get returns string id of strs, demangled when d marks it. Safe for concurrent use.
func (d *demangled) get(strs []string, id uint32) string {
	s := strs[id]
	if !d.has(id) {
		return s
	}
	d.memoOnce.Do(func() { d.memo = make([]atomic.Pointer[string], len(d.refs)) })
	w := id / 64
	slot := &d.memo[d.rank[w]+uint32(bits.OnesCount64(d.bits[w]&(1<<(id%64)-1)))]
	if p := slot.Load(); p != nil {
		return *p
	}
	out := demangle.Name(s)
	slot.Store(&out)
	return out
}

// Demangled returns the ID of a string that reads as demangle.Name(linkage): the display
// name of a function whose linkage name is linkage. The demangling happens when the string is
// read, not here. A name that cannot be mangled (it does not start with '_') is interned as it
// is; one that is not valid UTF-8 is demangled now, so that the result is the same as
// String(demangle.Name(linkage)) in every case.
func (b *Builder) Demangled(linkage string) uint32 {
	if len(linkage) < 2 || linkage[0] != '_' {
		return b.String(linkage)
	}
	if !utf8.ValidString(linkage) {
		return b.String(demangle.Name(linkage))
	}
	src := b.String(linkage)
	if int(src) < len(b.shown) && b.shown[src] != 0 {
		return b.shown[src]
	}
	id := uint32(len(b.strList))
	b.strList = append(b.strList, b.strList[src])
	if int(src) >= len(b.shown) {
		b.shown = append(b.shown, make([]uint32, int(src)+1-len(b.shown))...)
	}
	b.shown[src] = id
	b.shownRefs = append(b.shownRefs, demangledRef{id: id, src: src})
	return id
}

// appendDemangled appends the demangled-name marks of a string table: count, then for each
// the ID minus the previous one and the source ID.
func appendDemangled(buf []byte, d *demangled) []byte {
	if d == nil {
		return binary.AppendUvarint(buf, 0)
	}
	buf = binary.AppendUvarint(buf, uint64(len(d.refs)))
	prev := uint32(0)
	for _, r := range d.refs {
		buf = binary.AppendUvarint(buf, uint64(r.id-prev))
		buf = binary.AppendUvarint(buf, uint64(r.src))
		prev = r.id
	}
	return buf
}

// demangled reads what appendDemangled wrote for strs, whose marked strings were written
// empty, and gives each its source's string. Marked IDs ascend from 1; a source is a string
// that is not itself marked.
func (d *decoder) demangled(strs []string) (*demangled, error) {
	n := d.count("demangled name", 2)
	if d.err != nil {
		return nil, d.err
	}
	refs := make([]demangledRef, n)
	prev := uint64(0)
	for i := range refs {
		delta, src := d.uvarint(), d.uvarint()
		if d.err != nil {
			return nil, d.err
		}
		id := prev + delta
		if delta == 0 || id >= uint64(len(strs)) || src >= uint64(len(strs)) {
			return nil, fmt.Errorf("%w: demangled name %d (string %d of %d, from %d) out of range", ErrCorrupt, i, id, len(strs), src)
		}
		if strs[id] != "" {
			return nil, fmt.Errorf("%w: demangled name %d has bytes of its own", ErrCorrupt, i)
		}
		refs[i] = demangledRef{id: uint32(id), src: uint32(src)}
		prev = id
	}
	dm := newDemangled(len(strs), refs)
	for i, r := range refs {
		if dm.has(r.src) {
			return nil, fmt.Errorf("%w: demangled name %d comes from another", ErrCorrupt, i)
		}
		strs[r.id] = strs[r.src]
	}
	return dm, nil
}
