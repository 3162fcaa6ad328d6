package symbolizeapi

import (
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/services/symbolizer/internal/resultcache"
)

// table assembles one ModuleResult: the frames of each distinct address (a "key") as rows
// of interned string indices, then the rows of every requested address in request order.
//
// Result cache values are the frames of one address in the protobuf wire format of
//
//	message Location { repeated Frame frames = 1; }
//	message Frame { string function_name = 1; string linkage_name = 2; string file = 3;
//	                uint32 line = 4; uint32 column = 5; uint32 start_line = 6; }
//
// (linkage_name left out when it equals function_name): self-contained, so any replica can
// read any other's entries, and cheap to walk without decoding into messages.
type table struct {
	ids     map[string]uint32
	strings []string
	// byRef finds an index's string again by where it lives: an index holds each distinct
	// string once, so the same name comes back with the same data pointer, and hashing the
	// pointer spares reading (and hashing) the bytes of a name far away in a large index.
	// Keyed by the data pointer alone (the cheapest map key); the length is checked on a hit.
	byRef map[uintptr]strRef
	// cached is set once a cached value added strings: index strings must then be matched
	// by content too, or a name could appear twice.
	cached bool

	// Rows of the keys' frames, column by column, in the order keys were added.
	fn, link, file, line, col, start []uint32
	keyRow, keyLen                   []uint32

	frames []index.Frame // lookup scratch
}

type strRef struct {
	id, len uint32
}

// Tables are pooled: a 10,000-address answer needs maps and columns of a few MB, and
// allocating them per request made the garbage collector a large share of a request's cost.
// The string slice is not pooled: the response keeps it.
var tablePool = sync.Pool{New: func() any {
	return &table{ids: map[string]uint32{}, byRef: map[uintptr]strRef{}}
}}

// maxPooledKeys bounds what a pooled table keeps: maps never shrink, and one huge request
// must not pin its tables for good.
const maxPooledKeys = 1 << 17

func newTable(keys int) *table {
	t := tablePool.Get().(*table)
	// Sized for a function and a file per key, so the table rarely grows.
	t.strings = make([]string, 1, 2*keys+1)
	t.ids[""] = 0
	if cap(t.keyRow) < keys {
		t.keyRow, t.keyLen = make([]uint32, keys), make([]uint32, keys)
	}
	t.keyRow, t.keyLen = t.keyRow[:keys], t.keyLen[:keys]
	for _, c := range []*[]uint32{&t.fn, &t.link, &t.file, &t.line, &t.col, &t.start} {
		if cap(*c) < keys+keys/2 {
			*c = make([]uint32, 0, keys+keys/2)
		}
		*c = (*c)[:0]
	}
	return t
}

// release returns t to the pool; t must not be used after.
func (t *table) release() {
	if len(t.keyRow) > maxPooledKeys || len(t.ids) > 2*maxPooledKeys || len(t.byRef) > 2*maxPooledKeys {
		return
	}
	// Cleared so that no request's strings stay reachable from the pool.
	clear(t.ids)
	clear(t.byRef)
	clear(t.keyRow)
	clear(t.keyLen)
	t.strings, t.cached, t.frames = nil, false, t.frames[:0]
	clear(t.frames[:cap(t.frames)])
	tablePool.Put(t)
}

// intern returns the index of s, adding it when new. Strings from an index are valid UTF-8
// (package index guarantees it; protobuf strings must be); any other string is checked, and
// ok is false when it is not.
func (t *table) intern(s string, fromIndex bool) (uint32, bool) {
	if i, ok := t.ids[s]; ok {
		return i, true
	}
	if !fromIndex && !utf8.ValidString(s) {
		return 0, false
	}
	i := uint32(len(t.strings))
	t.strings = append(t.strings, s)
	t.ids[s] = i
	return i, true
}

// internIndex interns a string that an index returned.
func (t *table) internIndex(s string) uint32 {
	if s == "" {
		return 0
	}
	// t.strings keeps the bytes reachable, so the pointer stays a valid key.
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	if r, ok := t.byRef[p]; ok && int(r.len) == len(s) {
		return r.id
	}
	var i uint32
	if t.cached || len(s) > 1<<32-1 {
		i, _ = t.intern(s, true)
	} else {
		i = uint32(len(t.strings))
		t.strings = append(t.strings, s)
	}
	t.byRef[p] = strRef{i, uint32(len(s))}
	return i
}

func (t *table) rows() int { return len(t.fn) }

func (t *table) truncate(n int) {
	t.fn, t.link, t.file = t.fn[:n], t.link[:n], t.file[:n]
	t.line, t.col, t.start = t.line[:n], t.col[:n], t.start[:n]
}

var errMalformed = errors.New("malformed cached result")

// addValue adds the frames of key j from a result cache value. A value that is not what
// this server writes is rejected whole (nothing of it is kept) and must be treated as a miss.
func (t *table) addValue(j int, v string) error {
	first := t.rows()
	if err := t.parseValue(v); err != nil {
		t.truncate(first)
		return err
	}
	t.keyRow[j], t.keyLen[j] = uint32(first), uint32(t.rows()-first)
	return nil
}

