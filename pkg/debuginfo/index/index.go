// Package index holds the compact, immutable symbolization index that profsym builds once per
// binary: disjoint address intervals, each pointing at the innermost function node of an inline
// chain, plus a sorted line table. A lookup is two binary searches and a walk up the chain; it
// never touches DWARF, pclntab or the symbol table again.
//
// Sources (DWARF, Go pclntab, ELF symbol tables) feed a Builder; Build flattens overlapping and
// nested ranges so that the most deeply inlined function wins at every address, and a symbol
// table range only fills addresses that no debug source covers.
package index

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// NodeID names a function node inside one Builder or Index.
type NodeID uint32

// NoParent marks an outermost (not inlined) function.
const NoParent NodeID = ^NodeID(0)

// Node is one function in an inline chain: a concrete function, or one inlined instance of a
// function inside its caller. String fields are IDs from Builder.String.
type Node struct {
	// Name is the display name: the demangled linkage name when there is one, else the plain name.
	Name uint32
	// LinkageName is the mangled (symbol) name, or the empty-string ID when there is none.
	LinkageName uint32
	// StartLine is the line where the function is declared (DW_AT_decl_line); 0 when unknown.
	StartLine uint32
	// DeclFile is the file of that declaration (DW_AT_decl_file), or the empty-string ID.
	DeclFile uint32
	// StartAddress is the lowest address of this function or inlined instance (DW_AT_low_pc or
	// the first range); 0 when unknown.
	StartAddress uint64
	// Parent is the node this one is inlined into, or NoParent.
	Parent NodeID
	// CallFile, CallLine and CallColumn locate the call site in Parent that this inlined
	// instance stands for (DW_AT_call_file/line/column). Zero for outermost nodes.
	CallFile   uint32
	CallLine   uint32
	CallColumn uint32
}

// Frame is one resolved frame. A lookup returns the innermost inlined callee first and the
// outermost function last, the order of OTLP Location.lines and of llvm-symbolizer.
type Frame struct {
	Function    string
	LinkageName string
	File        string
	Line        uint32
	Column      uint32
	StartLine   uint32
	// StartFile and StartAddress describe the function's declaration and entry, as
	// llvm-symbolizer's StartFileName and StartAddress do.
	StartFile    string
	StartAddress uint64
}

// Fidelity says which kind of source answered for a binary, best first.
type Fidelity uint8

const (
	FidelityNone        Fidelity = iota // nothing usable
	FidelitySymbols                     // function names from ELF symbol tables only
	FidelityLines                       // functions and file:line, no inline chains
	FidelityFullInlines                 // functions, file:line and inline chains
)

func (f Fidelity) String() string {
	switch f {
	case FidelitySymbols:
		return "symbols"
	case FidelityLines:
		return "lines"
	case FidelityFullInlines:
		return "full"
	default:
		return "none"
	}
}

// Builder collects nodes, ranges and line rows from any number of sources. It is not safe for
// concurrent use; sources that work in parallel build their parts and add them from one goroutine.
type Builder struct {
	strs     map[string]uint32
	strList  []string
	nodes    []Node
	ranges   []rangeEntry
	lines    []lineRow
	outer    []rangeEntry
	fidelity Fidelity
}

type rangeEntry struct {
	lo, hi   uint64
	node     NodeID
	fallback bool
	seq      uint32
}

type lineRow struct {
	addr   uint64
	file   uint32
	line   uint32
	column uint32
	end    bool // end of a sequence: addresses from here on have no line until the next row
	seq    uint32
}

// NewBuilder returns an empty builder whose string 0 is "".
func NewBuilder() *Builder {
	b := &Builder{strs: map[string]uint32{"": 0}, strList: []string{""}}
	return b
}

// String interns s and returns its ID.
func (b *Builder) String(s string) uint32 {
	if id, ok := b.strs[s]; ok {
		return id
	}
	id := uint32(len(b.strList))
	b.strs[s] = id
	b.strList = append(b.strList, s)
	return id
}

// AddNode registers a function node and returns its ID. A parent must be added before its
// children.
func (b *Builder) AddNode(n Node) NodeID {
	b.nodes = append(b.nodes, n)
	return NodeID(len(b.nodes) - 1)
}

