package gopclntab

import (
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sort"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// Resolver answers lookups from a pclntab without building the whole binary's index: the
// function holding an address is decoded the first time an address in it is asked about, with
// the same code Load runs, and the answer is read from what it decoded, as the index of that
// function would give it. For the tens of thousands of addresses a command-line run asks
// about, on a binary of a hundred thousand functions, that decodes a fraction of the table and
// keeps a fraction of the memory; a server, which answers millions and stores the index,
// builds it whole with Load.
type Resolver struct {
	t   *table
	mem *memory
	inl *inlineLayout
	fs  funcState
	// st holds every function decoded so far, one after another (strings interned across
	// them): each function's nodes, ranges and line rows are a contiguous run of st's.
	st *stage
	// fns maps a functab position to 1 + its entry in decoded; 0: not decoded yet, -1: no
	// code or corrupt (its addresses resolve to nothing).
	fns          []int32
	decoded      []decodedFunc
	errs         int
	buckets      buckets // see find
	bucketsTried bool
	// fault is set when reading the mapped file faulted (see NewMappedResolver): the
	// Resolver answers nothing more.
	fault error
}

// decodedFunc is where one function's rows lie in the stage. Its ranges start with the
// function's own, [entry, end); the ones after it are its inline runs, disjoint and in address
// order. Its line rows are in address order and end with the end of a sequence.
type decodedFunc struct {
	ranges, rangesEnd uint32
	lines, linesEnd   uint32
}

// NewResolver parses f's pclntab header. It reads no function yet.
func NewResolver(f *elf.File) (*Resolver, error) { return newResolver(f, nil) }

// NewMappedResolver is NewResolver on the file f was parsed from, mapped read-only: the
// sections it reads (the pclntab, and .rodata where inline trees are) are not copied into
// memory whole, and only the pages it touches are read. Close unmaps it. Where the file
// cannot be mapped, the sections are read as NewResolver reads them.
//
// A file that shrinks while mapped faults where it is read: the lookup that met the fault,
// and every later one, answers nothing, and Err says what happened.
func NewMappedResolver(f *elf.File, file *os.File) (*Resolver, error) {
	fi, err := file.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", file.Name(), err)
	}
	image, err := mapFile(file, fi.Size())
	if err != nil {
		slog.Debug("gopclntab: reading sections instead of mapping the file", "err", err)
		image = nil
	}
	r, err := newMappedResolver(f, image)
	if err != nil && image != nil {
		err = errors.Join(err, unmapFile(image))
	}
	return r, err
}

// newMappedResolver is newResolver, recovering a fault as appendLookupMapped does.
func newMappedResolver(f *elf.File, image []byte) (r *Resolver, err error) {
	if image == nil {
		return newResolver(f, nil)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if ferr := faulted(recover()); ferr != nil {
			r, err = nil, ferr
		}
	}()
	return newResolver(f, image)
}

// Close releases the file's mapping, if any. The Resolver answers nothing after it.
func (r *Resolver) Close() error {
	image := r.mem.image
	if image == nil {
		return nil
	}
	*r = Resolver{mem: &memory{}, fault: errors.New("resolver closed")}
	return unmapFile(image)
}

// Err returns why the Resolver stopped answering, or nil.
func (r *Resolver) Err() error { return r.fault }

func newResolver(f *elf.File, image []byte) (*Resolver, error) {
	s := pclntabSection(f)
	if s == nil {
		return nil, fmt.Errorf("no .gopclntab section")
	}
	mem := newMemory(f)
	mem.image = image
	data, err := mem.section(s)
	if err != nil {
		return nil, err
	}
	t, err := parseHeader(data, s.Addr)
	if err != nil {
		return nil, fmt.Errorf("parse %s header: %w", s.Name, err)
	}
	st := newStage()
	st.validUTF8 = true
	r := &Resolver{t: t, mem: mem, inl: inlineFor(f, mem, t), st: st, fns: make([]int32, t.nfunc)}
	return r, nil
}

// Errors is how many functions could not be decoded (their addresses resolve to nothing).
func (r *Resolver) Errors() int { return r.errs }

// AppendLookup appends the frames of addr, innermost first, as Index.AppendLookup does on the
// index Load builds.
func (r *Resolver) AppendLookup(dst []index.Frame, addr uint64) []index.Frame {
	switch {
	case r.fault != nil:
		return dst
	case r.mem.image != nil:
		return r.appendLookupMapped(dst, addr)
	}
	return r.appendLookup(dst, addr)
}

// appendLookupMapped is appendLookup on a mapped file, with a fault (the file truncated since
// it was mapped) recovered as an error rather than crashing the process.
func (r *Resolver) appendLookupMapped(dst []index.Frame, addr uint64) (out []index.Frame) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	n := len(dst)
	defer func() {
		if err := faulted(recover()); err != nil {
			r.fault, out = err, dst[:n]
		}
	}()
	return r.appendLookup(dst, addr)
}

// faulted turns what recover returned after a memory fault into an error, and re-panics
// anything else.
func faulted(p any) error {
	if p == nil {
		return nil
	}
	fe, ok := p.(interface{ Addr() uintptr })
	if !ok {
		panic(p)
	}
	return fmt.Errorf("reading the mapped file faulted at %#x: was it truncated while it was read?", fe.Addr())
}