func (t *table) parseValue(v string) error {
	// A read-only view of the value's bytes: offsets into it become substrings of v, so
	// names are not copied.
	b := unsafe.Slice(unsafe.StringData(v), len(v))
	off := 0
	for off < len(b) {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return fmt.Errorf("%w: unexpected field %d type %d", errMalformed, num, typ)
		}
		off += n
		m, n := protowire.ConsumeVarint(b[off:])
		if n < 0 || m > uint64(len(b)-off-n) {
			return fmt.Errorf("%w: truncated frame", errMalformed)
		}
		off += n
		if err := t.parseFrame(v, off, off+int(m)); err != nil {
			return err
		}
		off += int(m)
	}
	return nil
}

func (t *table) parseFrame(v string, off, end int) error {
	b := unsafe.Slice(unsafe.StringData(v), len(v))[:end]
	var str [3]uint32
	var num [3]uint32
	hasLink := false
	for off < end {
		f, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return fmt.Errorf("%w: bad tag in frame", errMalformed)
		}
		off += n
		switch {
		case f >= 1 && f <= 3 && typ == protowire.BytesType:
			m, n := protowire.ConsumeVarint(b[off:])
			if n < 0 || m > uint64(end-off-n) {
				return fmt.Errorf("%w: frame field %d truncated", errMalformed, f)
			}
			off += n
			id, ok := t.intern(v[off:off+int(m)], false)
			if !ok {
				return fmt.Errorf("%w: frame field %d is not UTF-8", errMalformed, f)
			}
			t.cached = true
			str[f-1] = id
			hasLink = hasLink || f == 2
			off += int(m)
		case f >= 4 && f <= 6 && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b[off:])
			if n < 0 || x > 1<<32-1 {
				return fmt.Errorf("%w: frame field %d is not a uint32", errMalformed, f)
			}
			num[f-4] = uint32(x)
			off += n
		default:
			return fmt.Errorf("%w: unexpected frame field %d type %d", errMalformed, f, typ)
		}
	}
	if !hasLink || str[1] == str[0] {
		str[1] = 0
	}
	t.fn = append(t.fn, str[0])
	t.link = append(t.link, str[1])
	t.file = append(t.file, str[2])
	t.line = append(t.line, num[0])
	t.col = append(t.col, num[1])
	t.start = append(t.start, num[2])
	return nil
}

// lookup resolves keys[j] for every j in idx (every key when idx is nil) in ix and adds
// their frames; cached values, if any, must have been added before. With encode it also returns each one's result cache value, in idx order.
func (t *table) lookup(ix *index.Index, keys []resultcache.Key, idx []int, encode bool) []string {
	n := len(idx)
	if idx == nil {
		n = len(keys)
	}
	var vals []string
	var buf, frame []byte
	if encode {
		vals = make([]string, n)
	}
	for k := 0; k < n; k++ {
		j := k
		if idx != nil {
			j = idx[k]
		}
		t.frames = ix.AppendLookup(t.frames[:0], keys[j].Addr)
		t.keyRow[j], t.keyLen[j] = uint32(t.rows()), uint32(len(t.frames))
		buf = buf[:0]
		for _, fr := range t.frames {
			fn := t.internIndex(fr.Function)
			link := uint32(0)
			if fr.LinkageName != fr.Function {
				link = t.internIndex(fr.LinkageName)
			}
			file := t.internIndex(fr.File)
			t.fn = append(t.fn, fn)
			t.link = append(t.link, link)
			t.file = append(t.file, file)
			t.line = append(t.line, fr.Line)
			t.col = append(t.col, fr.Column)
			t.start = append(t.start, fr.StartLine)
			if !encode {
				continue
			}
			frame = frame[:0]
			frame = appendString(frame, 1, t.strings[fn])
			frame = appendString(frame, 2, t.strings[link])
			frame = appendString(frame, 3, t.strings[file])
			frame = appendUint(frame, 4, fr.Line)
			frame = appendUint(frame, 5, fr.Column)
			frame = appendUint(frame, 6, fr.StartLine)
			buf = protowire.AppendTag(buf, 1, protowire.BytesType)
			buf = protowire.AppendBytes(buf, frame)
		}
		if encode {
			vals[k] = string(buf)
		}
	}
	return vals
}

// emit writes the rows of every address into res: address i (when ok[i]) gets the frames of
// key slot[i].
func (t *table) emit(res *symbolizerv1.ModuleResult, ok []bool, slot []int) {
	counts := make([]uint32, len(ok))
	total := 0
	for i := range ok {
		if ok[i] {
			counts[i] = t.keyLen[slot[i]]
			total += int(counts[i])
		}
	}
	ft := &symbolizerv1.FrameTable{
		FunctionNames: make([]uint32, 0, total),
		LinkageNames:  make([]uint32, 0, total),
		Files:         make([]uint32, 0, total),
		Lines:         make([]uint32, 0, total),
		Columns:       make([]uint32, 0, total),
		StartLines:    make([]uint32, 0, total),
	}
	for i := range ok {
		if counts[i] == 0 {
			continue
		}
		r := t.keyRow[slot[i]]
		e := r + counts[i]
		ft.FunctionNames = append(ft.FunctionNames, t.fn[r:e]...)
		ft.LinkageNames = append(ft.LinkageNames, t.link[r:e]...)
		ft.Files = append(ft.Files, t.file[r:e]...)
		ft.Lines = append(ft.Lines, t.line[r:e]...)
		ft.Columns = append(ft.Columns, t.col[r:e]...)
		ft.StartLines = append(ft.StartLines, t.start[r:e]...)
	}
	res.FrameCounts = counts
	res.Frames = ft
	if total > 0 {
		res.Strings = t.strings
	}
}

// appendString and appendUint write a proto3 field, leaving out zero values as protobuf does.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendUint(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}