// AddRange says node covers [lo, hi). Where ranges overlap, the deepest node in the inline tree
// wins; between nodes of equal depth, the one added last.
func (b *Builder) AddRange(lo, hi uint64, node NodeID) {
	if hi <= lo {
		return
	}
	b.ranges = append(b.ranges, rangeEntry{lo: lo, hi: hi, node: node, seq: uint32(len(b.ranges))})
}

// AddSymbolRange says node covers [lo, hi) as far as no AddRange covers those addresses: it is
// for symbol-table functions, which fill the gaps of debug information and never override it.
func (b *Builder) AddSymbolRange(lo, hi uint64, node NodeID) {
	if hi <= lo {
		return
	}
	b.ranges = append(b.ranges, rangeEntry{lo: lo, hi: hi, node: node, fallback: true, seq: uint32(len(b.ranges))})
}

// AddOuterName says that the outermost frame of any address in [lo, hi) is named by node (an
// outermost node: its Name, LinkageName and StartAddress are used), whatever the debug
// information calls it. This is llvm-symbolizer's rule for DWARF: the ELF symbol covering an
// address names the outermost function, which gives gcc's internal-linkage C++ functions their
// qualified names and cold or cloned parts their ".cold"/".constprop.N" markers. Among ranges
// with one start the last added wins; an address past the end of the range that starts
// closest below it has no outer name, as in llvm.
func (b *Builder) AddOuterName(lo, hi uint64, node NodeID) {
	if hi <= lo {
		return
	}
	b.outer = append(b.outer, rangeEntry{lo: lo, hi: hi, node: node, seq: uint32(len(b.outer))})
}

// Grow reserves room for n more nodes, ranges and line rows, for sources that know their
// counts: growing slices of millions of elements by appending costs far more memory at peak.
func (b *Builder) Grow(nodes, ranges, lines int) {
	b.nodes = slices.Grow(b.nodes, nodes)
	b.ranges = slices.Grow(b.ranges, ranges)
	b.lines = slices.Grow(b.lines, lines)
}

// AddLine adds a line-table row: from addr up to the next row, code belongs to file:line:column.
func (b *Builder) AddLine(addr uint64, file, line, column uint32) {
	b.lines = append(b.lines, lineRow{addr: addr, file: file, line: line, column: column, seq: uint32(len(b.lines))})
}

// EndSequence marks the end of a line sequence at addr (exclusive).
func (b *Builder) EndSequence(addr uint64) {
	b.lines = append(b.lines, lineRow{addr: addr, end: true, seq: uint32(len(b.lines))})
}

// RaiseFidelity records that a source delivered at least f.
func (b *Builder) RaiseFidelity(f Fidelity) {
	if f > b.fidelity {
		b.fidelity = f
	}
}

// NumNodes reports how many nodes have been added.
func (b *Builder) NumNodes() int { return len(b.nodes) }

// Index is immutable once built and safe for concurrent lookups.
type Index struct {
	strings []string
	nodes   []Node
	ivStart []uint64
	ivEnd   []uint64
	ivNode  []NodeID
	lnAddr  []uint64
	lnFile  []uint32 // endFile for end-of-sequence rows
	lnLine  []uint32
	lnCol   []uint32
	// Outer names (see AddOuterName), sorted by start with one entry per start.
	onStart  []uint64
	onEnd    []uint64
	onNode   []NodeID
	fidelity Fidelity

	// Radix hints in front of the binary searches: on a Go binary of 150 MB the interval and
	// line tables hold millions of entries, and a plain binary search over them is a chain of
	// cache misses. Derived from the tables; never serialized.
	ivHint, lnHint, onHint searchHint
}

// searchHint narrows a search in a sorted []uint64 to one bucket of the value range.
type searchHint struct {
	base  uint64
	shift uint
	first []uint32 // first[k] = index of the first element whose bucket is >= k
}

// hintBuckets is about one bucket per this many elements: a few cache lines per search.
const hintBuckets = 4

