// Package dwarfsym feeds DWARF 4 and 5 debug information (functions, inlined instances and line
// tables) into the symbolization index, with the semantics of llvm-symbolizer: the frames a
// lookup returns are the ones llvm-symbolizer prints for the same address.
package dwarfsym

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/profsym/profsym/pkg/debuginfo/demangle"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// Options tunes Load.
type Options struct {
	// Workers is the number of goroutines that decode compilation units; 0 means GOMAXPROCS.
	Workers int
}

// Stats says what Load found.
type Stats struct {
	Version          int // highest DWARF version among the units
	Units            int // compilation units decoded
	Functions        int // subprograms with code
	InlinedInstances int // inlined subroutines with code
	LineRows         int // line-table rows added, end-of-sequence markers included
	HasInlines       bool
}

// maxRefChain bounds how many abstract_origin/specification hops a name lookup follows; real
// chains are two or three long, so a longer one is a cycle or garbage.
const maxRefChain = 64

// Load decodes the DWARF sections (keys without the ".debug_" prefix, already decompressed) and
// adds every function, inlined instance and line row to b. Units are decoded in parallel and
// added in section order, so the same input always gives the same index.
func Load(sections map[string][]byte, order binary.ByteOrder, b *index.Builder, opts Options) (st Stats, err error) {
	info := sections["info"]
	if len(info) == 0 {
		return st, errors.New("dwarfsym: no .debug_info section")
	}
	units, err := scanUnits(info, order)
	if err != nil {
		return st, fmt.Errorf("dwarfsym: %w", err)
	}
	d, err := newData(sections)
	if err != nil {
		return st, fmt.Errorf("dwarfsym: %w", err)
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if workers > len(units) {
		workers = len(units)
	}
	if workers < 1 {
		workers = 1
	}

	// Workers run ahead of the single consumer by at most window units, which bounds the
	// decoded-but-not-yet-added memory.
	window := 4 * workers
	results := make([]chan *unitResult, len(units))
	for i := range results {
		results[i] = make(chan *unitResult, 1)
	}
	jobs := make(chan int)
	tokens := make(chan struct{}, window)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(jobs)
		for i := range units {
			select {
			case tokens <- struct{}{}:
			case <-stop:
				return
			}
			select {
			case jobs <- i:
			case <-stop:
				return
			}
		}
	}()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dec := newDecoder(d, sections, order)
			for i := range jobs {
				results[i] <- dec.unit(units[i])
			}
		}()
	}
	// On an early return the feeder sees stop and the workers finish the jobs already
	// handed out (their result channels are buffered), so nothing outlives Load.
	defer func() {
		close(stop)
		wg.Wait()
	}()

	add := newAdder(b)
	for i := range units {
		r := <-results[i]
		<-tokens
		if r.err != nil {
			return st, fmt.Errorf("dwarfsym: unit at offset %#x: %w", units[i].off, r.err)
		}
		if !r.compile {
			continue
		}
		st.Units++
		if units[i].version > st.Version {
			st.Version = units[i].version
		}
		add.unit(r, &st)
	}
	st.HasInlines = st.InlinedInstances > 0
	switch {
	case st.Functions > 0:
		b.RaiseFidelity(index.FidelityFullInlines)
	case st.LineRows > 0:
		b.RaiseFidelity(index.FidelityLines)
	}
	return st, nil
}

func newData(s map[string][]byte) (d *dwarf.Data, err error) {
	defer func() {
		if r := recover(); r != nil {
			d, err = nil, fmt.Errorf("parse units: %v", r)
		}
	}()
	d, err = dwarf.New(s["abbrev"], s["aranges"], nil, s["info"], s["line"], nil, s["ranges"], s["str"])
	if err != nil {
		return nil, fmt.Errorf("parse units: %w", err)
	}
	for _, name := range []string{"addr", "line_str", "str_offsets", "rnglists"} {
		if data, ok := s[name]; ok {
			if err := d.AddSection(".debug_"+name, data); err != nil {
				return nil, fmt.Errorf("add .debug_%s: %w", name, err)
			}
		}
	}
	return d, nil
}

