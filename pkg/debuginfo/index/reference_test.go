package index

import (
	"slices"
	"sort"

	"github.com/profsym/profsym/pkg/debuginfo/demangle"
)

// referenceLookup is Lookup written the plain way, without the search hint: sort.Search over
// whole tables. The optimized lookup must agree with it at every address.
func (ix *Index) referenceLookup(addr uint64) []Frame {
	var (
		file, line, col uint32
		hasLine         bool
	)
	if j := sort.Search(len(ix.ln), func(k int) bool { return ix.ln[k].addr() > addr }) - 1; j >= 0 && ix.ln[j].file != endFile {
		file, line, col, hasLine = ix.ln[j].file, ix.ln[j].line, ix.ln[j].col, true
	}
	i := sort.Search(len(ix.iv), func(k int) bool { return ix.iv[k].start() > addr }) - 1
	if i < 0 || addr >= ix.iv[i].end() {
		if !hasLine {
			return nil
		}
		return []Frame{{File: ix.strings[file], Line: line, Column: col}}
	}
	var out []Frame
	for n := ix.iv[i].node; ; {
		node := ix.nodes[n]
		f := Frame{
			Function:     ix.refString(node.Name),
			LinkageName:  ix.strings[node.LinkageName],
			StartLine:    node.StartLine,
			StartFile:    ix.strings[node.DeclFile],
			StartAddress: node.StartAddress,
		}
		if hasLine {
			f.File, f.Line, f.Column = ix.strings[file], line, col
		}
		if node.Parent == NoParent {
			// Where no line row gives the outermost frame a file, its symbol's STT_FILE does.
			if !hasLine {
				f.File = ix.strings[node.CallFile]
			}
			if j := sort.Search(len(ix.on), func(k int) bool { return ix.on[k].start() > addr }) - 1; j >= 0 && addr < ix.on[j].end() {
				o := ix.nodes[ix.on[j].node]
				f.Function, f.LinkageName, f.StartAddress = ix.refString(o.Name), ix.strings[o.LinkageName], o.StartAddress
				if !hasLine {
					f.File = ix.strings[o.CallFile]
				}
			}
			return append(out, f)
		}
		out = append(out, f)
		file, line, col, hasLine = node.CallFile, node.CallLine, node.CallColumn, node.CallFile != 0 || node.CallLine != 0
		n = node.Parent
	}
}

// edgeAddrs lists the addresses where a search can go wrong: every table key, the addresses
// next to it, every interval end, bucket boundaries of the hint, and the extremes.
func (ix *Index) edgeAddrs() []uint64 {
	out := []uint64{0, 1, ^uint64(0), ^uint64(0) - 1}
	near := func(v uint64) {
		out = append(out, v, v-1, v+1)
	}
	for i := range ix.iv {
		near(ix.iv[i].start())
		near(ix.iv[i].end())
	}
	for i := range ix.on {
		near(ix.on[i].start())
		near(ix.on[i].end())
	}
	for i := range ix.ln {
		near(ix.ln[i].addr())
	}
	if h := ix.hint; h.first != nil {
		// Every bucket of a small hint; evenly spread ones, and the last, of a large one.
		step := max(1, h.buckets/4096)
		for b := uint64(0); b < h.buckets; b += step {
			near(h.base + b<<h.shift)
		}
		near(h.base + (h.buckets-1)<<h.shift)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// refString reads string id as the index shows it, without its cache: a name marked
// demangled (Builder.Demangled) is demangled here.
func (ix *Index) refString(id uint32) string {
	if ix.dm.has(id) {
		return demangle.Name(ix.strings[id])
	}
	return ix.strings[id]
}