func makeHint(s []uint64) searchHint {
	if len(s) < 64 {
		return searchHint{}
	}
	base, span := s[0], s[len(s)-1]-s[0]
	want := uint64(len(s) / hintBuckets)
	var shift uint
	for span>>shift >= want {
		shift++
	}
	n := int(span>>shift) + 2
	h := searchHint{base: base, shift: shift, first: make([]uint32, n)}
	k := 0
	for i, v := range s {
		for b := int((v - base) >> shift); k <= b; k++ {
			h.first[k] = uint32(i)
		}
	}
	for ; k < n; k++ {
		h.first[k] = uint32(len(s))
	}
	return h
}

// upperBound returns the index of the first element of sorted s greater than v, or len(s).
func (h *searchHint) upperBound(s []uint64, v uint64) int {
	if h.first == nil {
		return upperBound(s, v)
	}
	if v < h.base {
		return 0
	}
	b := (v - h.base) >> h.shift
	if b+1 >= uint64(len(h.first)) {
		return upperBound(s, v)
	}
	lo, hi := int(h.first[b]), int(h.first[b+1])
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m] <= v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// prepare derives the lookup structures from the tables, after Build or Unmarshal.
func (ix *Index) prepare() {
	ix.ivHint = makeHint(ix.ivStart)
	ix.lnHint = makeHint(ix.lnAddr)
	ix.onHint = makeHint(ix.onStart)
}

const endFile = ^uint32(0)

// ErrCorrupt is wrapped by every error about an inconsistent index or builder input.
var ErrCorrupt = errors.New("corrupt index")

// Build flattens what was added into an Index.
func (b *Builder) Build() (*Index, error) {
	depth, err := b.depths()
	if err != nil {
		return nil, err
	}
	ix := &Index{strings: b.strList, nodes: b.nodes, fidelity: b.fidelity}
	ix.ivStart, ix.ivEnd, ix.ivNode = flatten(b.ranges, depth)
	ix.onStart, ix.onEnd, ix.onNode = outerNames(b.outer)

	lines := b.lines
	// An end marker and a row at one address: the row starts the next sequence and wins.
	// Sources add sequences mostly in address order, so check before sorting.
	lineCmp := func(a, b lineRow) int {
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		switch {
		case a.end && !b.end:
			return -1
		case !a.end && b.end:
			return 1
		}
		// Otherwise the row added last wins: seq makes the order total, so an unstable sort
		// (much faster than a stable one on millions of rows) gives the stable result.
		return cmp.Compare(a.seq, b.seq)
	}
	if !slices.IsSortedFunc(lines, lineCmp) {
		slices.SortFunc(lines, lineCmp)
	}
	ix.lnAddr = make([]uint64, len(lines))
	ix.lnFile = make([]uint32, len(lines))
	ix.lnLine = make([]uint32, len(lines))
	ix.lnCol = make([]uint32, len(lines))
	for i, r := range lines {
		ix.lnAddr[i] = r.addr
		if r.end {
			ix.lnFile[i] = endFile
			continue
		}
		ix.lnFile[i], ix.lnLine[i], ix.lnCol[i] = r.file, r.line, r.column
	}
	if err := ix.validate(); err != nil {
		return nil, err
	}
	ix.prepare()
	return ix, nil
}

