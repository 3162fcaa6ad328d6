// Package symtab adds the functions of an ELF file's symbol table to a symbolization index,
// choosing for every code address the symbol llvm-symbolizer 14 would name.
//
// What llvm-symbolizer 14 does, and so what Load does (each checked by experiment on
// binaries gcc builds; see symtab_test.go):
//   - It reads .symtab, and .dynsym only when .symtab is absent or empty: never both.
//   - It keeps defined symbols of type FUNC, GNU_IFUNC, OBJECT and NOTYPE; undefined,
//     absolute and common symbols (no real section) are dropped.
//   - Among symbols at one address the largest size wins, and among equal sizes the one
//     last in symbol-table order: so a global beats a local alias (locals come first in
//     .symtab), and among globals and weak aliases the order of the table decides.
//   - An address belongs to the nearest symbol at or below it, and to nothing when that
//     symbol has a size and the address lies past its end, even where an earlier, larger
//     symbol would cover it. A symbol of size 0 reaches up to the next symbol: the PLT after
//     a size-0 _init is named "_init", as llvm-symbolizer names it.
//   - Where no line-table row covers an address, the file of a local (STB_LOCAL) symbol is
//     the name of the nearest STT_FILE symbol before it in table order, with line 0; a global
//     symbol has none ("??"). Code built without -g, such as the crates Rust's std links in
//     or a C file compiled without it, is named this way.
//
// Only the parts of those ranges that lie in executable segments are added: profiles hold
// code addresses, and data symbols matter only where they end or start code ranges.
package symtab

