// Package dwarfsym feeds DWARF 4 and 5 debug information (functions, inlined instances and line
// tables) into the symbolization index, with the semantics of llvm-symbolizer: the frames a
// lookup returns are the ones llvm-symbolizer prints for the same address.
//
// It reads DWARF with its own decoder rather than debug/dwarf: profiling Load on libstdc++'s
// 7.4 MiB of DWARF showed debug/dwarf's entry decoding at 36% of CPU time and 46% of allocated
// bytes (it materializes every attribute of every entry, most of them types this package
// skips), and its line tables join paths with path.Join, which cleans ".." and so cannot
// print the paths llvm-symbolizer prints.
package dwarfsym

import (
	"encoding/binary"
	"errors"
	"fmt"
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
// added in a fixed order, so the same input always gives the same index. An error names the
// unit it comes from; b then holds part of the binary and should be discarded.
func Load(sections map[string][]byte, order binary.ByteOrder, b *index.Builder, opts Options) (st Stats, err error) {
	info := sections["info"]
	if len(info) == 0 {
		return st, errors.New("dwarfsym: no .debug_info section")
	}
	units, err := scanUnits(info, order)
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
	demangled := &sync.Map{}
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
			dec := newDecoder(sections, order, units, demangled)
			for j := range jobs {
				results[j] <- dec.unit(len(units) - 1 - j)
			}
		}()
	}
	// On an early return the feeder sees stop and the workers finish the jobs already
	// handed out (their result channels are buffered), so nothing outlives Load.
	defer func() {
		close(stop)
		wg.Wait()
	}()

	// Units are added last to first. Where units describe the same addresses (the DWARF of a
	// discarded COMDAT copy, which GNU ld points at the kept copy), llvm-symbolizer answers from
	// the unit with the lowest offset, and the index lets the range and line row added last win.
	add := newAdder(b)
	for j := range units {
		i := len(units) - 1 - j
		r := <-results[j]
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

type unitHeader struct {
	off     uint64 // offset of the unit header in .debug_info
	dieOff  uint64 // offset of its first DIE
	end     uint64 // offset just past the unit
	version int
	dwarf64 bool
}

// scanUnits walks the unit headers of .debug_info, so that units can be handed to workers.
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
	declFile                uint32 // index into unitResult.strs
	startAddr               uint64 // DW_AT_low_pc, 0 when the entry has only ranges
	parent                  int32  // index into unitResult.nodes, -1 for outermost
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
			Name:         a.ids[n.name],
			LinkageName:  a.ids[n.linkage],
			StartLine:    n.startLine,
			DeclFile:     a.ids[n.declFile],
			StartAddress: n.startAddr,
			Parent:       parent,
			CallFile:     a.ids[n.callFile],
			CallLine:     n.callLine,
			CallColumn:   n.callColumn,
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
	declFile      int64
	declAt        uint64 // offset of the entry that carried declFile: its unit's files name it
	hasName       bool
	hasDeclFile   bool
	hasLinkage    bool
	hasDeclLine   bool
}

// refDIE is the part of an entry that name resolution reads.
type refDIE struct {
	funcNames
	origin, spec       uint64
	hasOrigin, hasSpec bool
}

// funcDIE is a subprogram or inlined subroutine as the walk reads it.
type funcDIE struct {
	refDIE
	off                  uint64
	lowPC, highPC        attrVal
	rangesAttr           attrVal
	hasLow, hasHigh      bool
	hasRanges            bool
	callFile             int64
	hasCallFile          bool
	callLine, callColumn uint32
}

type decoder struct {
	s     *dieSecs
	sec   map[string][]byte
	units []unitHeader
	// refs caches the attributes of referenced DIEs across the units this worker decodes;
	// -flto and C++ specifications point many DIEs at the same few.
	refs     map[uint64]*refDIE
	abbrevs  map[uint64]*abbrevTable
	unitCtxs map[int]*unitCtx

	shared   *sync.Map // linkage name -> display name, shared by all workers of one Load
	res      *unitResult
	curStmt  uint64
	strIdx   map[string]uint32
	display  map[string]string
	rangeBuf [][2]uint64
}

