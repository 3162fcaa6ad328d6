package gopclntab

import (
	"debug/elf"
	"fmt"
	"log/slog"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// inlineLayout says where a format keeps its inline trees and how an entry looks.
type inlineLayout struct {
	pcdata, funcdata uint32
	entrySize        uint64
	v120             bool // funcID, _, nameOff, parentPc, startLine; else parent, funcID, _, file, line, func_, parentPc
	relative         bool // funcdata values are offsets from moduledata.gofunc
	gofunc           uint64
}

// Load parses f's pclntab and adds its functions, line rows and inline tree to b. Nothing is
// added unless the whole table parses: a corrupt pclntab gives an error and leaves b as it was
// (apart from unused interned strings).
func Load(f *elf.File, b *index.Builder) (Stats, error) {
	s := pclntabSection(f)
	if s == nil {
		return Stats{}, fmt.Errorf("no .gopclntab section")
	}
	mem := newMemory(f)
	data, err := mem.section(s)
	if err != nil {
		return Stats{}, err
	}
	t, err := parseHeader(data, s.Addr)
	if err != nil {
		return Stats{}, fmt.Errorf("parse %s header: %w", s.Name, err)
	}
	inl := inlineFor(f, mem, t)

	st := newStage()
	stats := Stats{Version: t.ver.String()}
	if err := st.load(t, mem, inl, &stats); err != nil {
		return Stats{}, fmt.Errorf("parse %s: %w", s.Name, err)
	}
	st.commit(b)
	if inl != nil {
		b.RaiseFidelity(index.FidelityFullInlines)
	} else {
		b.RaiseFidelity(index.FidelityLines)
	}
	return stats, nil
}

// inlineFor decides how to read inline trees, or returns nil when this binary's cannot be read.
// Text addresses of 1.18+ tables are fixed here too, since both come from moduledata.
func inlineFor(f *elf.File, mem *memory, t *table) *inlineLayout {
	switch t.ver {
	case ver118, ver120:
		md, ok := findModuledata(f, mem, t)
		if ok {
			t.textStart = md.text
		} else if t.textStart == 0 {
			// Go 1.26 no longer stores textStart; runtime.text opens .text in the linkers' layout.
			if txt := f.Section(".text"); txt != nil {
				t.textStart = txt.Addr
			}
		}
		if !ok {
			slog.Debug("gopclntab: moduledata not found, inline frames unavailable")
			return nil
		}
		if t.ver == ver120 {
			return &inlineLayout{pcdata: 2, funcdata: 3, entrySize: 16, v120: true, relative: true, gofunc: md.gofunc}
		}
		return &inlineLayout{pcdata: 2, funcdata: 3, entrySize: 20, relative: true, gofunc: md.gofunc}
	case ver116:
		return &inlineLayout{pcdata: 2, funcdata: 3, entrySize: 20}
	default:
		// The 1.2 format does not say which release wrote it, and the table indexes moved in
		// Go 1.12 and 1.13; before Go 1.13 there is no build info to tell.
		major, minor, ok := goVersion(f, mem)
		if !ok || major != 1 || minor < 13 || minor > 15 {
			return nil
		}
		return &inlineLayout{pcdata: 2, funcdata: 4, entrySize: 20}
	}
}

type stRange struct {
	lo, hi uint64
	node   uint32
}

type stLine struct {
	addr       uint64
	file, line uint32
	end        bool
}

// stage holds everything a Load adds until the whole table has parsed.
type stage struct {
	strs   map[string]uint32
	list   []string
	nodes  []index.Node
	ranges chunks[stRange]
	lines  chunks[stLine]

	fileIDs map[uint64]uint32 // filetab string offset -> local string ID
}

func newStage() *stage {
	return &stage{strs: map[string]uint32{"": 0}, list: []string{""}, fileIDs: map[uint64]uint32{}}
}

// str interns b, copying it only the first time.
func (s *stage) str(b []byte) uint32 {
	if id, ok := s.strs[string(b)]; ok {
		return id
	}
	v := string(b)
	id := uint32(len(s.list))
	s.strs[v] = id
	s.list = append(s.list, v)
	return id
}

func (s *stage) commit(b *index.Builder) {
	ids := make([]uint32, len(s.list))
	for i, v := range s.list {
		ids[i] = b.String(v)
	}
	base := index.NodeID(b.NumNodes())
	// The counts are known: reserving once keeps the Builder from doubling slices of millions
	// of elements, which dominated peak memory on large binaries.
	b.Grow(len(s.nodes), s.ranges.len(), s.lines.len())
	for _, n := range s.nodes {
		n.Name, n.LinkageName, n.CallFile, n.DeclFile = ids[n.Name], ids[n.LinkageName], ids[n.CallFile], ids[n.DeclFile]
		if n.Parent != index.NoParent {
			n.Parent += base
		}
		b.AddNode(n)
	}
	s.ranges.each(func(r *stRange) { b.AddRange(r.lo, r.hi, base+index.NodeID(r.node)) })
	s.lines.each(func(l *stLine) {
		if l.end {
			b.EndSequence(l.addr)
		} else {
			b.AddLine(l.addr, ids[l.file], l.line, 0)
		}
	})
}

// fileName returns the local string ID of file number fileVal of function fi.
func (s *stage) fileName(t *table, fi *funcInfo, fileVal int32) (uint32, error) {
	if fileVal < 0 {
		return 0, nil
	}
	var strTab []byte
	var off uint64
	if t.ver == ver12 {
		i := uint64(fileVal) * 4
		if i+4 > uint64(len(t.filetab)) {
			return 0, fmt.Errorf("%w: file %d beyond filetab", ErrCorrupt, fileVal)
		}
		strTab, off = t.data, uint64(t.bo.Uint32(t.filetab[i:]))
	} else {
		i := (uint64(fi.cuOffset) + uint64(fileVal)) * 4
		if i+4 > uint64(len(t.cutab)) {
			return 0, fmt.Errorf("%w: file %d of CU %d beyond cutab", ErrCorrupt, fileVal, fi.cuOffset)
		}
		v := t.bo.Uint32(t.cutab[i:])
		if v == ^uint32(0) {
			return 0, nil
		}
		strTab, off = t.filetab, uint64(v)
	}
	if id, ok := s.fileIDs[off]; ok {
		return id, nil
	}
	name, err := cbytes(strTab, off, "file name")
	if err != nil {
		return 0, err
	}
	id := s.str(name)
	s.fileIDs[off] = id
	return id, nil
}

// funcState is the per-function scratch space, reused across functions.
type funcState struct {
	files, lines, inls []run
	filesEnd, inlsEnd  uint64
	linesEnd           uint64
	memo               map[int32]uint32
	visiting           map[int32]bool
}

func (s *stage) load(t *table, mem *memory, inl *inlineLayout, stats *Stats) error {
	var fs funcState
	fs.memo = map[int32]uint32{}
	fs.visiting = map[int32]bool{}
	for i := 0; i < t.nfunc; i++ {
		pcv, off := t.functabEntry(i)
		nextv, err := t.functabPC(i + 1)
		if err != nil {
			return err
		}
		entry, limit := t.entryAddr(pcv), t.entryAddr(nextv)
		if limit < entry {
			return fmt.Errorf("%w: functab entry %d at %#x after the next at %#x", ErrCorrupt, i, entry, limit)
		}
		if limit-entry > maxFuncSize {
			limit = entry + maxFuncSize
		}
		fi, err := t.readFunc(off)
		if err != nil {
			return fmt.Errorf("function %d: %w", i, err)
		}
		if fi.entry != entry {
			return fmt.Errorf("%w: function %d: _func entry %#x, functab says %#x", ErrCorrupt, i, fi.entry, entry)
		}
		if err := s.loadFunc(t, mem, inl, &fi, limit, &fs, stats); err != nil {
			return fmt.Errorf("function %d at %#x: %w", i, entry, err)
		}
	}
	return nil
}

func (s *stage) loadFunc(t *table, mem *memory, inl *inlineLayout, fi *funcInfo, limit uint64, fs *funcState, stats *Stats) error {
	name, err := cbytes(t.funcnametab, uint64(fi.nameOff), "function name")
	if err != nil {
		return err
	}
	end := limit
	if fi.pcln != 0 {
		if fs.lines, fs.linesEnd, err = t.decodePCValue(fs.lines, fi.pcln, fi.entry, limit); err != nil {
			return err
		}
		end = fs.linesEnd
	} else {
		fs.lines, fs.linesEnd = fs.lines[:0], fi.entry
	}
	if fi.pcfile != 0 {
		if fs.files, fs.filesEnd, err = t.decodePCValue(fs.files, fi.pcfile, fi.entry, limit); err != nil {
			return err
		}
	} else {
		fs.files, fs.filesEnd = fs.files[:0], fi.entry
	}
	if end <= fi.entry {
		// A function without code (a zero-size marker) has nothing to symbolize.
		return nil
	}
	outer := uint32(len(s.nodes))
	startLine := fi.startLine
	if startLine < 0 {
		startLine = 0
	}
	// A Go function lies in one file, and its entry instruction belongs to it.
	var declFile uint32
	if fv := valueAt(fs.files, fs.filesEnd, fi.entry); fv >= 0 {
		if declFile, err = s.fileName(t, fi, fv); err != nil {
			return err
		}
	}
	s.nodes = append(s.nodes, index.Node{Name: s.str(name), StartLine: uint32(startLine), DeclFile: declFile,
		StartAddress: fi.entry, Parent: index.NoParent})
	s.ranges.add(stRange{lo: fi.entry, hi: end, node: outer})
	stats.Functions++

	if err := s.addLines(t, fi, fs, end, stats); err != nil {
		return err
	}
	if inl == nil {
		return nil
	}
	return s.addInlines(t, mem, inl, fi, fs, outer, end, stats)
}

// addLines emits a row wherever the file or the line changes, and ends the sequence at end.
func (s *stage) addLines(t *table, fi *funcInfo, fs *funcState, end uint64, stats *Stats) error {
	fi1, li := 0, 0
	pc := fi.entry
	lastFile, lastLine, have := uint32(0), uint32(0), false
	for pc < end {
		for fi1+1 < len(fs.files) && fs.files[fi1+1].pc <= pc {
			fi1++
		}
		for li+1 < len(fs.lines) && fs.lines[li+1].pc <= pc {
			li++
		}
		fileVal, lineVal := int32(-1), int32(-1)
		if fi1 < len(fs.files) && fs.files[fi1].pc <= pc && pc < fs.filesEnd {
			fileVal = fs.files[fi1].val
		}
		if li < len(fs.lines) && fs.lines[li].pc <= pc && pc < fs.linesEnd {
			lineVal = fs.lines[li].val
		}
		next := end
		if fi1+1 < len(fs.files) && fs.files[fi1+1].pc < next {
			next = fs.files[fi1+1].pc
		}
		if li+1 < len(fs.lines) && fs.lines[li+1].pc < next {
			next = fs.lines[li+1].pc
		}
		if fs.filesEnd > pc && fs.filesEnd < next {
			next = fs.filesEnd
		}
		if next <= pc {
			return fmt.Errorf("%w: line tables do not advance at %#x", ErrCorrupt, pc)
		}
		if fileVal >= 0 && lineVal >= 0 {
			file, err := s.fileName(t, fi, fileVal)
			if err != nil {
				return err
			}
			if !have || file != lastFile || uint32(lineVal) != lastLine {
				s.lines.add(stLine{addr: pc, file: file, line: uint32(lineVal)})
				stats.LineRows++
				lastFile, lastLine, have = file, uint32(lineVal), true
			}
		} else if have {
			s.lines.add(stLine{addr: pc, end: true})
			have = false
		}
		pc = next
	}
	s.lines.add(stLine{addr: end, end: true})
	return nil
}

// addInlines adds a node per inline tree entry in use and a range per run of the inline index.
func (s *stage) addInlines(t *table, mem *memory, inl *inlineLayout, fi *funcInfo, fs *funcState, outer uint32, end uint64, stats *Stats) error {
	pcdata := t.pcdata(fi, inl.pcdata)
	if pcdata == 0 {
		return nil
	}
	fd, ok := t.funcdataValue(fi, inl.funcdata)
	if !ok {
		return nil
	}
	tree := fd
	if inl.relative {
		tree = inl.gofunc + fd
	}
	var err error
	if fs.inls, fs.inlsEnd, err = t.decodePCValue(fs.inls, pcdata, fi.entry, end); err != nil {
		return fmt.Errorf("inline index table: %w", err)
	}
	clear(fs.memo)
	clear(fs.visiting)
	var nodeFor func(idx int32, depth int) (uint32, error)
	nodeFor = func(idx int32, depth int) (uint32, error) {
		if idx < 0 {
			return outer, nil
		}
		if n, ok := fs.memo[idx]; ok {
			return n, nil
		}
		if idx >= maxInlineIndex {
			return 0, fmt.Errorf("%w: inline tree index %d", ErrCorrupt, idx)
		}
		e, err := mem.read(tree+uint64(idx)*inl.entrySize, inl.entrySize)
		if err != nil {
			return 0, fmt.Errorf("inline tree entry %d: %w", idx, err)
		}
		var nameOff, parentPc, startLine int32
		if inl.v120 {
			nameOff, parentPc, startLine = int32(t.bo.Uint32(e[4:])), int32(t.bo.Uint32(e[8:])), int32(t.bo.Uint32(e[12:]))
		} else {
			nameOff, parentPc = int32(t.bo.Uint32(e[12:])), int32(t.bo.Uint32(e[16:]))
		}
		if nameOff < 0 || parentPc < 0 {
			return 0, fmt.Errorf("%w: inline tree entry %d has negative offsets", ErrCorrupt, idx)
		}
		name, err := cbytes(t.funcnametab, uint64(nameOff), "inlined function name")
		if err != nil {
			return 0, err
		}
		callPC := fi.entry + uint64(parentPc)
		parentIdx := valueAt(fs.inls, fs.inlsEnd, callPC)
		if parentIdx == idx || fs.visiting[parentIdx] || depth >= maxInlineDepth {
			// The compiler leaves parentPc at 0 when optimization removed every instruction
			// of the call site (seen in large generated init functions), and the entry at
			// that PC can then be the callee itself or its own descendant. The runtime's
			// unwinder would cycle there; the function itself is the one caller we know.
			parentIdx = -1
		}
		fs.visiting[idx] = true
		parent, err := nodeFor(parentIdx, depth+1)
		delete(fs.visiting, idx)
		if err != nil {
			return 0, err
		}
		var callFile, callLine uint32
		if fv := valueAt(fs.files, fs.filesEnd, callPC); fv >= 0 {
			if callFile, err = s.fileName(t, fi, fv); err != nil {
				return 0, err
			}
		}
		if lv := valueAt(fs.lines, fs.linesEnd, callPC); lv > 0 {
			callLine = uint32(lv)
		}
		if startLine < 0 {
			startLine = 0
		}
		n := uint32(len(s.nodes))
		s.nodes = append(s.nodes, index.Node{
			Name: s.str(name), StartLine: uint32(startLine), Parent: index.NodeID(parent),
			CallFile: callFile, CallLine: callLine, StartAddress: ^uint64(0),
		})
		fs.memo[idx] = n
		stats.InlinedCalls++
		return n, nil
	}
	for k, r := range fs.inls {
		if r.val < 0 {
			continue
		}
		hi := fs.inlsEnd
		if k+1 < len(fs.inls) {
			hi = fs.inls[k+1].pc
		}
		n, err := nodeFor(r.val, 0)
		if err != nil {
			return err
		}
		s.ranges.add(stRange{lo: r.pc, hi: hi, node: n})
		// Instructions whose innermost inline index is this entry are the inlined function's
		// own code: their file is its declaration file.
		if s.nodes[n].DeclFile == 0 {
			if fv := valueAt(fs.files, fs.filesEnd, r.pc); fv >= 0 {
				if s.nodes[n].DeclFile, err = s.fileName(t, fi, fv); err != nil {
					return err
				}
			}
		}
		// An inlined instance starts at the lowest address of its own code or of what is
		// inlined into it, as DWARF's low_pc of the inlined subroutine does.
		for m := n; m != outer; m = uint32(s.nodes[m].Parent) {
			if r.pc < s.nodes[m].StartAddress {
				s.nodes[m].StartAddress = r.pc
			}
		}
	}
	return nil
}
