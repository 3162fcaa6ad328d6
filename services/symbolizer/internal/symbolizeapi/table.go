package symbolizeapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/services/symbolizer/internal/resultcache"
)

// table assembles one ModuleResult with a symbolizecodec.Builder from the index and the
// result cache: it looks keys up, reads cached values, and interns the index's string IDs
// into the answer's strings.
//
// Result cache values hold the frames of one address as string IDs of the file's index
// (index.FrameRef), six uvarints per frame, innermost first:
//
//	function, linkage name (0 when it equals the function), file, line, column, start line
//
// IDs rather than names: a value is 20 bytes instead of 170, which is what Redis's time per
// lookup and memory follow, and reading one costs no hashing of names. The IDs mean something
// only with the string table they come from, which the cache key names (see module), so a
// replica reads them with the file's string table alone, without the index.
type table struct {
	st *index.StringTable
	// b holds the answer's strings and rows. In its rows' names, rows before interned hold
	// indices into the answer's strings; later rows hold string IDs of st until
	// internPending turns them into indices.
	b symbolizecodec.Builder

	// slot maps a string ID to its index in the answer's strings plus one, valid where
	// mark holds gen: marking instead of clearing lets a pooled table serve the next answer
	// without touching arrays as long as the file's string table.
	slot []slotMark
	gen  uint32

	interned int
	sink     uint32 // keeps warm's loads

	refs []index.FrameRef // lookup scratch
}

// slotMark is one entry of table.slot: side by side, the two are one memory access.
type slotMark struct{ slot, mark uint32 }

// Tables are pooled, with their Builder (whose doc says why) and their slots.
var tablePool = sync.Pool{New: func() any { return &table{} }}

// maxPooledKeys and maxPooledStrings bound what a pooled table keeps, so that one huge
// request or string table does not pin its arrays for good.
const (
	maxPooledKeys    = 1 << 17
	maxPooledStrings = 1 << 22
)

func newTable(st *index.StringTable, keys int) *table {
	t := tablePool.Get().(*table)
	t.st = st
	t.b.Reset(keys)
	if n := st.Len(); len(t.slot) < n {
		t.slot, t.gen = make([]slotMark, n), 0
	}
	t.gen++
	if t.gen == 0 { // wrapped: old marks could look current
		clear(t.slot)
		t.gen = 1
	}
	t.slot[0] = slotMark{1, t.gen} // "" is strings[0]
	t.interned = 0
	return t
}

// release returns t to the pool; t must not be used after.
func (t *table) release() {
	if t.b.Keys() > maxPooledKeys || len(t.slot) > maxPooledStrings {
		return
	}
	t.st, t.refs = nil, t.refs[:0]
	t.b.Forget()
	tablePool.Put(t)
}

// intern returns the answer's index of string id, adding the string when new; id must be
// below t.st.Len().
func (t *table) intern(id uint32) uint32 {
	if sm := t.slot[id]; sm.mark == t.gen {
		return sm.slot - 1
	}
	i := t.b.AddString(t.st.String(id))
	t.slot[id] = slotMark{i + 1, t.gen}
	return i
}

// warmRows is how many rows internPending warms at a time: their slots, string headers and
// string bytes fit in the core's cache together.
const warmRows = 512

// internPending turns the string IDs of the rows added since the last call into indices
// into the answer's strings.
//
// Interning is where a cached answer waits for memory: the file's strings are megabytes
// and an answer's are scattered through them, so each new string costs a miss on its slot,
// its header and its bytes, one after the other. Rows are therefore taken a few hundred at a
// time, and their slots and headers, then their bytes, are first read in loops of loads that
// do not depend on each other, which the CPU overlaps; intern then finds them in cache. This
// runs while Redis answers the batch's next read.
func (t *table) internPending() {
	for from := t.interned; from < t.rows(); from += warmRows {
		to := min(from+warmRows, t.rows())
		fn, link, file := t.b.Names(from, to)
		t.warm([3][]uint32{fn, link, file})
		for i := range fn {
			fn[i], link[i], file[i] = t.intern(fn[i]), t.intern(link[i]), t.intern(file[i])
		}
	}
	t.interned = t.rows()
}

