package symbolizecodec

import (
	"strings"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
)

// Builder lays out one ModuleResult: the frames of each distinct address (a "key") as rows
// of string indices into the answer, then, in Emit, the rows of every requested address in
// request order. The symbolizer builds every answer with it, and tests that need an answer
// build it the same way.
//
// A row's three names are indices into the answer's strings (AddString). A caller whose
// frames name strings by IDs of a table of its own (the symbolizer's index) may append rows
// with those IDs and turn them into indices later through Names: interning waits on memory,
// and the server does it in batches while its cache answers the next read.
//
// A Builder is reused across answers (Reset): a 10,000-address answer needs columns of a few
// MB, and allocating them per request made the garbage collector a large share of a
// request's cost. The string slice is not reused: the response keeps it.
type Builder struct {
	strings []string // the answer's strings; strings[0] is ""
	// arena holds copies of the answer's strings, one after the other (see AddString).
	arena strings.Builder

	// Rows of the keys' frames, column by column, in the order keys were added.
	fn, link, file, line, col, start []uint32
	keyRow, keyLen                   []uint32
}

// Reset prepares b for an answer of keys distinct addresses, keeping its arrays.
func (b *Builder) Reset(keys int) {
	// Sized for a function and a file per key, so the table rarely grows.
	b.strings = make([]string, 1, 2*keys+1)
	b.arena = strings.Builder{}
	if cap(b.keyRow) < keys {
		b.keyRow, b.keyLen = make([]uint32, keys), make([]uint32, keys)
	}
	b.keyRow, b.keyLen = b.keyRow[:keys], b.keyLen[:keys]
	clear(b.keyLen)
	for _, c := range []*[]uint32{&b.fn, &b.link, &b.file, &b.line, &b.col, &b.start} {
		if cap(*c) < keys+keys/2 {
			*c = make([]uint32, 0, keys+keys/2)
		}
		*c = (*c)[:0]
	}
}

// Forget drops b's references to the last answer's strings, so that a Builder kept for
// reuse keeps no answer alive.
func (b *Builder) Forget() {
	b.strings = nil
	b.arena = strings.Builder{}
}

// Keys is how many keys the last Reset made room for.
func (b *Builder) Keys() int { return len(b.keyRow) }

// arenaChunk is the size of each of the arena's buffers: a 10,000-address answer has about
// 750 KB of strings.
const arenaChunk = 256 << 10

// AddString adds s to the answer's strings and returns its index. It does not look for s
// among the strings already added: the caller knows which strings it has added.
//
// s is copied into the arena, and the answer refers to the copy, so the encoder has one
// contiguous run of strings to copy. (A strings.Builder never changes bytes it has handed
// out.)
func (b *Builder) AddString(s string) uint32 {
	i := uint32(len(b.strings))
	if b.arena.Cap()-b.arena.Len() < len(s) {
		// A new buffer rather than a larger one: growing would copy what is already there.
		b.arena = strings.Builder{}
		b.arena.Grow(max(arenaChunk, len(s)))
	}
	start := b.arena.Len()
	b.arena.WriteString(s)
	b.strings = append(b.strings, b.arena.String()[start:])
	return i
}

// Strings returns the answer's strings added so far; entry 0 is "".
func (b *Builder) Strings() []string { return b.strings }

// AppendRow adds one frame; a linkage name equal to the function's is left out, as the API
// asks.
func (b *Builder) AppendRow(fn, link, file, line, col, start uint32) {
	if link == fn {
		link = 0
	}
	b.fn = append(b.fn, fn)
	b.link = append(b.link, link)
	b.file = append(b.file, file)
	b.line = append(b.line, line)
	b.col = append(b.col, col)
	b.start = append(b.start, start)
}

// Rows is how many frames have been added.
func (b *Builder) Rows() int { return len(b.fn) }

// Truncate drops the frames added after the first n.
func (b *Builder) Truncate(n int) {
	b.fn, b.link, b.file = b.fn[:n], b.link[:n], b.file[:n]
	b.line, b.col, b.start = b.line[:n], b.col[:n], b.start[:n]
}

// Names returns the function, linkage name and file columns of rows from to to, for a
// caller that appended string IDs of its own to replace them with the answer's indices.
func (b *Builder) Names(from, to int) (fn, link, file []uint32) {
	return b.fn[from:to], b.link[from:to], b.file[from:to]
}

// SetKey says that key j's frames are the rows from first to the last one added.
func (b *Builder) SetKey(j, first int) {
	b.keyRow[j], b.keyLen[j] = uint32(first), uint32(b.Rows()-first)
}

// Emit writes the rows of every address into res: address i (when ok[i]) gets the frames of
// key slot[i]; an address that is not ok gets none.
func (b *Builder) Emit(res *symbolizerv1.ModuleResult, ok []bool, slot []int) {
	counts := make([]uint32, len(ok))
	total := 0
	for i := range ok {
		if ok[i] {
			counts[i] = b.keyLen[slot[i]]
			total += int(counts[i])
		}
	}
	ft := &symbolizerv1.FrameTable{
		FunctionNames: make([]uint32, total),
		LinkageNames:  make([]uint32, total),
		Files:         make([]uint32, total),
		Lines:         make([]uint32, total),
		Columns:       make([]uint32, total),
		StartLines:    make([]uint32, total),
	}
	// Element by element: an address has one or two frames, too few for copy to pay its call.
	o := 0
	for i, c := range counts {
		if c == 0 {
			continue
		}
		r := int(b.keyRow[slot[i]])
		for k := r; k < r+int(c); k++ {
			ft.FunctionNames[o] = b.fn[k]
			ft.LinkageNames[o] = b.link[k]
			ft.Files[o] = b.file[k]
			ft.Lines[o] = b.line[k]
			ft.Columns[o] = b.col[k]
			ft.StartLines[o] = b.start[k]
			o++
		}
	}
	res.FrameCounts = counts
	res.Frames = ft
	if total > 0 {
		res.Strings = b.strings
	}
}