type unitHeader struct {
	off     uint64 // offset of the unit header in .debug_info
	dieOff  uint64 // offset of its first DIE
	end     uint64 // offset just past the unit
	version int
	dwarf64 bool
}

// scanUnits walks the unit headers of .debug_info. debug/dwarf does not expose unit versions
// or boundaries, and both are needed: the version for the file-index base and the boundaries to
// hand units to workers.
func scanUnits(info []byte, order binary.ByteOrder) ([]unitHeader, error) {
	var units []unitHeader
	r := &secReader{data: info, order: order}
	for r.off < len(info) {
		start := r.off
		length := uint64(r.u32())
		dwarf64 := false
		if length == 0xffffffff {
			length = r.u64()
			dwarf64 = true
		} else if length >= 0xfffffff0 {
			return nil, fmt.Errorf("unit at offset %#x: reserved length %#x", start, length)
		}
		if r.err != nil || length > uint64(len(info)-r.off) {
			return nil, fmt.Errorf("unit at offset %#x: length %d exceeds .debug_info", start, length)
		}
		end := r.off + int(length)
		u := unitHeader{off: uint64(start), version: int(r.u16()), dwarf64: dwarf64}
		offSize := 4
		if dwarf64 {
			offSize = 8
		}
		switch {
		case u.version >= 2 && u.version <= 4:
			r.skip(uint64(offSize) + 1)
		case u.version == 5:
			ut := r.u8()
			r.skip(1 + uint64(offSize))
			switch ut {
			case 0x02, 0x06: // type, split type: signature and type offset
				r.skip(8 + uint64(offSize))
			case 0x04, 0x05: // skeleton, split compile: DWO id
				r.skip(8)
			}
		default:
			return nil, fmt.Errorf("unit at offset %#x: unsupported DWARF version %d", start, u.version)
		}
		if r.err != nil || r.off > end {
			return nil, fmt.Errorf("unit at offset %#x: truncated header", start)
		}
		u.dieOff = uint64(r.off)
		u.end = uint64(end)
		units = append(units, u)
		r.off = end
	}
	return units, nil
}

// unitResult is one compilation unit decoded by a worker, with strings local to the unit so
// that the consumer interns each distinct string once per unit.
type unitResult struct {
	err     error
	compile bool
	strs    []string
	nodes   []localNode
	ranges  []localRange
	lines   []localLine
	inlined int
	funcs   int
}

type localNode struct {
	name, linkage, callFile uint32 // indexes into unitResult.strs
	startLine               uint32
	parent                  int32 // index into unitResult.nodes, -1 for outermost
	callLine, callColumn    uint32
}

type localRange struct {
	lo, hi uint64
	node   int32
}

type localLine struct {
	addr         uint64
	file         uint32 // index into unitResult.strs
	line, column uint32
	end          bool
}

type adder struct {
	b   *index.Builder
	ids []uint32
	nid []index.NodeID
}

func newAdder(b *index.Builder) *adder { return &adder{b: b} }

func (a *adder) unit(r *unitResult, st *Stats) {
	a.ids = a.ids[:0]
	for _, s := range r.strs {
		a.ids = append(a.ids, a.b.String(s))
	}
	a.nid = a.nid[:0]
	for _, n := range r.nodes {
		parent := index.NoParent
		if n.parent >= 0 {
			parent = a.nid[n.parent]
		}
		a.nid = append(a.nid, a.b.AddNode(index.Node{
			Name:        a.ids[n.name],
			LinkageName: a.ids[n.linkage],
			StartLine:   n.startLine,
			Parent:      parent,
			CallFile:    a.ids[n.callFile],
			CallLine:    n.callLine,
			CallColumn:  n.callColumn,
		}))
	}
	for _, rg := range r.ranges {
		a.b.AddRange(rg.lo, rg.hi, a.nid[rg.node])
	}
	for _, l := range r.lines {
		if l.end {
			a.b.EndSequence(l.addr)
		} else {
			a.b.AddLine(l.addr, a.ids[l.file], l.line, l.column)
		}
	}
	st.Functions += r.funcs
	st.InlinedInstances += r.inlined
	st.LineRows += len(r.lines)
}