// warm reads what interning the IDs of cols will read, in independent loads.
func (t *table) warm(cols [3][]uint32) {
	sink := t.sink
	for _, c := range cols {
		for _, id := range c {
			sink += t.slot[id].mark + uint32(len(t.st.String(id)))
		}
	}
	for _, c := range cols {
		for _, id := range c {
			if t.slot[id].mark != t.gen {
				if s := t.st.String(id); len(s) > 0 {
					sink += uint32(s[0]) + uint32(s[len(s)-1])
				}
			}
		}
	}
	t.sink = sink
}

func (t *table) rows() int { return t.b.Rows() }

var errMalformed = errors.New("malformed cached result")

// addValue adds the frames of key j from a result cache value. A value that is not what
// this server writes is rejected whole (nothing of it is kept) and must be treated as a miss.
func (t *table) addValue(j int, v string) error {
	first := t.rows()
	if err := t.parseValue(v); err != nil {
		t.b.Truncate(first)
		return err
	}
	t.b.SetKey(j, first)
	return nil
}

func (t *table) parseValue(v string) error {
	n := uint64(t.st.Len())
	var f [6]uint32
	for off, frame := 0, 0; off < len(v); frame++ {
		for k := range f {
			// Most numbers fit in three bytes (string IDs of a large file, lines); uvarint
			// decodes the rest, and reports what is malformed.
			if off+2 < len(v) {
				b0, b1, b2 := v[off], v[off+1], v[off+2]
				switch {
				case b0 < 0x80:
					f[k] = uint32(b0)
					off++
					continue
				case b1 < 0x80:
					f[k] = uint32(b0&0x7f) | uint32(b1)<<7
					off += 2
					continue
				case b2 < 0x80:
					f[k] = uint32(b0&0x7f) | uint32(b1&0x7f)<<7 | uint32(b2)<<14
					off += 3
					continue
				}
			}
			x, m := uvarint(v[off:])
			if m <= 0 || x > math.MaxUint32 {
				return fmt.Errorf("%w: frame %d field %d: bad or truncated number", errMalformed, frame, k)
			}
			f[k] = uint32(x)
			off += m
		}
		if uint64(f[0]) >= n || uint64(f[1]) >= n || uint64(f[2]) >= n {
			return fmt.Errorf("%w: frame %d names a string outside the table of %d", errMalformed, frame, n)
		}
		t.b.AppendRow(f[0], f[1], f[2], f[3], f[4], f[5])
	}
	return nil
}

// uvarint is binary.Uvarint on a string, which reading from a byte view of it would need
// unsafe for.
func uvarint(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				return 0, -(i + 1)
			}
			return x | uint64(b)<<shift, i + 1
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

// lookup resolves keys[j] for every j in idx (every key when idx is nil) in ix, whose string
// table must be t's, and adds their frames; cached values, if any, must have been added
// before. With encode it also returns each one's result cache value, in idx order.
func (t *table) lookup(ix *index.Index, keys []resultcache.Key, idx []int, encode bool) []string {
	n := len(idx)
	if idx == nil {
		n = len(keys)
	}
	var vals []string
	var buf []byte
	if encode {
		vals = make([]string, n)
	}
	for k := 0; k < n; k++ {
		j := k
		if idx != nil {
			j = idx[k]
		}
		t.refs = ix.AppendLookupRefs(t.refs[:0], keys[j].Addr)
		first := t.rows()
		buf = buf[:0]
		for _, r := range t.refs {
			link := r.LinkageName
			if link == r.Function {
				link = 0
			}
			t.b.AppendRow(r.Function, link, r.File, r.Line, r.Column, r.StartLine)
			if encode {
				for _, x := range [6]uint32{r.Function, link, r.File, r.Line, r.Column, r.StartLine} {
					buf = binary.AppendUvarint(buf, uint64(x))
				}
			}
		}
		t.b.SetKey(j, first)
		if encode {
			vals[k] = string(buf)
		}
	}
	t.internPending()
	return vals
}

// emit writes the rows of every address into res: address i (when ok[i]) gets the frames of
// key slot[i].
func (t *table) emit(res *symbolizerv1.ModuleResult, ok []bool, slot []int) {
	t.internPending()
	t.b.Emit(res, ok, slot)
}
