// Package perfmap reads the perf-PID.map files that JIT runtimes write for perf (Node.js with
// --perf-basic-prof, the JVM's `jcmd PID Compiler.perfmap`, Python 3.12+ with -X perf): one
// line per piece of generated code, "START SIZE name" with START and SIZE in hex. It keeps a
// sorted, bounded table per process, follows each file as it grows, and names addresses in
// the process's anonymous executable memory.
package perfmap

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// Symbol is one line of a perf map: code at [Start, Start+Size) named Name.
type Symbol struct {
	Start, Size uint64
	Name        string
}

// Errors of ParseLine, so a caller can count lines by what was wrong with them.
var (
	ErrFields = errors.New("want START SIZE NAME")
	ErrEmpty  = errors.New("empty symbol")
)

// ParseLine parses one line (without or with its newline): START and SIZE are hex, with or
// without 0x; the name is the rest of the line, spaces included (V8 names carry the script
// and position: "JS:*loop /srv/app.js:3:17").
func ParseLine(line []byte) (Symbol, error) {
	line = bytes.TrimRight(line, "\r\n")
	startF, rest, ok := cutField(line)
	if !ok {
		return Symbol{}, ErrFields
	}
	sizeF, rest, ok := cutField(rest)
	if !ok {
		return Symbol{}, ErrFields
	}
	name := bytes.TrimSpace(rest)
	if len(name) == 0 {
		return Symbol{}, ErrFields
	}
	start, err := parseHex(startF)
	if err != nil {
		return Symbol{}, fmt.Errorf("start %q: %w", startF, err)
	}
	size, err := parseHex(sizeF)
	if err != nil {
		return Symbol{}, fmt.Errorf("size %q: %w", sizeF, err)
	}
	if size == 0 {
		return Symbol{}, ErrEmpty
	}
	if start+size < start {
		return Symbol{}, fmt.Errorf("%#x+%#x: %w", start, size, strconv.ErrRange)
	}
	return Symbol{Start: start, Size: size, Name: string(name)}, nil
}

// cutField returns the first space-separated field of s and what follows it.
func cutField(s []byte) (field, rest []byte, ok bool) {
	s = bytes.TrimLeft(s, " \t")
	i := bytes.IndexAny(s, " \t")
	if i <= 0 {
		return nil, nil, false
	}
	return s[:i], s[i+1:], true
}

func parseHex(b []byte) (uint64, error) {
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	// ParseUint would take a sign or underscores in some bases; a perf map has neither.
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return 0, strconv.ErrSyntax
		}
	}
	return strconv.ParseUint(string(b), 16, 64)
}

// entry is a piece of the address space owned by one symbol. seq orders the symbols as they
// were read: a later symbol owns the addresses it shares with an earlier one, as code the
// runtime generated later replaced the earlier code there.
type entry struct {
	start, end uint64
	seq        uint64
	name       string
}

// entryOverhead approximates the bytes an entry costs beyond its name: the entry itself and
// its share of the slices it passes through.
const entryOverhead = 48

func (e *entry) cost() int64 { return entryOverhead + int64(len(e.name)) }

// Map is one process's symbols: non-overlapping entries sorted by start.
type Map struct {
	entries []entry
	seq     uint64
	bytes   int64
}

// Len is the number of entries (a symbol partly replaced by later ones may take several).
func (m *Map) Len() int { return len(m.entries) }

// Bytes is the approximate memory the entries take.
func (m *Map) Bytes() int64 { return m.bytes }

// Lookup returns the name of the symbol holding addr.
func (m *Map) Lookup(addr uint64) (string, bool) {
	i := sort.Search(len(m.entries), func(i int) bool { return m.entries[i].end > addr })
	if i < len(m.entries) && m.entries[i].start <= addr {
		return m.entries[i].name, true
	}
	return "", false
}

// Add adds symbols in the order they were read: a symbol replaces whatever earlier symbols
// held its addresses.
func (m *Map) Add(syms []Symbol) {
	if len(syms) == 0 {
		return
	}
	add := make([]entry, len(syms))
	for i, s := range syms {
		m.seq++
		add[i] = entry{start: s.Start, end: s.Start + s.Size, seq: m.seq, name: s.Name}
	}
	// Stable: of two symbols at the same start, the later one stays later.
	sort.SliceStable(add, func(i, j int) bool { return add[i].start < add[j].start })
	switch n := len(m.entries); {
	case n == 0 || m.entries[n-1].end <= add[0].start:
		// Code above all known code (a runtime filling a fresh code page): appended in place.
		if m.disjoint(add) {
			m.entries = append(m.entries, add...)
		} else {
			m.entries = paint(append(m.entries, add...))
		}
	case m.disjoint(add):
		m.entries = mergeSorted(m.entries, add)
	default:
		m.entries = paint(append(m.entries, add...))
	}
	m.bytes = 0
	for i := range m.entries {
		m.bytes += m.entries[i].cost()
	}
}