func newDecoder(sec map[string][]byte, order binary.ByteOrder, units []unitHeader, shared *sync.Map) *decoder {
	return &decoder{
		sec: sec, units: units, shared: shared,
		s: &dieSecs{
			info: sec["info"], abbrev: sec["abbrev"], str: sec["str"], lineStr: sec["line_str"],
			strOffsets: sec["str_offsets"], addr: sec["addr"], ranges: sec["ranges"], rnglists: sec["rnglists"],
			order: order,
		},
		refs:     make(map[uint64]*refDIE),
		abbrevs:  make(map[uint64]*abbrevTable),
		unitCtxs: make(map[int]*unitCtx),
		display:  make(map[string]string),
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

// unit decodes one unit. Every read is bounds-checked; the recover is a last line of defence
// that turns a decoding bug into the unit's error instead of a crash of the service.
func (dc *decoder) unit(i int) (res *unitResult) {
	dc.res = &unitResult{strs: []string{""}}
	dc.strIdx = map[string]uint32{"": 0}
	defer func() {
		if r := recover(); r != nil {
			res = &unitResult{err: fmt.Errorf("malformed DWARF: %v", r)}
		}
	}()
	if err := dc.decodeUnit(i); err != nil {
		return &unitResult{err: err}
	}
	return dc.res
}

func isTombstone(lo uint64) bool {
	// 0: GNU ld resolves references to discarded (garbage-collected or COMDAT-folded) code
	// to 0; ~0 and ~1: lld's tombstones. No executable code lives at 0 in a linked ELF file.
	return lo == 0 || lo >= ^uint64(1)
}

func (dc *decoder) unitCtx(i int) (*unitCtx, error) {
	if u, ok := dc.unitCtxs[i]; ok {
		return u, nil
	}
	u, err := dc.s.openUnit(dc.units[i], dc.abbrevs)
	if err != nil {
		return nil, err
	}
	dc.unitCtxs[i] = u
	return u, nil
}

func (dc *decoder) decodeUnit(i int) error {
	u, err := dc.unitCtx(i)
	if err != nil {
		return err
	}
	// Units are visited once each; only references need a unit's context again.
	delete(dc.unitCtxs, i)
	if u.tag != tagCompileUnit && u.tag != tagPartialUnit {
		return nil
	}
	dc.res.compile = true

	var files *lineFiles
	if u.stmtList >= 0 {
		us := &unitStrings{str: dc.sec["str"], lineStr: dc.sec["line_str"], strOffsets: dc.sec["str_offsets"], strOffsetsBase: u.strOffsetsBase}
		files, err = parseLineFiles(dc.sec["line"], uint64(u.stmtList), dc.s.order, u.compDir, us)
		if err != nil {
			return err
		}
		dc.curStmt = uint64(u.stmtList)
		if err := dc.lines(files); err != nil {
			return err
		}
	}
	if u.rootChildren {
		return dc.walk(u, files)
	}
	return nil
}

func (dc *decoder) lines(files *lineFiles) error {
	// Row file numbers map to unit-local string IDs through a small cache; define_file can
	// extend the table while the program runs, so misses look the table up again.
	var fileIDs []uint32
	fileID := func(f uint64) uint32 {
		if f < uint64(len(fileIDs)) && fileIDs[f] != ^uint32(0) {
			return fileIDs[f]
		}
		name, _ := files.name(int64(min(f, 1<<62)))
		id := dc.str(name)
		if f < 1<<16 {
			for uint64(len(fileIDs)) <= f {
				fileIDs = append(fileIDs, ^uint32(0))
			}
			fileIDs[f] = id
		}
		return id
	}
	seqStart := len(dc.res.lines)
	inSeq, dead := false, false
	err := files.run(func(e lineRow) {
		if !inSeq {
			inSeq = true
			seqStart = len(dc.res.lines)
			dead = isTombstone(e.addr)
		}
		if e.endSequence {
			inSeq = false
			if dead {
				dc.res.lines = dc.res.lines[:seqStart]
				return
			}
			// Rows at the end address cover nothing; left in, they would outlast the end
			// marker and give the following code this sequence's last line.
			k := len(dc.res.lines)
			for k > seqStart && dc.res.lines[k-1].addr >= e.addr {
				k--
			}
			dc.res.lines = append(dc.res.lines[:k], localLine{addr: e.addr, end: true})
			return
		}
		if dead {
			return
		}
		line := uint32(0)
		if e.line > 0 && e.line <= 1<<32-1 {
			line = uint32(e.line)
		}
		dc.res.lines = append(dc.res.lines, localLine{addr: e.addr, file: fileID(e.file), line: line, column: uint32(min(e.column, 1<<32-1))})
	})
	if err != nil {
		return fmt.Errorf("line table at %#x: %w", dc.curStmt, err)
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

// readFunc decodes the attributes of a subprogram or inlined subroutine.
// With names false only the code ranges are decoded: most subprogram entries of C++ are
// declarations without code, and their strings need not be built.
func (dc *decoder) readFunc(r *secReader, u *unitCtx, a *abbrev, fd *funcDIE, names bool) error {
	for _, sp := range a.attrs {
		want := false
		switch sp.attr {
		case atLowPC, atHighPC, atRanges:
			want = true
		case atName, atLinkageName, atMIPSLinkage, atDeclLine, atDeclFile, atAbstractOrigin, atSpecification,
			atCallFile, atCallLine, atCallColumn:
			want = names
		}
		v, err := dc.s.readAttr(r, u, sp.form, sp.implicit, want)
		if err != nil {
			return fmt.Errorf("entry at %#x: %w", fd.off, err)
		}
		if !want {
			continue
		}
		applyRef(&fd.refDIE, sp.attr, v)
		switch sp.attr {
		case atLowPC:
			fd.lowPC, fd.hasLow = v, v.class == clsAddr
		case atHighPC:
			fd.highPC, fd.hasHigh = v, v.class == clsAddr || v.class == clsConst
		case atRanges:
			fd.rangesAttr, fd.hasRanges = v, true
		case atCallFile:
			if v.class == clsConst {
				fd.callFile, fd.hasCallFile = int64(v.u), true
			}
		case atCallLine:
			if v.class == clsConst {
				fd.callLine = uint32(v.u)
			}
		case atCallColumn:
			if v.class == clsConst {
				fd.callColumn = uint32(v.u)
			}
		}
	}
	return nil
}

func applyRef(rd *refDIE, attr uint64, v attrVal) {
	switch attr {
	case atName:
		if v.isStr {
			rd.name, rd.hasName = v.s, true
		}
	case atLinkageName, atMIPSLinkage:
		if v.isStr && !rd.hasLinkage {
			rd.linkage, rd.hasLinkage = v.s, true
		}
	case atDeclLine:
		if v.class == clsConst {
			rd.declLine, rd.hasDeclLine = uint32(v.u), true
		}
	case atDeclFile:
		if v.class == clsConst {
			rd.declFile, rd.hasDeclFile = int64(min(v.u, 1<<62)), true
		}
	case atAbstractOrigin:
		if v.class == clsRef {
			rd.origin, rd.hasOrigin = v.u, true
		}
	case atSpecification:
		if v.class == clsRef {
			rd.spec, rd.hasSpec = v.u, true
		}
	}
}

func (dc *decoder) funcRanges(u *unitCtx, fd *funcDIE) ([][2]uint64, error) {
	out := dc.rangeBuf[:0]
	if fd.hasLow && fd.hasHigh {
		hi := fd.highPC.u
		if fd.highPC.class == clsConst {
			hi += fd.lowPC.u
		}
		out = append(out, [2]uint64{fd.lowPC.u, hi})
	}
	if fd.hasRanges {
		var err error
		if out, err = dc.s.rangeList(u, fd.rangesAttr, out); err != nil {
			return nil, fmt.Errorf("entry at %#x: %w", fd.off, err)
		}
	}
	dc.rangeBuf = out
	return out, nil
}

func (dc *decoder) walk(u *unitCtx, files *lineFiles) error {
	r := &secReader{data: dc.s.info[:u.hdr.end], off: int(u.rootOff), order: dc.s.order}
	stack := []frameCtx{{node: -1}}
	var fd funcDIE
	// Producers may leave out the null entries that close the last open levels of a unit.
	for len(stack) > 0 && r.off < len(r.data) {
		off := uint64(r.off)
		code := r.uleb()
		if r.err != nil {
			return fmt.Errorf("entry at %#x: %w", off, r.err)
		}
		if code == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		a := u.abbrevs.get(code)
		if a == nil {
			return fmt.Errorf("entry at %#x: unknown abbreviation %d", off, code)
		}
		ctx := stack[len(stack)-1]
		isFunc := a.tag == tagSubprogram || a.tag == tagInlinedSubroutine
		inl := a.tag == tagInlinedSubroutine
		if !isFunc || ctx.dead || (inl && ctx.node < 0) {
			for _, sp := range a.attrs {
				if _, err := dc.s.readAttr(r, u, sp.form, sp.implicit, false); err != nil {
					return fmt.Errorf("entry at %#x: %w", off, err)
				}
			}
			if a.children {
				stack = append(stack, ctx)
			}
			continue
		}
		fd = funcDIE{off: off}
		attrStart := r.off
		if err := dc.readFunc(r, u, a, &fd, false); err != nil {
			return err
		}
		rs, err := dc.funcRanges(u, &fd)
		if err != nil {
			return err
		}
		live := rs[:0]
		for _, rg := range rs {
			if !isTombstone(rg[0]) && rg[1] > rg[0] {
				live = append(live, rg)
			}
		}
		if len(live) == 0 {
			if len(rs) > 0 {
				ctx = frameCtx{node: -1, dead: true}
			} else if !inl {
				ctx = frameCtx{node: -1}
			}
			if a.children {
				stack = append(stack, ctx)
			}
			continue
		}
		attrEnd := r.off
		r.off = attrStart
		if err := dc.readFunc(r, u, a, &fd, true); err != nil {
			return err
		}
		r.off = attrEnd
		n, err := dc.names(&fd)
		if err != nil {
			return err
		}
		ln := localNode{
			name:      dc.str(dc.displayName(n)),
			linkage:   dc.str(n.linkage),
			startLine: n.declLine,
			parent:    -1,
		}
		if fd.hasLow {
			ln.startAddr = fd.lowPC.u
		}
		// A declaration in another unit (cross-unit origins under -flto) is named by that
		// unit's file table, which this worker does not hold: leave the file unknown rather
		// than guess.
		if n.hasDeclFile && n.declAt >= u.hdr.off && n.declAt < u.hdr.end {
			if s, ok := files.name(n.declFile); ok {
				ln.declFile = dc.str(s)
			}
		}
		if inl {
			ln.parent = ctx.node
			if fd.hasCallFile {
				if s, ok := files.name(fd.callFile); ok {
					ln.callFile = dc.str(s)
				}
			}
			ln.callLine, ln.callColumn = fd.callLine, fd.callColumn
			dc.res.inlined++
		} else {
			dc.res.funcs++
		}
		id := int32(len(dc.res.nodes))
		dc.res.nodes = append(dc.res.nodes, ln)
		for _, rg := range live {
			dc.res.ranges = append(dc.res.ranges, localRange{lo: rg[0], hi: rg[1], node: id})
		}
		if a.children {
			stack = append(stack, frameCtx{node: id})
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
	// Demangling is the most expensive step of Load; the same template instances recur in
	// many units, and the cache shared by the workers demangles each linkage name once.
	var s string
	if v, ok := dc.shared.Load(n.linkage); ok {
		s = v.(string)
	} else {
		s = demangle.Name(n.linkage)
		dc.shared.Store(n.linkage, s)
	}
	dc.display[n.linkage] = s
	return s
}

// refAt reads the entry at an absolute .debug_info offset, in whichever unit holds it.
func (dc *decoder) refAt(off uint64) (*refDIE, error) {
	if r, ok := dc.refs[off]; ok {
		return r, nil
	}
	ui := unitIndexOf(dc.units, off)
	if ui < 0 {
		return nil, fmt.Errorf("reference %#x is outside every unit", off)
	}
	u, err := dc.unitCtx(ui)
	if err != nil {
		return nil, fmt.Errorf("reference %#x: %w", off, err)
	}
	r := &secReader{data: dc.s.info[:u.hdr.end], off: int(off), order: dc.s.order}
	code := r.uleb()
	if r.err != nil || code == 0 {
		return nil, fmt.Errorf("reference %#x: no entry there", off)
	}
	a := u.abbrevs.get(code)
	if a == nil {
		return nil, fmt.Errorf("reference %#x: unknown abbreviation %d", off, code)
	}
	rd := &refDIE{}
	for _, sp := range a.attrs {
		want := false
		switch sp.attr {
		case atName, atLinkageName, atMIPSLinkage, atDeclLine, atDeclFile, atAbstractOrigin, atSpecification:
			want = true
		}
		v, err := dc.s.readAttr(r, u, sp.form, sp.implicit, want)
		if err != nil {
			return nil, fmt.Errorf("reference %#x: %w", off, err)
		}
		if want {
			applyRef(rd, sp.attr, v)
		}
	}
	dc.refs[off] = rd
	return rd, nil
}

// names resolves name, linkage name and declaration line the way llvm's findRecursively does:
// depth-first over abstract_origin and specification, specification first, each DIE once.
func (dc *decoder) names(fd *funcDIE) (funcNames, error) {
	out := fd.funcNames
	out.declAt = fd.off
	if out.hasName && out.hasLinkage && out.hasDeclLine {
		return out, nil
	}
	var work [8]uint64
	stack := work[:0]
	var seenBuf [8]uint64
	seen := append(seenBuf[:0], fd.off)
	push := func(r *refDIE) {
		for _, o := range [2]struct {
			off uint64
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
	push(&fd.refDIE)
	for hops := 0; len(stack) > 0; hops++ {
		if hops >= maxRefChain {
			return out, fmt.Errorf("entry at %#x: abstract_origin/specification chain longer than %d", fd.off, maxRefChain)
		}
		off := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		r, err := dc.refAt(off)
		if err != nil {
			return out, fmt.Errorf("entry at %#x: %w", fd.off, err)
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
		if !out.hasDeclFile && r.hasDeclFile {
			out.declFile, out.hasDeclFile, out.declAt = r.declFile, true, off
		}
		if out.hasName && out.hasLinkage && out.hasDeclLine {
			break
		}
		push(r)
	}
	return out, nil
}