// funcNames is what the name lookup learns from a DIE and the DIEs it refers to.
type funcNames struct {
	name, linkage string
	declLine      uint32
	hasName       bool
	hasLinkage    bool
	hasDeclLine   bool
}

type refDIE struct {
	funcNames
	origin, spec dwarf.Offset
	hasOrigin    bool
	hasSpec      bool
}

type decoder struct {
	d     *dwarf.Data
	order binary.ByteOrder
	sec   map[string][]byte
	r     *dwarf.Reader
	ref   *dwarf.Reader
	// refs caches the attributes of referenced DIEs across the units this worker decodes;
	// -flto and C++ specifications point many DIEs at the same few.
	refs map[dwarf.Offset]*refDIE

	res     *unitResult
	strIdx  map[string]uint32
	display map[string]string
}

func newDecoder(d *dwarf.Data, sec map[string][]byte, order binary.ByteOrder) *decoder {
	return &decoder{
		d: d, order: order, sec: sec,
		r: d.Reader(), ref: d.Reader(),
		refs:    make(map[dwarf.Offset]*refDIE),
		display: make(map[string]string),
	}
}

func (dc *decoder) str(s string) uint32 {
	if id, ok := dc.strIdx[s]; ok {
		return id
	}
	id := uint32(len(dc.res.strs))
	dc.strIdx[s] = id
	dc.res.strs = append(dc.res.strs, s)
	return id
}

// unit decodes one unit; a panic inside debug/dwarf on hostile input becomes the unit's error.
func (dc *decoder) unit(u unitHeader) (res *unitResult) {
	dc.res = &unitResult{strs: []string{""}}
	dc.strIdx = map[string]uint32{"": 0}
	defer func() {
		if r := recover(); r != nil {
			res = &unitResult{err: fmt.Errorf("malformed DWARF: %v", r)}
		}
	}()
	if err := dc.decodeUnit(u); err != nil {
		return &unitResult{err: err}
	}
	return dc.res
}

func isTombstone(lo uint64) bool {
	// 0: GNU ld resolves references to discarded (garbage-collected or COMDAT-folded) code
	// to 0; ~0 and ~1: lld's tombstones. No executable code lives at 0 in a linked ELF file.
	return lo == 0 || lo >= ^uint64(1)
}

func (dc *decoder) decodeUnit(u unitHeader) error {
	dc.r.Seek(dwarf.Offset(u.dieOff))
	cu, err := dc.r.Next()
	if err != nil {
		return fmt.Errorf("read unit entry: %w", err)
	}
	if cu == nil || (cu.Tag != dwarf.TagCompileUnit && cu.Tag != dwarf.TagPartialUnit) {
		return nil
	}
	dc.res.compile = true
	compDir, _ := cu.Val(dwarf.AttrCompDir).(string)

	var files *lineFiles
	if off, ok := cu.Val(dwarf.AttrStmtList).(int64); ok {
		us := &unitStrings{str: dc.sec["str"], lineStr: dc.sec["line_str"], strOffsets: dc.sec["str_offsets"]}
		if base, ok := cu.Val(dwarf.AttrStrOffsetsBase).(int64); ok && base >= 0 {
			us.strOffsetsBase = uint64(base)
		}
		if off < 0 {
			return fmt.Errorf("negative line table offset %d", off)
		}
		files, err = parseLineFiles(dc.sec["line"], uint64(off), dc.order, compDir, us)
		if err != nil {
			return err
		}
		if err := dc.lines(cu, files); err != nil {
			return err
		}
	}
	if cu.Children {
		return dc.walk(files, dwarf.Offset(u.end))
	}
	return nil
}