// disjoint reports whether the sorted new entries overlap neither each other nor m's: the
// common case of a runtime appending code at fresh addresses, merged in linear time.
func (m *Map) disjoint(add []entry) bool {
	for i := range add {
		if i > 0 && add[i].start < add[i-1].end {
			return false
		}
		j := sort.Search(len(m.entries), func(j int) bool { return m.entries[j].end > add[i].start })
		if j < len(m.entries) && m.entries[j].start < add[i].end {
			return false
		}
	}
	return true
}

func mergeSorted(a, b []entry) []entry {
	out := make([]entry, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].start <= b[0].start {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	out = append(out, a...)
	return append(out, b...)
}

// paint turns possibly overlapping entries into non-overlapping ones in which every address
// belongs to the latest entry holding it: a sweep over the entries' boundaries, keeping the
// entries that cover the current address in a max-heap by seq.
func paint(es []entry) []entry {
	type bound struct {
		at   uint64
		open bool
		i    int
	}
	bounds := make([]bound, 0, 2*len(es))
	for i := range es {
		bounds = append(bounds, bound{es[i].start, true, i}, bound{es[i].end, false, i})
	}
	sort.Slice(bounds, func(i, j int) bool { return bounds[i].at < bounds[j].at })
	closed := make([]bool, len(es))
	var h seqHeap
	h.es = es
	out := make([]entry, 0, len(es))
	cur, segStart := -1, uint64(0)
	for k := 0; k < len(bounds); {
		at := bounds[k].at
		for ; k < len(bounds) && bounds[k].at == at; k++ {
			if bounds[k].open {
				h.push(bounds[k].i)
			} else {
				closed[bounds[k].i] = true
			}
		}
		for len(h.idx) > 0 && closed[h.idx[0]] {
			h.pop()
		}
		top := -1
		if len(h.idx) > 0 {
			top = h.idx[0]
		}
		if top == cur {
			continue
		}
		if cur >= 0 && segStart < at {
			e := es[cur]
			e.start, e.end = segStart, at
			out = append(out, e)
		}
		cur, segStart = top, at
	}
	return out
}

// seqHeap is a max-heap of indices into es by seq.
type seqHeap struct {
	es  []entry
	idx []int
}

func (h *seqHeap) less(a, b int) bool { return h.es[h.idx[a]].seq > h.es[h.idx[b]].seq }

func (h *seqHeap) push(i int) {
	h.idx = append(h.idx, i)
	for c := len(h.idx) - 1; c > 0; {
		p := (c - 1) / 2
		if !h.less(c, p) {
			break
		}
		h.idx[c], h.idx[p] = h.idx[p], h.idx[c]
		c = p
	}
}

func (h *seqHeap) pop() {
	n := len(h.idx) - 1
	h.idx[0] = h.idx[n]
	h.idx = h.idx[:n]
	for p := 0; ; {
		c := 2*p + 1
		if c >= n {
			break
		}
		if c+1 < n && h.less(c+1, c) {
			c++
		}
		if !h.less(c, p) {
			break
		}
		h.idx[c], h.idx[p] = h.idx[p], h.idx[c]
		p = c
	}
}

// Shrink drops the earliest symbols until the entries take at most target bytes, returning
// how many symbols it dropped: a long-running runtime keeps naming the code it generated
// last, which is the code that runs.
func (m *Map) Shrink(target int64) int {
	if m.bytes <= target {
		return 0
	}
	// The cost of each symbol (its entries together), latest first.
	bySeq := map[uint64]int64{}
	for i := range m.entries {
		bySeq[m.entries[i].seq] += m.entries[i].cost()
	}
	seqs := make([]uint64, 0, len(bySeq))
	for s := range bySeq {
		seqs = append(seqs, s)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] > seqs[j] })
	var keep int64
	cut := uint64(0) // symbols with seq <= cut go
	for _, s := range seqs {
		if keep+bySeq[s] > target {
			cut = s
			break
		}
		keep += bySeq[s]
	}
	dropped := 0
	for _, s := range seqs {
		if s <= cut {
			dropped++
		}
	}
	out := m.entries[:0]
	for _, e := range m.entries {
		if e.seq > cut {
			out = append(out, e)
		}
	}
	clear(m.entries[len(out):])
	m.entries = out
	m.bytes = keep
	return dropped
}

// Reset empties the map.
func (m *Map) Reset() {
	m.entries, m.bytes = nil, 0
}