import (
	"debug/elf"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"

	"github.com/profsym/profsym/pkg/debuginfo/demangle"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// Stats says what Load found.
type Stats struct {
	// Symbols counts the symbols that name at least one code address.
	Symbols int
	// Source is the table they came from: ".symtab" or ".dynsym" ("" when neither had any).
	// llvm-symbolizer reads .dynsym only when .symtab is missing or empty, and so does Load.
	Source string
}

// maxSymbols bounds the symbols read from one table. The largest real binaries have a few
// million; the table's size is already bounded by the file, this bounds the work per file.
const maxSymbols = 1 << 24

// candidate is a symbol llvm-symbolizer 14 would consider.
type candidate struct {
	addr, size uint64
	name       string
	file       string // the STT_FILE name a local symbol belongs to
	order      int    // position in the symbol table: the last of equals wins
}

// Function is one symbol-table function as llvm-symbolizer 14 sees it, with the code it
// names. A symbol whose range spans several executable segments comes as one Function per
// segment, in address order.
type Function struct {
	Lo, Hi uint64 // [Lo, Hi)
	// Name is the demangled name; LinkageName the symbol when it was mangled, else "".
	Name, LinkageName string
	// File is the source file a local symbol belongs to (its STT_FILE), else "".
	File string
}

// Functions returns the functions of f's symbol table in address order, disjoint, with the
// ranges llvm-symbolizer 14 gives them in code. It is for callers that need the symbol
// table's answer beside debug information: llvm-symbolizer names the outermost frame of
// every address from the symbol table when it has a symbol there, even where DWARF names
// the function (a GCC ".cold" part prints as "f() (.cold)", not as DWARF's "f").
func Functions(f *elf.File) (fns []Function, st Stats, err error) {
	if f == nil {
		return nil, Stats{}, errors.New("symtab: nil file")
	}
	// debug/elf parses attacker-controlled bytes; a panic inside it must not take the
	// symbolizer down with it.
	defer func() {
		if r := recover(); r != nil {
			fns, st, err = nil, Stats{}, fmt.Errorf("symtab: malformed ELF file: %v", r)
		}
	}()

	syms, source, err := readSymbols(f)
	if err != nil {
		return nil, Stats{}, err
	}
	cands := candidates(f, syms)
	if len(cands) == 0 {
		return nil, Stats{Source: source}, nil
	}
	cands = dedupe(cands)
	code := codeRanges(f)
	if len(code) == 0 {
		return nil, Stats{Source: source}, nil
	}

	// First the ranges each symbol owns in code, then the names of the symbols that own any,
	// demangled in parallel (the dominant cost on C++ binaries).
	type owned struct {
		cand   int
		ranges []span
	}
	var keep []owned
	for i, c := range cands {
		var hi uint64
		if i+1 < len(cands) {
			hi = cands[i+1].addr
		} else {
			// The last symbol reaches to the end of the address space; clipping to code
			// makes that the end of the last executable segment.
			hi = code[len(code)-1].hi
		}
		if c.size != 0 {
			end := c.addr + c.size
			if end < c.addr {
				end = math.MaxUint64
			}
			hi = min(hi, end)
		}
		if c.name == "" || hi <= c.addr {
			// An empty name still claims its range, as it does in llvm-symbolizer, where
			// it resolves to no function.
			continue
		}
		if rs := clip(code, c.addr, hi); len(rs) > 0 {
			keep = append(keep, owned{i, rs})
		}
	}
	names := make([]string, len(keep))
	parallel(len(keep), func(k int) { names[k] = demangle.Name(cands[keep[k].cand].name) })
	for k, o := range keep {
		sym := cands[o.cand].name
		linkage := ""
		if names[k] != sym {
			linkage = sym
		}
		for _, r := range o.ranges {
			fns = append(fns, Function{Lo: r.lo, Hi: r.hi, Name: names[k], LinkageName: linkage, File: cands[o.cand].file})
		}
	}
	return fns, Stats{Symbols: len(keep), Source: source}, nil
}

// Load adds the function symbols of f to b as outermost nodes whose ranges only fill the
// addresses no debug information covers (Builder.AddSymbolRange).
func Load(f *elf.File, b *index.Builder) (Stats, error) {
	if f == nil || b == nil {
		return Stats{}, errors.New("symtab: nil file or builder")
	}
	fns, st, err := Functions(f)
	if err != nil {
		return Stats{}, err
	}
	Add(b, fns)
	return st, nil
}

// Add adds fns, from Functions, to b as Load does.
func Add(b *index.Builder, fns []Function) {
	// At most one node and one range per symbol, reserved at once (see Builder.Grow).
	b.Grow(len(fns), len(fns), 0)
	node := index.NoParent
	for i, fn := range fns {
		// The pieces of one symbol are adjacent and share their names: one node for all.
		if i == 0 || fn.Name != fns[i-1].Name || fn.LinkageName != fns[i-1].LinkageName || fn.File != fns[i-1].File {
			node = b.AddNode(index.Node{Name: b.String(fn.Name), LinkageName: b.String(fn.LinkageName),
				CallFile: b.String(fn.File), Parent: index.NoParent}) // its SymbolFile
		}
		b.AddSymbolRange(fn.Lo, fn.Hi, node)
	}
	if len(fns) > 0 {
		b.RaiseFidelity(index.FidelitySymbols)
	}
}

// FileAt returns the file llvm-symbolizer 14 gives addr where no line row covers it: the
// STT_FILE name of the local symbol of fns (from Functions) covering addr, else "".
func FileAt(fns []Function, addr uint64) string {
	i := sort.Search(len(fns), func(i int) bool { return fns[i].Hi > addr })
	if i < len(fns) && fns[i].Lo <= addr {
		return fns[i].File
	}
	return ""
}

func readSymbols(f *elf.File) ([]elf.Symbol, string, error) {
	for _, t := range []struct {
		name string
		typ  elf.SectionType
		read func() ([]elf.Symbol, error)
	}{
		{".symtab", elf.SHT_SYMTAB, f.Symbols},
		{".dynsym", elf.SHT_DYNSYM, f.DynamicSymbols},
	} {
		sec := f.SectionByType(t.typ)
		if sec == nil {
			continue
		}
		// A symbol is 24 bytes (16 in ELF32); refuse a table claiming more than the
		// bound before debug/elf reads it.
		if sec.Size/16 > maxSymbols {
			return nil, "", fmt.Errorf("symtab: %s claims %d bytes, more than %d symbols", t.name, sec.Size, maxSymbols)
		}
		syms, err := t.read()
		if errors.Is(err, elf.ErrNoSymbols) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("symtab: read %s: %w", t.name, err)
		}
		if len(syms) == 0 {
			continue
		}
		return syms, t.name, nil
	}
	return nil, "", nil
}

