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
	"math/bits"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// NodeID names a function node inside one Builder or Index.
type NodeID uint32

// NoParent marks an outermost (not inlined) function.
const NoParent NodeID = ^NodeID(0)

// Node is one function in an inline chain: a concrete function, or one inlined instance of a
// function inside its caller. String fields are IDs from Builder.String.
type Node struct {
	// Name is the display name: the demangled linkage name when there is one, else the plain
	// name. A source that has the linkage name gives Builder.Demangled's ID, which reads as
	// the demangled name.
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
	// instance stands for (DW_AT_call_file/line/column). An outermost node has no call site:
	// CallLine and CallColumn are zero, and CallFile holds its SymbolFile (the field is reused
	// rather than added because indexes of large Go binaries hold millions of nodes).
	CallFile   uint32
	CallLine   uint32
	CallColumn uint32
}

// Frame is one resolved frame. A lookup returns the innermost inlined callee first and the
// outermost function last, the order of OTLP Location.lines and of llvm-symbolizer.
//
// Every string in a Frame (Function, LinkageName, File, StartFile) is valid UTF-8, whatever
// bytes the binary holds: the Builder replaces invalid sequences by U+FFFD, and Unmarshal
// rejects an encoding that holds an invalid string. Callers may put them into protobuf
// strings without checking again.
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
	strs    map[string]uint32
	strList []string
	// shown maps a linkage name's string ID to the ID of its demangled spelling (0: none;
	// string 0 is ""), which shownRefs lists in ID order (see Demangled). A slice by ID
	// rather than a map: it is read for every function a C++ program's DWARF adds.
	shown     []uint32
	shownRefs []demangledRef
	// nodes are chunks, as ranges and lines are, joined once by Build: appended to one
	// slice, bench/bigdwarf's 3.5 M nodes (139 MB) were 788 MB of allocations, each growth a
	// copy into fresh memory.
	nodes    chunks[Node]
	ranges   chunks[rangeEntry]
	lines    chunks[lineRow]
	outer    []rangeEntry
	fidelity Fidelity
}

type rangeEntry struct {
	lo, hi   uint64
	node     NodeID
	fallback bool
	seq      uint32
}

// lineRow is a row as added. 24 bytes: the end-of-sequence flag is file == endFile rather
// than a field of its own, which alignment would round up to 32 bytes; a large Go binary adds
// millions of rows, and the builder's array of them is its largest allocation.
type lineRow struct {
	addr   uint64
	file   uint32 // endFile: end of a sequence, addresses from here on have no line until the next row
	line   uint32
	column uint32
	seq    uint32
}

func (r lineRow) end() bool { return r.file == endFile }

// NewBuilder returns an empty builder whose string 0 is "".
func NewBuilder() *Builder {
	b := &Builder{strs: map[string]uint32{"": 0}, strList: []string{""}}
	return b
}

// String interns s and returns its ID. The builder keeps a copy of s: s may be a view of
// memory that the caller releases after adding it. Invalid UTF-8 sequences in s (symbol names and paths
// in binaries are arbitrary bytes) are replaced by U+FFFD, so that every string of an Index is
// valid UTF-8.
func (b *Builder) String(s string) uint32 {
	if id, ok := b.strs[s]; ok {
		return id
	}
	if !utf8.ValidString(s) {
		id := b.String(strings.ToValidUTF8(s, "\uFFFD"))
		b.strs[strings.Clone(s)] = id
		return id
	}
	// A copy: sources hand over views of their sections' bytes (dwarfsym's decoders read
	// names so), which may be released once the source is read.
	s = strings.Clone(s)
	id := uint32(len(b.strList))
	b.strs[s] = id
	b.strList = append(b.strList, s)
	return id
}

// AddNode registers a function node and returns its ID. A parent must be added before its
// children.
func (b *Builder) AddNode(n Node) NodeID {
	b.nodes.Append(n)
	return NodeID(b.nodes.Len() - 1)
}

// AddRange says node covers [lo, hi). Where ranges overlap, the deepest node in the inline tree
// wins; between nodes of equal depth, the one added last.
func (b *Builder) AddRange(lo, hi uint64, node NodeID) {
	if hi <= lo {
		return
	}
	b.ranges.Append(rangeEntry{lo: lo, hi: hi, node: node, seq: uint32(b.ranges.Len())})
}