func (dc *decoder) lines(cu *dwarf.Entry, files *lineFiles) error {
	lr, err := dc.d.LineReader(cu)
	if err != nil {
		return fmt.Errorf("line table: %w", err)
	}
	if lr == nil {
		return nil
	}
	fileIdx := map[*dwarf.LineFile]uint32{}
	lookup := func(f *dwarf.LineFile) uint32 {
		if id, ok := fileIdx[f]; ok {
			return id
		}
		name := ""
		if f != nil {
			name = f.Name
			for i, g := range lr.Files() {
				if g == f {
					if s, ok := files.name(int64(i)); ok {
						name = s
					}
					break
				}
			}
		}
		id := dc.str(name)
		fileIdx[f] = id
		return id
	}
	var e dwarf.LineEntry
	seqStart := len(dc.res.lines)
	inSeq := false
	dead := false
	for {
		if err := lr.Next(&e); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("line table: %w", err)
		}
		if !inSeq {
			inSeq = true
			seqStart = len(dc.res.lines)
			dead = isTombstone(e.Address)
		}
		if e.EndSequence {
			inSeq = false
			if dead {
				dc.res.lines = dc.res.lines[:seqStart]
				continue
			}
			dc.res.lines = append(dc.res.lines, localLine{addr: e.Address, end: true})
			continue
		}
		if dead {
			continue
		}
		dc.res.lines = append(dc.res.lines, localLine{addr: e.Address, file: lookup(e.File), line: uint32(e.Line), column: uint32(e.Column)})
	}
	if inSeq && !dead {
		// A sequence without its end marker (truncated table) is dropped: its extent is unknown.
		dc.res.lines = dc.res.lines[:seqStart]
	}
	return nil
}

type frameCtx struct {
	node int32 // innermost function node enclosing the children, -1 for none
	dead bool  // inside a function whose code was discarded by the linker
}

func (dc *decoder) walk(files *lineFiles, end dwarf.Offset) error {
	stack := []frameCtx{{node: -1}}
	for len(stack) > 0 {
		e, err := dc.r.Next()
		if err != nil {
			return fmt.Errorf("read entries: %w", err)
		}
		// Producers may leave out the null entries that close the last open levels of a
		// unit; the reader then moves on into the next unit, which is not ours.
		if e == nil || e.Offset >= end {
			return nil
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		ctx := stack[len(stack)-1]
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			if ctx.dead {
				break
			}
			inl := e.Tag == dwarf.TagInlinedSubroutine
			if inl && ctx.node < 0 {
				break
			}
			rs, err := dc.d.Ranges(e)
			if err != nil {
				return fmt.Errorf("ranges of entry at %#x: %w", e.Offset, err)
			}
			live := rs[:0]
			for _, r := range rs {
				if !isTombstone(r[0]) && r[1] > r[0] {
					live = append(live, r)
				}
			}
			if len(live) == 0 {
				if len(rs) > 0 {
					ctx = frameCtx{node: -1, dead: true}
				} else if !inl {
					ctx = frameCtx{node: -1}
				}
				break
			}
			n, err := dc.names(e)
			if err != nil {
				return err
			}
			ln := localNode{
				name:      dc.str(dc.displayName(n)),
				linkage:   dc.str(n.linkage),
				startLine: n.declLine,
				parent:    -1,
			}
			if inl {
				ln.parent = ctx.node
				if f, ok := e.Val(dwarf.AttrCallFile).(int64); ok {
					if s, ok := files.name(f); ok {
						ln.callFile = dc.str(s)
					}
				}
				if l, ok := e.Val(dwarf.AttrCallLine).(int64); ok && l > 0 {
					ln.callLine = uint32(l)
				}
				if c, ok := e.Val(dwarf.AttrCallColumn).(int64); ok && c > 0 {
					ln.callColumn = uint32(c)
				}
				dc.res.inlined++
			} else {
				dc.res.funcs++
			}
			id := int32(len(dc.res.nodes))
			dc.res.nodes = append(dc.res.nodes, ln)
			for _, r := range live {
				dc.res.ranges = append(dc.res.ranges, localRange{lo: r[0], hi: r[1], node: id})
			}
			ctx = frameCtx{node: id}
		}
		if e.Children {
			stack = append(stack, ctx)
		}
	}
	return nil
}