// outerNames sorts the outer-name ranges by start, keeping the last added for each start.
func outerNames(rs []rangeEntry) (starts, ends []uint64, nodes []NodeID) {
	if len(rs) == 0 {
		return nil, nil, nil
	}
	slices.SortFunc(rs, func(a, b rangeEntry) int {
		if c := cmp.Compare(a.lo, b.lo); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	for i, r := range rs {
		if i+1 < len(rs) && rs[i+1].lo == r.lo {
			continue
		}
		starts = append(starts, r.lo)
		ends = append(ends, r.hi)
		nodes = append(nodes, r.node)
	}
	return starts, ends, nodes
}

// depths computes each node's inline depth and rejects cycles and forward references.
func (b *Builder) depths() ([]uint32, error) {
	d := make([]uint32, len(b.nodes))
	for i, n := range b.nodes {
		if n.Parent == NoParent {
			continue
		}
		if int(n.Parent) >= i {
			return nil, fmt.Errorf("%w: node %d has parent %d added after it", ErrCorrupt, i, n.Parent)
		}
		d[i] = d[n.Parent] + 1
	}
	return d, nil
}

// active is a range that covers the sweep position; the flatten sweep keeps them in a binary
// max-heap by priority.
type active struct {
	end  uint64
	prio uint64 // fallback < debug; then depth; then insertion order
	node NodeID
}

type activeHeap []active

func (h activeHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if h[i].prio >= h[j].prio {
			break
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (h activeHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h[r].prio > h[l].prio {
			j = r
		}
		if h[i].prio >= h[j].prio {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func (h *activeHeap) push(a active) {
	*h = append(*h, a)
	h.up(len(*h) - 1)
}

func (h *activeHeap) pop() {
	old := *h
	n := len(old) - 1
	old[0] = old[n]
	*h = old[:n]
	h.down(0)
}

// flatten turns possibly nested or overlapping ranges into disjoint sorted intervals, each owned
// by the highest-priority range covering it.
func flatten(ranges []rangeEntry, depth []uint32) (starts, ends []uint64, nodes []NodeID) {
	if len(ranges) == 0 {
		return nil, nil, nil
	}
	rs := make([]rangeEntry, len(ranges))
	copy(rs, ranges)
	byLo := func(a, b rangeEntry) int { return cmp.Compare(a.lo, b.lo) }
	if !slices.IsSortedFunc(rs, byLo) {
		slices.SortFunc(rs, byLo)
	}

	prio := func(r rangeEntry) uint64 {
		var p uint64
		if !r.fallback {
			p = 1 << 63
		}
		return p | uint64(depth[r.node])<<32 | uint64(r.seq)
	}
	emit := func(lo, hi uint64, n NodeID) {
		if hi <= lo {
			return
		}
		if k := len(starts) - 1; k >= 0 && ends[k] == lo && nodes[k] == n {
			ends[k] = hi
			return
		}
		starts = append(starts, lo)
		ends = append(ends, hi)
		nodes = append(nodes, n)
	}

	h := &activeHeap{}
	i := 0
	var pos uint64
	for i < len(rs) || len(*h) > 0 {
		// Drop finished ranges from the top; the ones buried below are dropped when they surface.
		for len(*h) > 0 && (*h)[0].end <= pos {
			h.pop()
		}
		if len(*h) == 0 {
			if i >= len(rs) {
				break
			}
			pos = rs[i].lo
		}
		for i < len(rs) && rs[i].lo <= pos {
			if rs[i].hi > pos {
				h.push(active{end: rs[i].hi, prio: prio(rs[i]), node: rs[i].node})
			}
			i++
		}
		for len(*h) > 0 && (*h)[0].end <= pos {
			h.pop()
		}
		if len(*h) == 0 {
			continue
		}
		top := (*h)[0]
		next := top.end
		if i < len(rs) && rs[i].lo < next {
			next = rs[i].lo
		}
		// A buried range ending before next does not change the owner, so next is right.
		emit(pos, next, top.node)
		pos = next
	}
	return starts, ends, nodes
}

func (ix *Index) validate() error {
	ns, nn := uint32(len(ix.strings)), len(ix.nodes)
	for i, n := range ix.nodes {
		if n.Name >= ns || n.LinkageName >= ns || n.CallFile >= ns || n.DeclFile >= ns {
			return fmt.Errorf("%w: node %d names a string out of range", ErrCorrupt, i)
		}
		if n.Parent != NoParent && int(n.Parent) >= i {
			return fmt.Errorf("%w: node %d has parent %d not before it", ErrCorrupt, i, n.Parent)
		}
	}
	for i := range ix.ivNode {
		if int(ix.ivNode[i]) >= nn {
			return fmt.Errorf("%w: interval %d names node %d of %d", ErrCorrupt, i, ix.ivNode[i], nn)
		}
		if ix.ivEnd[i] <= ix.ivStart[i] || (i > 0 && ix.ivStart[i] < ix.ivEnd[i-1]) {
			return fmt.Errorf("%w: interval %d out of order", ErrCorrupt, i)
		}
	}
	for i := range ix.lnAddr {
		if i > 0 && ix.lnAddr[i] < ix.lnAddr[i-1] {
			return fmt.Errorf("%w: line row %d out of order", ErrCorrupt, i)
		}
		if ix.lnFile[i] != endFile && ix.lnFile[i] >= ns {
			return fmt.Errorf("%w: line row %d names a string out of range", ErrCorrupt, i)
		}
	}
	for i := range ix.onStart {
		if int(ix.onNode[i]) >= nn {
			return fmt.Errorf("%w: outer name %d names node %d of %d", ErrCorrupt, i, ix.onNode[i], nn)
		}
		if ix.onEnd[i] <= ix.onStart[i] || (i > 0 && ix.onStart[i] <= ix.onStart[i-1]) {
			return fmt.Errorf("%w: outer name %d out of order", ErrCorrupt, i)
		}
	}
	return nil
}

// Fidelity reports the best source that contributed to the index.
func (ix *Index) Fidelity() Fidelity { return ix.fidelity }

// Lookup resolves an ELF virtual address to its frames, innermost first. It returns nil when
// nothing is known about addr.
func (ix *Index) Lookup(addr uint64) []Frame {
	return ix.AppendLookup(nil, addr)
}

// AppendLookup is Lookup appending to dst, to spare allocations in batch loops.
func (ix *Index) AppendLookup(dst []Frame, addr uint64) []Frame {
	file, line, col, hasLine := ix.lineAt(addr)
	i := ix.ivHint.upperBound(ix.ivStart, addr) - 1
	if i < 0 || addr >= ix.ivEnd[i] {
		if !hasLine {
			return dst
		}
		return append(dst, Frame{File: ix.strings[file], Line: line, Column: col})
	}
	n := ix.ivNode[i]
	for {
		node := &ix.nodes[n]
		f := Frame{
			Function:     ix.strings[node.Name],
			LinkageName:  ix.strings[node.LinkageName],
			StartLine:    node.StartLine,
			StartFile:    ix.strings[node.DeclFile],
			StartAddress: node.StartAddress,
		}
		if hasLine {
			f.File, f.Line, f.Column = ix.strings[file], line, col
		}
		if node.Parent == NoParent {
			ix.nameOutermost(&f, addr)
			return append(dst, f)
		}
		dst = append(dst, f)
		file, line, col, hasLine = node.CallFile, node.CallLine, node.CallColumn, node.CallFile != 0 || node.CallLine != 0
		n = node.Parent
	}
}

// nameOutermost applies the outer name covering addr, if any, to the outermost frame.
func (ix *Index) nameOutermost(f *Frame, addr uint64) {
	if len(ix.onStart) == 0 {
		return
	}
	j := ix.onHint.upperBound(ix.onStart, addr) - 1
	if j < 0 || addr >= ix.onEnd[j] {
		return
	}
	n := &ix.nodes[ix.onNode[j]]
	f.Function, f.LinkageName, f.StartAddress = ix.strings[n.Name], ix.strings[n.LinkageName], n.StartAddress
}

func (ix *Index) lineAt(addr uint64) (file, line, col uint32, ok bool) {
	j := ix.lnHint.upperBound(ix.lnAddr, addr) - 1
	if j < 0 || ix.lnFile[j] == endFile {
		return 0, 0, 0, false
	}
	return ix.lnFile[j], ix.lnLine[j], ix.lnCol[j], true
}

// upperBound returns the index of the first element of sorted s greater than v, or len(s).
func upperBound(s []uint64, v uint64) int {
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m] <= v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Stats describes an index's size.
type Stats struct {
	Strings, Nodes, Intervals, LineRows int
	// Bytes approximates the memory the index holds.
	Bytes int64
}

// Stats reports the index's counts and approximate memory.
func (ix *Index) Stats() Stats {
	s := Stats{Strings: len(ix.strings), Nodes: len(ix.nodes), Intervals: len(ix.ivStart), LineRows: len(ix.lnAddr)}
	for _, str := range ix.strings {
		s.Bytes += int64(len(str)) + 16
	}
	s.Bytes += int64(len(ix.nodes))*40 + int64(len(ix.ivStart))*20 + int64(len(ix.lnAddr))*20 + int64(len(ix.onStart))*20
	return s
}