func (r *Resolver) appendLookup(dst []index.Frame, addr uint64) []index.Frame {
	i := r.find(addr)
	if i < 0 {
		return dst
	}
	k := r.fns[i]
	if k == 0 {
		k = r.decode(i)
		r.fns[i] = k
	}
	if k < 0 {
		return dst
	}
	d := &r.decoded[k-1]
	st := r.st
	own := st.ranges.at(int(d.ranges))
	if addr < own.lo || addr >= own.hi {
		return dst
	}
	// The innermost node: the inline run holding addr, else the function itself (a run is
	// deeper in the inline tree than the function, which is what the index's flattening of
	// overlapping ranges decides by).
	node := own.node
	lo, hi := int(d.ranges)+1, int(d.rangesEnd)
	j := lo + sort.Search(hi-lo, func(j int) bool { return st.ranges.at(lo+j).lo > addr }) - 1
	if j >= lo {
		if rn := st.ranges.at(j); addr < rn.hi {
			node = rn.node
		}
	}
	// The line: the last row at or below addr, unless it ends a sequence.
	var file, line uint32
	hasLine := false
	lo, hi = int(d.lines), int(d.linesEnd)
	if j := lo + sort.Search(hi-lo, func(j int) bool { return st.lines.at(lo+j).addr > addr }) - 1; j >= lo {
		if l := st.lines.at(j); !l.end {
			file, line, hasLine = l.file, l.line, true
		}
	}
	list := st.list
	for {
		n := &st.nodes[node]
		f := index.Frame{
			Function: list[n.Name], LinkageName: list[n.LinkageName], StartLine: n.StartLine,
			StartFile: list[n.DeclFile], StartAddress: n.StartAddress,
		}
		if hasLine {
			f.File, f.Line = list[file], line
		}
		if n.Parent == index.NoParent {
			if !hasLine {
				f.File = list[n.SymbolFile()]
			}
			return append(dst, f)
		}
		dst = append(dst, f)
		file, line, hasLine = n.CallFile, n.CallLine, n.CallFile != 0 || n.CallLine != 0
		node = uint32(n.Parent)
	}
}

// find returns the functab position of the last function whose entry is at or below addr, or
// -1. A binary search over the whole functab takes a cache miss at each of its last dozen
// probes; the buckets narrow it to the few functions that start near addr first.
func (r *Resolver) find(addr uint64) int {
	t := r.t
	lo, hi := 0, t.nfunc
	if !r.bucketsTried {
		r.buckets, r.bucketsTried = functabBuckets(t), true
	}
	if b := &r.buckets; b.first != nil {
		if addr < b.start {
			return -1
		}
		k := min((addr-b.start)>>b.shift, uint64(len(b.first)-1))
		lo = int(b.first[k])
		if k+1 < uint64(len(b.first)) {
			hi = int(b.first[k+1])
		}
	}
	return lo + sort.Search(hi-lo, func(i int) bool {
		pc, _ := t.functabEntry(lo + i)
		return t.entryAddr(pc) > addr
	}) - 1
}

// buckets cut the address range of a functab into buckets of 1<<shift bytes: first[k] is the
// position of the first function whose entry is at or above start + k<<shift. The first
// function greater than an address of bucket k is then at a position in [first[k],
// first[k+1]] (the last bucket: up to nfunc).
type buckets struct {
	start uint64
	shift uint
	first []uint32
}

// functabBuckets makes about one bucket per function; none (first nil) for a table of few
// functions, or one whose entries are not in order (the search over the whole table decides
// there, as it always did).
func functabBuckets(t *table) buckets {
	if t.nfunc < 64 {
		return buckets{}
	}
	entry := func(i int) uint64 {
		pc, _ := t.functabEntry(i)
		return t.entryAddr(pc)
	}
	start, last := entry(0), entry(t.nfunc-1)
	if last < start {
		return buckets{}
	}
	var shift uint
	for (last-start)>>shift >= uint64(t.nfunc) {
		shift++
	}
	b := buckets{start: start, shift: shift, first: make([]uint32, (last-start)>>shift+1)}
	k, prev := 0, start
	for i := 0; i < t.nfunc; i++ {
		e := entry(i)
		if e < prev {
			return buckets{}
		}
		prev = e
		for k < len(b.first) && start+uint64(k)<<shift <= e {
			b.first[k] = uint32(i)
			k++
		}
	}
	for ; k < len(b.first); k++ {
		b.first[k] = uint32(t.nfunc)
	}
	return b
}

// decode adds function i to the stage, as Load would add it, and returns 1 + its entry in
// r.decoded; -1 when it has no code or does not decode (what it added is taken back).
func (r *Resolver) decode(i int) int32 {
	t := r.t
	pcv, off := t.functabEntry(i)
	nextv, err := t.functabPC(i + 1)
	if err != nil {
		r.errs++
		return -1
	}
	entry, limit := t.entryAddr(pcv), t.entryAddr(nextv)
	if limit < entry {
		r.errs++
		return -1
	}
	limit = min(limit, entry+maxFuncSize)
	fi, err := t.readFunc(off)
	if err != nil || fi.entry != entry {
		r.errs++
		return -1
	}
	st := r.st
	nodes, ranges, lines := len(st.nodes), st.ranges.len(), st.lines.len()
	var stats Stats
	if err := st.loadFunc(t, r.mem, r.inl, &fi, limit, &r.fs, &stats); err != nil {
		st.nodes = st.nodes[:nodes]
		st.ranges.truncate(ranges)
		st.lines.truncate(lines)
		r.errs++
		return -1
	}
	if st.ranges.len() == ranges {
		// No code: loadFunc added nothing.
		return -1
	}
	r.decoded = append(r.decoded, decodedFunc{
		ranges: uint32(ranges), rangesEnd: uint32(st.ranges.len()),
		lines: uint32(lines), linesEnd: uint32(st.lines.len()),
	})
	return int32(len(r.decoded))
}