// AddSymbolRange says node covers [lo, hi) as far as no AddRange covers those addresses: it is
// for symbol-table functions, which fill the gaps of debug information and never override it.
func (b *Builder) AddSymbolRange(lo, hi uint64, node NodeID) {
	if hi <= lo {
		return
	}
	b.ranges.Append(rangeEntry{lo: lo, hi: hi, node: node, fallback: true, seq: uint32(b.ranges.Len())})
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
// counts: growing a slice of millions of elements by appending costs far more memory at peak,
// and a small builder (one function's) allocates no more than it needs.
func (b *Builder) Grow(nodes, ranges, lines int) {
	b.nodes.Grow(nodes)
	b.ranges.Grow(ranges)
	b.lines.Grow(lines)
}

// AddLine adds a line-table row: from addr up to the next row, code belongs to file:line:column.
func (b *Builder) AddLine(addr uint64, file, line, column uint32) {
	b.lines.Append(lineRow{addr: addr, file: file, line: line, column: column, seq: uint32(b.lines.Len())})
}

// EndSequence marks the end of a line sequence at addr (exclusive).
func (b *Builder) EndSequence(addr uint64) {
	b.lines.Append(lineRow{addr: addr, file: endFile, seq: uint32(b.lines.Len())})
}

// RaiseFidelity records that a source delivered at least f.
func (b *Builder) RaiseFidelity(f Fidelity) {
	if f > b.fidelity {
		b.fidelity = f
	}
}

// Strings returns the strings interned so far, by ID; the caller must not change them.
func (b *Builder) Strings() []string { return b.strList }

// SetSymbolFiles gives each outermost node with an ID of at least from, a start address and no
// SymbolFile the file that file(StartAddress) returns. It is for functions read from a source
// other than the symbol table, Go's pclntab: where no line row covers an address,
// llvm-symbolizer places it in the STT_FILE of the local ELF symbol covering it, whichever
// source named the function.
func (b *Builder) SetSymbolFiles(from NodeID, file func(addr uint64) string) {
	for i := int(from); i < b.nodes.Len(); i++ {
		n := b.nodes.At(i)
		if n.Parent != NoParent || n.CallFile != 0 || n.StartAddress == 0 {
			continue
		}
		if f := file(n.StartAddress); f != "" {
			n.CallFile = b.String(f)
		}
	}
}

// NumNodes reports how many nodes have been added.
func (b *Builder) NumNodes() int { return b.nodes.Len() }

// Index is immutable once built and safe for concurrent lookups.
//
// Each table is one array of rows that hold their search key next to their payload, so that the
// row a search ends on brings the answer along in the same cache line: on a Go binary of 150 MB
// the tables hold millions of rows, and each further array a lookup reads is another miss.
type Index struct {
	strings  []string
	dm       *demangled // the strings read demangled (see Builder.Demangled); nil for none
	nodes    []Node
	iv       []ivRow // disjoint, sorted by start
	ln       []lnRow // sorted by address
	on       []ivRow // outer names (see AddOuterName), sorted by start with one row per start
	fidelity Fidelity

	// hint narrows all three searches at once; derived from the tables, never serialized.
	hint searchHint

	// str is the string table, made on first use (see Strings).
	str *lazyStrings
}

type lazyStrings struct {
	once  sync.Once
	table *StringTable
}

// ivRow is one interval [startAddr, endAddr) owned by node.
//
// name repeats the node's Name (filled by prepare, not serialized): with it in the row, a lookup
// loads the name's string header and the node at once, where reading it from the node would
// make them two cache misses in a row.
type ivRow struct {
	startAddr, endAddr uint64
	node               NodeID
	name               uint32
}

func (r *ivRow) start() uint64     { return r.startAddr }
func (r *ivRow) end() uint64       { return r.endAddr }
func (r *ivRow) setStart(v uint64) { r.startAddr = v }
func (r *ivRow) setEnd(v uint64)   { r.endAddr = v }

// lnRow is one line-table row: from addr up to the next row, code belongs to file:line:col.
// file is endFile for the end of a sequence. The address is stored as two 32-bit halves: a row
// of 20 bytes instead of the 24 that Go's alignment of a uint64 field would take, on the
// largest table of an index.
type lnRow struct {
	addrLo, addrHi uint32
	file           uint32
	line           uint32
	col            uint32
}

func (r *lnRow) addr() uint64 { return uint64(r.addrHi)<<32 | uint64(r.addrLo) }
func (r *lnRow) setAddr(v uint64) {
	r.addrLo, r.addrHi = uint32(v), uint32(v>>32)
}

// Tables the hint narrows, in the order of searchHint.first's columns.
const (
	tabLines = iota
	tabIntervals
	tabOuter
)

// searchHint is a radix table over the address range of all tables: for each bucket of
// 1<<shift addresses it holds, per table, the index of the first row whose key lies in that
// bucket or later. One load of it narrows the line, interval and outer-name searches to a few
// adjacent rows each, where separate hints per table cost a cache miss each.
type searchHint struct {
	base    uint64
	shift   uint
	buckets uint64
	stride  int      // columns per bucket: 2, or 3 when there are outer names
	first   []uint32 // first[b*stride+t] for table t
}

// hintRows is about how many rows of the largest table share one bucket: rows are 20 or 24
// bytes, so the rows of a bucket and the one before it span one or two cache lines.
const hintRows = 4

// makeHint builds the hint for the three tables; below 64 rows it builds none and lookups
// search the whole tables.
func makeHint(ln []lnRow, iv, on []ivRow) searchHint {
	most := max(len(ln), len(iv), len(on))
	if most < 64 {
		return searchHint{}
	}
	lo, hi := ^uint64(0), uint64(0)
	if n := len(ln); n > 0 {
		lo, hi = min(lo, ln[0].addr()), max(hi, ln[n-1].addr())
	}
	for _, t := range [][]ivRow{iv, on} {
		if n := len(t); n > 0 {
			lo, hi = min(lo, t[0].start()), max(hi, t[n-1].start())
		}
	}
	stride := 2
	if len(on) > 0 {
		stride = 3
	}
	span := hi - lo
	want := uint64(most / hintRows)
	var shift uint
	for span>>shift >= want {
		shift++
	}
	// One bucket past the last key, so that a search in the last bucket finds its end in
	// first[(b+1)*stride+t].
	buckets := span>>shift + 2
	h := searchHint{base: lo, shift: shift, buckets: buckets, stride: stride, first: make([]uint32, int(buckets)*stride)}
	// Each column is filled by a loop over its own row type: this runs on every Unmarshal, over
	// millions of rows, where a key callback per row costs as much as the rest.
	fill := func(t int, from, to uint64, i int) {
		for x := from; x < to; x++ {
			h.first[int(x)*stride+t] = uint32(i)
		}
	}
	var b uint64
	for i := range ln {
		if kb := (ln[i].addr() - lo) >> shift; b <= kb {
			fill(tabLines, b, kb+1, i)
			b = kb + 1
		}
	}
	fill(tabLines, b, buckets, len(ln))
	b = 0
	for i := range iv {
		if kb := (iv[i].start() - lo) >> shift; b <= kb {
			fill(tabIntervals, b, kb+1, i)
			b = kb + 1
		}
	}
	fill(tabIntervals, b, buckets, len(iv))
	if stride > tabOuter {
		b = 0
		for i := range on {
			if kb := (on[i].start() - lo) >> shift; b <= kb {
				fill(tabOuter, b, kb+1, i)
				b = kb + 1
			}
		}
		fill(tabOuter, b, buckets, len(on))
	}
	return h
}

// bucket returns the bucket of v, or ok false with the answer every table shares: 0 for v
// below all keys, each table's length (past) for v above all keys.
func (h *searchHint) bucket(v uint64) (b int, below, above bool) {
	if v < h.base {
		return 0, true, false
	}
	// Not x+1 >= h.buckets: with shift 0 and base 0, x+1 overflows for the top address.
	x := (v - h.base) >> h.shift
	if x >= h.buckets-1 {
		return 0, false, true
	}
	return int(x) * h.stride, false, false
}

// prepare derives the lookup structures from the tables, after Build or Unmarshal.
func (ix *Index) prepare() {
	for _, t := range [][]ivRow{ix.iv, ix.on} {
		for i := range t {
			t[i].name = ix.nodes[t[i].node].Name
		}
	}
	ix.hint = makeHint(ix.ln, ix.iv, ix.on)
}

const endFile = ^uint32(0)

// ErrCorrupt is wrapped by every error about an inconsistent index or builder input.
var ErrCorrupt = errors.New("corrupt index")

// Build flattens what was added into an Index.
func (b *Builder) Build() (*Index, error) {
	nodes := b.nodes.Join()
	depth, err := depths(nodes)
	if err != nil {
		return nil, err
	}
	ix := &Index{strings: b.strList, dm: newDemangled(len(b.strList), b.shownRefs), nodes: nodes, fidelity: b.fidelity, str: &lazyStrings{}}
	ix.iv = flatten(sortByLo(&b.ranges), depth)
	ix.on = dropSameOuterNames(outerNames(b.outer), ix.iv, nodes)

	// The rows are read where they were added, in their chunks (see chunks); only when
	// sequences interleave are they joined and sorted.
	rows := lineRows{c: &b.lines}
	runs := sortedRuns(&b.lines)
	if runs == nil {
		rows.sorted = b.lines.Join()
		slices.SortFunc(rows.sorted, func(a, b lineRow) int { return lineCmp(&a, &b) })
		runs = []span{{0, len(rows.sorted)}}
	}
	// A row that says what the row before it says changes no lookup (a lookup takes the last
	// row at or below the address) and is dropped: Go's DWARF repeats file:line on about a
	// third of its rows (statement boundaries), and on a large binary that is megabytes. Rows
	// are counted first so that the index's table is allocated once, at its final size.
	kept := 0
	var prev *lineRow
	for _, rn := range runs {
		for i := rn.lo; i < rn.hi; i++ {
			r := rows.at(i)
			if prev == nil || !sameLine(prev, r) {
				kept++
			}
			prev = r
		}
	}
	ix.ln = make([]lnRow, kept)
	k := 0
	prev = nil
	for _, rn := range runs {
		for i := rn.lo; i < rn.hi; i++ {
			r := rows.at(i)
			if prev != nil && sameLine(prev, r) {
				prev = r
				continue
			}
			prev = r
			lr := &ix.ln[k]
			k++
			lr.setAddr(r.addr)
			if r.end() {
				lr.file = endFile
			} else {
				lr.file, lr.line, lr.col = r.file, r.line, r.column
			}
		}
	}
	b.lines = chunks[lineRow]{}
	if err := ix.validate(); err != nil {
		return nil, err
	}
	ix.prepare()
	return ix, nil
}

// lineRows reads the builder's line rows where they were added, or sorted when they had to
// be. Its at, lineCmp and sameLine are plain functions rather than closures, so that the
// passes over the rows (tens of millions on a large binary) inline them.
type lineRows struct {
	c      *chunks[lineRow]
	sorted []lineRow
}

func (s *lineRows) at(i int) *lineRow {
	if s.sorted != nil {
		return &s.sorted[i]
	}
	return s.c.At(i)
}

// lineCmp orders line rows by address. An end marker and a row at one address: the row
// starts the next sequence and wins. Otherwise the row added last wins: seq makes the order
// total, so an unstable sort (much faster than a stable one on millions of rows) gives the
// stable result.
func lineCmp(a, b *lineRow) int {
	if c := cmp.Compare(a.addr, b.addr); c != 0 {
		return c
	}
	switch {
	case a.end() && !b.end():
		return -1
	case !a.end() && b.end():
		return 1
	}
	return cmp.Compare(a.seq, b.seq)
}

// sameLine reports whether row r says what row p before it says.
func sameLine(p, r *lineRow) bool {
	return p.end() == r.end() && (p.end() || p.file == r.file && p.line == r.line && p.column == r.column)
}

// span is a run of rows [lo, hi).
type span struct{ lo, hi int }

// sortedRuns returns the order of the rows as spans of rows: the rows in span order are
// sorted by lineCmp. Sources add sequences mostly in address order, so this is checked
// before sorting. It returns nil when sequences interleave, and the rows need a sort of
// their own.
func sortedRuns(rows *chunks[lineRow]) []span {
	// A run ends where the order breaks and after every end marker: consecutive sequences
	// of one unit ascend, but other units' sequences may lie in the gaps between them.
	var runs []span
	n := rows.Len()
	start := 0
	for i := 1; i <= n; i++ {
		if i == n {
			runs = append(runs, span{start, i})
			break
		}
		if p := rows.At(i - 1); p.end() || lineCmp(p, rows.At(i)) > 0 {
			runs = append(runs, span{start, i})
			start = i
		}
	}
	if len(runs) <= 1 {
		return runs
	}
	slices.SortFunc(runs, func(a, b span) int { return lineCmp(rows.At(a.lo), rows.At(b.lo)) })
	for k := 1; k < len(runs); k++ {
		// Each run must end before the next begins; otherwise their rows interleave.
		if lineCmp(rows.At(runs[k-1].hi-1), rows.At(runs[k].lo)) >= 0 {
			return nil
		}
	}
	return runs
}

// outerNames sorts the outer-name ranges by start, keeping the last added for each start.
func outerNames(rs []rangeEntry) (rows []ivRow) {
	if len(rs) == 0 {
		return nil
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
		rows = append(rows, newIvRow(r.lo, r.hi, r.node))
	}
	return rows
}

// dropSameOuterNames drops the outer-name rows that rename no frame: where every interval
// the row covers has an outermost function of the same name, linkage name, start address and
// symbol file, applying it changes nothing. Such rows are most of them where DWARF names
// functions as the symbol table does (the zstd CLI of the corpus: 658 of 1,030 rows dropped),
// and each is index memory, and on an index larger than the caches a row and a node that a
// lookup reads for nothing.
//
// A lookup applies the row with the last start at or below the address, if the address is
// below that row's end; so each row is first cut at the next row's start, which changes no
// lookup, and then dropping a row cannot let the row before it cover the dropped one's
// addresses.
func dropSameOuterNames(on, iv []ivRow, nodes []Node) []ivRow {
	if len(on) == 0 {
		return on
	}
	for i := 0; i+1 < len(on); i++ {
		on[i].setEnd(min(on[i].end(), on[i+1].start()))
	}
	// root[n] is the outermost node of n's inline chain; parents come before children.
	root := make([]NodeID, len(nodes))
	for i := range nodes {
		if p := nodes[i].Parent; p == NoParent {
			root[i] = NodeID(i)
		} else {
			root[i] = root[p]
		}
	}
	same := func(a, b *Node) bool {
		return a.Name == b.Name && a.LinkageName == b.LinkageName && a.StartAddress == b.StartAddress &&
			a.SymbolFile() == b.SymbolFile()
	}
	kept := on[:0]
	v := 0 // the first interval that may overlap the row
	for _, r := range on {
		for v < len(iv) && iv[v].end() <= r.start() {
			v++
		}
		n := &nodes[r.node]
		renames := false
		for w := v; w < len(iv) && iv[w].start() < r.end(); w++ {
			if !same(n, &nodes[root[iv[w].node]]) {
				renames = true
				break
			}
		}
		if renames {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}

func newIvRow(start, end uint64, node NodeID) ivRow {
	var r ivRow
	r.setStart(start)
	r.setEnd(end)
	r.node = node
	return r
}

// depths computes each node's inline depth and rejects cycles and forward references.
func depths(nodes []Node) ([]uint32, error) {
	d := make([]uint32, len(nodes))
	for i, n := range nodes {
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

// flatten turns possibly nested or overlapping ranges, sorted by start (sortByLo), into
// disjoint sorted intervals, each owned by the highest-priority range covering it.
func flatten(ranges []rangeEntry, depth []uint32) (rows []ivRow) {
	if len(ranges) == 0 {
		return nil
	}
	rs := ranges

	prio := func(r rangeEntry) uint64 {
		var p uint64
		if !r.fallback {
			p = 1 << 63
		}
		return p | uint64(depth[r.node])<<32 | uint64(r.seq)
	}
	// The rows go to chunks, joined at the end: appended to one slice, bench/bigdwarf's
	// 3.5 M rows were grown and copied about five times over (0.4 s of CPU).
	var out chunks[ivRow]
	var last *ivRow
	emit := func(lo, hi uint64, n NodeID) {
		if hi <= lo {
			return
		}
		if last != nil && last.end() == lo && last.node == n {
			last.setEnd(hi)
			return
		}
		out.Append(newIvRow(lo, hi, n))
		last = out.At(out.Len() - 1)
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
	return out.Join()
}

// sortByLo empties c into one slice of its ranges ordered by start (in any order among equal
// starts: flatten's priorities decide between them). A radix sort on the start's offset from
// the lowest, by its high bits straight out of the chunks into the slice, then each bucket
// (a few dozen ranges) by comparison: on bench/bigdwarf's 6.3 M ranges slices.SortFunc took
// 1.2 s of the build's CPU. Scattering from the chunks spares the copy that joining them
// first made, 200 MB of fresh memory there.
func sortByLo(c *chunks[rangeEntry]) []rangeEntry {
	n := c.Len()
	if n == 0 {
		return nil
	}
	sorted := true
	lo, hi := c.At(0).lo, c.At(0).lo
	prev := lo
	for _, ch := range c.list {
		for i := range ch {
			v := ch[i].lo
			if v < prev {
				sorted = false
			}
			prev = v
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	byLo := func(a, b rangeEntry) int { return cmp.Compare(a.lo, b.lo) }
	if sorted || n < 1<<12 {
		all := c.Join()
		if !sorted {
			slices.SortFunc(all, byLo)
		}
		return all
	}
	// About 32 ranges per bucket.
	digitBits := min(max(bits.Len(uint(n/32)), 8), 20)
	shift := max(bits.Len64(hi-lo)-digitBits, 0)
	count := make([]int, 1<<digitBits+1)
	for _, ch := range c.list {
		for i := range ch {
			count[(ch[i].lo-lo)>>shift+1]++
		}
	}
	for d := 1; d < len(count); d++ {
		count[d] += count[d-1]
	}
	out := make([]rangeEntry, n)
	next := slices.Clone(count[:len(count)-1])
	for k, ch := range c.list {
		for i := range ch {
			d := (ch[i].lo - lo) >> shift
			out[next[d]] = ch[i]
			next[d]++
		}
		c.list[k] = nil
	}
	*c = chunks[rangeEntry]{}
	if shift > 0 {
		for d := 0; d+1 < len(count); d++ {
			switch b := out[count[d]:count[d+1]]; {
			case len(b) > 48:
				slices.SortFunc(b, byLo)
			case len(b) > 1:
				// Insertion, by the key itself: a comparison function's call per
				// step was most of the time the buckets took.
				for i := 1; i < len(b); i++ {
					for j := i; j > 0 && b[j].lo < b[j-1].lo; j-- {
						b[j], b[j-1] = b[j-1], b[j]
					}
				}
			}
		}
	}
	return out
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
	for i := range ix.iv {
		r := &ix.iv[i]
		if int(r.node) >= nn {
			return fmt.Errorf("%w: interval %d names node %d of %d", ErrCorrupt, i, r.node, nn)
		}
		if r.end() <= r.start() || (i > 0 && r.start() < ix.iv[i-1].end()) {
			return fmt.Errorf("%w: interval %d out of order", ErrCorrupt, i)
		}
	}
	for i := range ix.ln {
		if i > 0 && ix.ln[i].addr() < ix.ln[i-1].addr() {
			return fmt.Errorf("%w: line row %d out of order", ErrCorrupt, i)
		}
		if f := ix.ln[i].file; f != endFile && f >= ns {
			return fmt.Errorf("%w: line row %d names a string out of range", ErrCorrupt, i)
		}
	}
	for i := range ix.on {
		r := &ix.on[i]
		if int(r.node) >= nn {
			return fmt.Errorf("%w: outer name %d names node %d of %d", ErrCorrupt, i, r.node, nn)
		}
		if r.end() <= r.start() || (i > 0 && r.start() <= ix.on[i-1].start()) {
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

// FrameRef is a Frame whose strings are IDs into the index's StringTable. Equal IDs are equal
// strings, and an index holds each distinct string once, with one exception: a function name
// kept mangled and read demangled (Builder.Demangled) has an ID of its own per linkage name,
// which may read as another ID's string does.
type FrameRef struct {
	Function, LinkageName, File, StartFile uint32
	Line, Column, StartLine                uint32
	StartAddress                           uint64
}

// Frame returns r with its strings.
func (ix *Index) Frame(r FrameRef) Frame {
	return Frame{
		Function: ix.dm.get(ix.strings, r.Function), LinkageName: ix.strings[r.LinkageName], File: ix.strings[r.File],
		Line: r.Line, Column: r.Column, StartLine: r.StartLine,
		StartFile: ix.strings[r.StartFile], StartAddress: r.StartAddress,
	}
}

// AppendLookup is Lookup appending to dst, to spare allocations in batch loops.
func (ix *Index) AppendLookup(dst []Frame, addr uint64) []Frame {
	var buf [16]FrameRef
	for _, r := range ix.AppendLookupRefs(buf[:0], addr) {
		dst = append(dst, ix.Frame(r))
	}
	return dst
}

// AppendLookupRefs is AppendLookup with string IDs instead of strings.
func (ix *Index) AppendLookupRefs(dst []FrameRef, addr uint64) []FrameRef {
	lnLo, lnHi, ivLo, ivHi := 0, len(ix.ln), 0, len(ix.iv)
	if h := &ix.hint; h.first != nil {
		b, below, above := h.bucket(addr)
		switch {
		case below:
			return dst
		case above:
			lnLo, ivLo = lnHi, ivHi
		default:
			f := h.first[b : b+2*h.stride]
			lnLo, ivLo = int(f[tabLines]), int(f[tabIntervals])
			lnHi, ivHi = int(f[h.stride+tabLines]), int(f[h.stride+tabIntervals])
		}
	}
	// The interval's node is loaded before the line search starts, so that the cache misses of
	// the two chains (interval row, node; line row) overlap instead of following each other.
	i := ivUpper(ix.iv, ivLo, ivHi, addr) - 1
	inFunc := i >= 0 && addr < ix.iv[i].end()
	var node *Node
	var fn uint32
	if inFunc {
		r := &ix.iv[i]
		node, fn = &ix.nodes[r.node], r.name
	}
	j := lnUpper(ix.ln, lnLo, lnHi, addr) - 1
	var file, line, col uint32
	hasLine := false
	if j >= 0 {
		if r := &ix.ln[j]; r.file != endFile {
			file, line, col, hasLine = r.file, r.line, r.col, true
		}
	}
	if !inFunc {
		if !hasLine {
			return dst
		}
		return append(dst, FrameRef{File: file, Line: line, Column: col})
	}
	for {
		f := FrameRef{
			Function:     fn,
			LinkageName:  node.LinkageName,
			StartLine:    node.StartLine,
			StartFile:    node.DeclFile,
			StartAddress: node.StartAddress,
		}
		if hasLine {
			f.File, f.Line, f.Column = file, line, col
		}
		if node.Parent == NoParent {
			if !hasLine {
				f.File = node.SymbolFile()
			}
			ix.nameOutermost(&f, addr, hasLine)
			return append(dst, f)
		}
		dst = append(dst, f)
		file, line, col, hasLine = node.CallFile, node.CallLine, node.CallColumn, node.CallFile != 0 || node.CallLine != 0
		node = &ix.nodes[node.Parent]
		fn = node.Name
	}
}

// nameOutermost applies the outer name covering addr, if any, to the outermost frame, and its
// symbol's file where no line row gives the frame one.
func (ix *Index) nameOutermost(f *FrameRef, addr uint64, hasLine bool) {
	if len(ix.on) == 0 {
		return
	}
	lo, hi := 0, len(ix.on)
	if h := &ix.hint; h.first != nil {
		b, below, above := h.bucket(addr)
		switch {
		case below:
			return
		case above:
			lo = hi
		default:
			// The hint has an outer-name column whenever there are outer names.
			lo, hi = int(h.first[b+tabOuter]), int(h.first[b+h.stride+tabOuter])
		}
	}
	j := ivUpper(ix.on, lo, hi, addr) - 1
	if j < 0 || addr >= ix.on[j].end() {
		return
	}
	r := &ix.on[j]
	n := &ix.nodes[r.node]
	f.Function, f.LinkageName, f.StartAddress = r.name, n.LinkageName, n.StartAddress
	if !hasLine {
		f.File = n.SymbolFile()
	}
}

// SymbolFile returns, for an outermost node made from a local ELF symbol, the name of the
// STT_FILE symbol it belongs to, else the empty-string ID. It is the file of the outermost
// frame where no line row gives one (at line 0), as in llvm-symbolizer.
func (n *Node) SymbolFile() uint32 {
	if n.Parent != NoParent {
		return 0
	}
	return n.CallFile
}

// lnUpper returns the index of the first row in rows[lo:hi] whose address is greater than v,
// or hi. The hint guarantees that rows before lo are <= v and rows from hi on are > v.
//
// The comparison stays a branch: measured on a 150 MB Go binary, a branch-free form (the borrow
// of a subtraction added into the index) was slower, as the predicted branch lets the CPU load
// the next probe before the current one arrives from memory.
func lnUpper(rows []lnRow, lo, hi int, v uint64) int {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rows[m].addr() <= v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// ivUpper is lnUpper for interval starts.
func ivUpper(rows []ivRow, lo, hi int, v uint64) int {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rows[m].start() <= v {
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
	// Bytes approximates the memory the index holds, the names it demangles when they are
	// read counted as if all were read.
	Bytes int64
}

// Stats reports the index's counts and approximate memory.
func (ix *Index) Stats() Stats {
	s := Stats{Strings: len(ix.strings), Nodes: len(ix.nodes), Intervals: len(ix.iv), LineRows: len(ix.ln)}
	for i, str := range ix.strings {
		s.Bytes += 16
		if !ix.dm.has(uint32(i)) { // else the bytes are its linkage name's
			s.Bytes += int64(len(str))
		}
	}
	s.Bytes += ix.dm.readBytes(ix.strings)
	s.Bytes += int64(len(ix.nodes))*int64(unsafe.Sizeof(Node{})) +
		int64(len(ix.iv)+len(ix.on))*int64(unsafe.Sizeof(ivRow{})) +
		int64(len(ix.ln))*int64(unsafe.Sizeof(lnRow{})) +
		int64(len(ix.hint.first))*4
	return s
}

// Touch reads, for each address, the memory its lookup reads first: the hint bucket, then the
// line and interval rows that bucket starts at, then the node of the interval holding the
// address. Lookups of the same addresses right after find those in cache. On a large index
// nearly every one of these reads misses the cache, and within one lookup each waits for the
// one before it; here the reads of different addresses do not depend on each other, so the
// processor overlaps their misses. A batch of a few dozen addresses is the intended use
// (BenchmarkWarm in symbolizecmd measures it). The result means nothing; it keeps the reads
// from being optimized away.
//
// Each step first works out where to read, from what is in cache, and then reads in a loop of
// a few instructions: a miss holds up the retirement of everything after it, and the fewer
// instructions each read brings along, the more reads the processor has under way at once.
func (ix *Index) Touch(addrs []uint64) uint64 {
	h := &ix.hint
	if h.first == nil || len(ix.iv) == 0 || len(ix.ln) == 0 {
		return 0
	}
	var sink uint64
	for len(addrs) > 0 {
		n := min(len(addrs), touchBatch)
		sink += ix.touch(addrs[:n])
		addrs = addrs[n:]
	}
	return sink
}

// touchBatch is how many addresses touch reads for at a time, in arrays on its stack.
const touchBatch = 64

func (ix *Index) touch(addrs []uint64) uint64 {
	h := &ix.hint
	var (
		sink    uint64
		buckets [touchBatch]int32     // the first column of the buckets of addresses inside the tables
		lines   [3 * touchBatch]int32 // rows to read
		ivs     [2 * touchBatch]int32
		nodes   [2 * touchBatch]int32
	)
	n := 0
	for _, a := range addrs {
		if b, below, above := h.bucket(a); !below && !above {
			buckets[n] = int32(b)
			n++
		}
	}
	for _, b := range buckets[:n] {
		sink += uint64(h.first[b])
	}
	// A lookup searches the bucket's rows and the one before them: the one before, the
	// middle (the binary search's first probe) and the last row are read, the lines of a
	// bucket of about hintRows rows.
	for i, b := range buckets[:n] {
		f := h.first[b : int(b)+2*h.stride]
		lo, hi := int(f[tabLines]), int(f[h.stride+tabLines])
		lines[3*i] = int32(max(lo-1, 0))
		lines[3*i+1] = int32(min((lo+hi)/2, len(ix.ln)-1))
		lines[3*i+2] = int32(min(max(hi-1, 0), len(ix.ln)-1))
		lo, hi = int(f[tabIntervals]), int(f[h.stride+tabIntervals])
		ivs[2*i] = int32(max(lo-1, 0))
		ivs[2*i+1] = int32(min(max(hi-1, 0), len(ix.iv)-1))
	}
	for _, l := range lines[:3*n] {
		sink += uint64(ix.ln[l].addrLo)
	}
	for _, v := range ivs[:2*n] {
		sink += ix.iv[v].startAddr
	}
	outer := h.stride > tabOuter && len(ix.on) > 0
	if outer {
		// The outermost frame's name, for binaries with outer names (nameOutermost).
		for i, b := range buckets[:n] {
			f := h.first[b : int(b)+2*h.stride]
			lo, hi := int(f[tabOuter]), int(f[h.stride+tabOuter])
			ivs[2*i] = int32(max(lo-1, 0))
			ivs[2*i+1] = int32(min(max(hi-1, 0), len(ix.on)-1))
		}
		for _, v := range ivs[:2*n] {
			sink += ix.on[v].startAddr
		}
	}
	m := 0
	for _, a := range addrs {
		if b, below, above := h.bucket(a); !below && !above {
			f := h.first[b : b+2*h.stride]
			v := ivUpper(ix.iv, int(f[tabIntervals]), int(f[h.stride+tabIntervals]), a) - 1
			if v >= 0 && a < ix.iv[v].end() {
				nodes[m] = int32(ix.iv[v].node)
				m++
			}
			if outer {
				o := ivUpper(ix.on, int(f[tabOuter]), int(f[h.stride+tabOuter]), a) - 1
				if o >= 0 && a < ix.on[o].end() {
					nodes[m] = int32(ix.on[o].node)
					m++
				}
			}
		}
	}
	for _, nd := range nodes[:m] {
		sink += uint64(ix.nodes[nd].Parent)
	}
	// The caller of an inlined frame's function: the first step of the inline chain.
	p := 0
	for _, nd := range nodes[:m] {
		if parent := ix.nodes[nd].Parent; parent != NoParent {
			nodes[p] = int32(parent)
			p++
		}
	}
	for _, nd := range nodes[:p] {
		sink += uint64(ix.nodes[nd].Name)
	}
	return sink
}

// TouchStrings reads the strings of refs that a printer writes (function, file, start file)
// so that their reads overlap, as Touch does for lookups: the strings' headers first, then
// the first and last byte of each (the names and paths of a large binary often span two
// cache lines).
func (ix *Index) TouchStrings(refs []FrameRef) uint64 {
	var sink uint64
	var ids [3 * touchBatch]uint32
	for len(refs) > 0 {
		k := min(len(refs), touchBatch)
		n := 0
		for i := range refs[:k] {
			r := &refs[i]
			ids[n], ids[n+1] = r.Function, r.File
			n += 2
			if r.StartFile != r.File {
				ids[n] = r.StartFile
				n++
			}
		}
		for _, id := range ids[:n] {
			sink += uint64(len(ix.strings[id]))
		}
		for _, id := range ids[:n] {
			if s := ix.strings[id]; len(s) > 0 {
				sink += uint64(s[0]) + uint64(s[len(s)-1])
			}
		}
		refs = refs[k:]
	}
	return sink
}