// candidates keeps the symbols llvm-symbolizer 14 keeps, with their addresses.
func candidates(f *elf.File, syms []elf.Symbol) []candidate {
	out := make([]candidate, 0, len(syms))
	file := ""
	for i, s := range syms {
		switch elf.ST_TYPE(s.Info) {
		case elf.STT_FUNC, elf.STT_GNU_IFUNC, elf.STT_OBJECT, elf.STT_NOTYPE:
		case elf.STT_FILE:
			file = s.Name
			continue
		default:
			continue
		}
		// Undefined (0) and the reserved indices (absolute, common, extended) name no
		// section of the file.
		if s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE || int(s.Section) >= len(f.Sections) {
			continue
		}
		// A symbol of a section that is not loaded has an offset into it, not an address:
		// gcc's LTO writes one per source file into .debug_info (main.c.241c58da), and in a
		// PIE its offset falls on code, which llvm-symbolizer 14 then names after it.
		if f.Sections[s.Section].Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		addr := s.Value
		if f.Type == elf.ET_REL {
			addr += f.Sections[s.Section].Addr
		}
		if f.Machine == elf.EM_ARM && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			addr &^= 1 // the Thumb bit is not part of the address
		}
		if isMappingSymbol(f.Machine, s) {
			continue
		}
		c := candidate{addr: addr, size: s.Size, name: s.Name, order: i}
		if elf.ST_BIND(s.Info) == elf.STB_LOCAL {
			c.file = file
		}
		out = append(out, c)
	}
	return out
}

// isMappingSymbol reports whether s is one of the ARM and AArch64 ELF ABIs' mapping
// symbols, which mark where code ($x, $a, $t) and data ($d) start rather than name anything:
// "$x", or "$x." and a suffix. llvm-symbolizer skips them; a PLT named "$x" helps no one.
func isMappingSymbol(m elf.Machine, s elf.Symbol) bool {
	if m != elf.EM_AARCH64 && m != elf.EM_ARM || elf.ST_TYPE(s.Info) != elf.STT_NOTYPE || elf.ST_BIND(s.Info) != elf.STB_LOCAL {
		return false
	}
	n := s.Name
	if len(n) < 2 || n[0] != '$' || (len(n) > 2 && n[2] != '.') {
		return false
	}
	switch n[1] {
	case 'x', 'a', 't', 'd':
		return true
	}
	return false
}

// dedupe sorts by address and keeps one symbol per address: the largest, and among equally
// large ones the last in table order (llvm-symbolizer's stable sort by address and size,
// keeping the last of each address).
func dedupe(cands []candidate) []candidate {
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.addr != b.addr {
			return a.addr < b.addr
		}
		if a.size != b.size {
			return a.size < b.size
		}
		return a.order < b.order
	})
	out := cands[:0]
	for i, c := range cands {
		if i+1 < len(cands) && cands[i+1].addr == c.addr {
			continue
		}
		out = append(out, c)
	}
	return out
}

type span struct{ lo, hi uint64 }

// codeRanges returns the merged, sorted address ranges that hold code: the executable
// PT_LOAD segments, which include the padding between code sections (llvm-symbolizer names
// it too), or, in files without program headers, the executable sections.
func codeRanges(f *elf.File) []span {
	var rs []span
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 || p.Memsz == 0 {
			continue
		}
		hi := p.Vaddr + p.Memsz
		if hi < p.Vaddr {
			hi = math.MaxUint64
		}
		rs = append(rs, span{p.Vaddr, hi})
	}
	if len(rs) > 0 {
		return merge(rs)
	}
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Flags&elf.SHF_EXECINSTR == 0 || s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		hi := s.Addr + s.Size
		if hi < s.Addr {
			hi = math.MaxUint64
		}
		rs = append(rs, span{s.Addr, hi})
	}
	return merge(rs)
}

func merge(rs []span) []span {
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	out := rs[:0]
	for _, r := range rs {
		if k := len(out) - 1; k >= 0 && r.lo <= out[k].hi {
			out[k].hi = max(out[k].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// clip returns the parts of [lo, hi) inside the code ranges.
func clip(code []span, lo, hi uint64) []span {
	i := sort.Search(len(code), func(i int) bool { return code[i].hi > lo })
	var out []span
	for ; i < len(code) && code[i].lo < hi; i++ {
		out = append(out, span{max(lo, code[i].lo), min(hi, code[i].hi)})
	}
	return out
}

// parallel runs fn(0..n-1) on GOMAXPROCS goroutines, each taking a contiguous share.
func parallel(n int, fn func(int)) {
	workers := min(runtime.GOMAXPROCS(0), n/256+1)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				fn(i)
			}
		}()
	}
	wg.Wait()
}
