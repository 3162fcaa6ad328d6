package gopclntab

import (
	"debug/elf"
	"fmt"
	"sort"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// Resolver answers lookups from a pclntab without building the whole binary's index: the
// function holding an address is decoded the first time an address in it is asked about, with
// the same code Load runs, into an index of its own. For the tens of thousands of addresses a
// command-line run asks about, on a binary of a hundred thousand functions, that decodes a
// fraction of the table and keeps a fraction of the memory; a server, which answers millions
// and stores the index, builds it whole with Load.
type Resolver struct {
	t     *table
	mem   *memory
	inl   *inlineLayout
	fs    funcState
	st    *stage               // reused by decode, reset for each function
	funcs map[int]*index.Index // by functab position; nil: the function has no code or is corrupt
	errs  int
}

// NewResolver parses f's pclntab header. It reads no function yet.
func NewResolver(f *elf.File) (*Resolver, error) {
	s := pclntabSection(f)
	if s == nil {
		return nil, fmt.Errorf("no .gopclntab section")
	}
	mem := newMemory(f)
	data, err := mem.section(s)
	if err != nil {
		return nil, err
	}
	t, err := parseHeader(data, s.Addr)
	if err != nil {
		return nil, fmt.Errorf("parse %s header: %w", s.Name, err)
	}
	r := &Resolver{t: t, mem: mem, inl: inlineFor(f, mem, t), funcs: map[int]*index.Index{}, st: newStage()}
	r.fs.memo = map[int32]uint32{}
	r.fs.visiting = map[int32]bool{}
	return r, nil
}

// Errors is how many functions could not be decoded (their addresses resolve to nothing).
func (r *Resolver) Errors() int { return r.errs }

// AppendLookup appends the frames of addr, innermost first, as Index.AppendLookup does.
func (r *Resolver) AppendLookup(dst []index.Frame, addr uint64) []index.Frame {
	t := r.t
	// The last function whose entry is at or below addr.
	i := sort.Search(t.nfunc, func(i int) bool {
		pc, _ := t.functabEntry(i)
		return t.entryAddr(pc) > addr
	}) - 1
	if i < 0 {
		return dst
	}
	ix, ok := r.funcs[i]
	if !ok {
		ix = r.decode(i)
		r.funcs[i] = ix
	}
	if ix == nil {
		return dst
	}
	return ix.AppendLookup(dst, addr)
}

// decode builds the index of function i, as Load would add it; nil when it has no code or
// does not decode.
func (r *Resolver) decode(i int) *index.Index {
	t := r.t
	pcv, off := t.functabEntry(i)
	nextv, err := t.functabPC(i + 1)
	if err != nil {
		r.errs++
		return nil
	}
	entry, limit := t.entryAddr(pcv), t.entryAddr(nextv)
	if limit < entry {
		r.errs++
		return nil
	}
	limit = min(limit, entry+maxFuncSize)
	fi, err := t.readFunc(off)
	if err != nil || fi.entry != entry {
		r.errs++
		return nil
	}
	st := r.st
	st.reset()
	var stats Stats
	if err := st.loadFunc(t, r.mem, r.inl, &fi, limit, &r.fs, &stats); err != nil {
		r.errs++
		return nil
	}
	b := index.NewBuilder()
	st.commit(b)
	ix, err := b.Build()
	if err != nil {
		r.errs++
		return nil
	}
	return ix
}