// displayName is llvm-symbolizer's choice: the demangled linkage name, else the plain name.
func (dc *decoder) displayName(n funcNames) string {
	if !n.hasLinkage {
		return n.name
	}
	if s, ok := dc.display[n.linkage]; ok {
		return s
	}
	s := demangle.Name(n.linkage)
	dc.display[n.linkage] = s
	return s
}

func attrsOf(e *dwarf.Entry) refDIE {
	var r refDIE
	for _, f := range e.Field {
		switch f.Attr {
		case dwarf.AttrName:
			if s, ok := f.Val.(string); ok {
				r.name, r.hasName = s, true
			}
		case dwarf.AttrLinkageName, attrMIPSLinkageName:
			if s, ok := f.Val.(string); ok && !r.hasLinkage {
				r.linkage, r.hasLinkage = s, true
			}
		case dwarf.AttrDeclLine:
			if v, ok := f.Val.(int64); ok {
				r.declLine, r.hasDeclLine = uint32(v), true
			}
		case dwarf.AttrAbstractOrigin:
			if o, ok := f.Val.(dwarf.Offset); ok {
				r.origin, r.hasOrigin = o, true
			}
		case dwarf.AttrSpecification:
			if o, ok := f.Val.(dwarf.Offset); ok {
				r.spec, r.hasSpec = o, true
			}
		}
	}
	return r
}

func (dc *decoder) refAt(off dwarf.Offset) (*refDIE, error) {
	if r, ok := dc.refs[off]; ok {
		return r, nil
	}
	dc.ref.Seek(off)
	e, err := dc.ref.Next()
	if err != nil {
		return nil, fmt.Errorf("referenced entry at %#x: %w", off, err)
	}
	if e == nil {
		return nil, fmt.Errorf("referenced entry at %#x: beyond the last unit", off)
	}
	r := attrsOf(e)
	dc.refs[off] = &r
	return &r, nil
}

// names resolves name, linkage name and declaration line the way llvm's findRecursively does:
// depth-first over abstract_origin and specification, specification first, each DIE once.
func (dc *decoder) names(e *dwarf.Entry) (funcNames, error) {
	self := attrsOf(e)
	out := self.funcNames
	if out.hasName && out.hasLinkage && out.hasDeclLine {
		return out, nil
	}
	var work [8]dwarf.Offset
	stack := work[:0]
	var seenBuf [8]dwarf.Offset
	seen := append(seenBuf[:0], e.Offset)
	push := func(r *refDIE) {
		for _, o := range [2]struct {
			off dwarf.Offset
			ok  bool
		}{{r.origin, r.hasOrigin}, {r.spec, r.hasSpec}} {
			if !o.ok {
				continue
			}
			dup := false
			for _, s := range seen {
				if s == o.off {
					dup = true
					break
				}
			}
			if !dup {
				seen = append(seen, o.off)
				stack = append(stack, o.off)
			}
		}
	}
	push(&self)
	for hops := 0; len(stack) > 0; hops++ {
		if hops >= maxRefChain {
			return out, fmt.Errorf("entry at %#x: abstract_origin/specification chain longer than %d", e.Offset, maxRefChain)
		}
		off := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		r, err := dc.refAt(off)
		if err != nil {
			return out, fmt.Errorf("entry at %#x: %w", e.Offset, err)
		}
		if !out.hasName && r.hasName {
			out.name, out.hasName = r.name, true
		}
		if !out.hasLinkage && r.hasLinkage {
			out.linkage, out.hasLinkage = r.linkage, true
		}
		if !out.hasDeclLine && r.hasDeclLine {
			out.declLine, out.hasDeclLine = r.declLine, true
		}
		if out.hasName && out.hasLinkage && out.hasDeclLine {
			break
		}
		push(r)
	}
	return out, nil
}

// attrMIPSLinkageName is the pre-DWARF 4 vendor attribute older compilers use for the
// linkage name.
const attrMIPSLinkageName dwarf.Attr = 0x2007
