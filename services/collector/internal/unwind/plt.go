package unwind

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/profsym/profsym/pkg/debuginfo/cfi"
)

// stpX16X30 is `stp x16, x30, [sp, #-16]!`, with which an AArch64 PLT's first entry saves
// the link register before it jumps to the dynamic linker's resolver.
const stpX16X30 = 0xa9bf7bf0

// aarch64PLTHeader is the size of an AArch64 PLT's first entry (with or without BTI).
const aarch64PLTHeader = 32

// addAArch64PLT gives the AArch64 PLT of f the rows its CFI lacks: linkers describe no
// AArch64 PLT in .eh_frame, so a sample in a stub ended the walk there, or walked on by frame
// pointers through code that keeps none. A stub (adrp, ldr, add, br: x16 and x17 only)
// leaves the stack pointer and the link register as its caller set them: CFA = SP, the
// return address still in x30. The first entry saves x30 at SP-16 first. Rows are added only
// where no FDE covers the section.
func addAArch64PLT(t *cfi.Table, f *elf.File) {
	for _, name := range []string{".plt", ".iplt"} {
		s := f.Section(name)
		if s == nil || s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || s.Size == 0 || s.Size > 1<<24 {
			continue
		}
		lo, hi := s.Addr, s.Addr+s.Size
		if covered(t, lo, hi) {
			continue
		}
		code, err := s.Data()
		if err != nil {
			continue
		}
		insert(t, lo, hi, pltRows(lo, code, name == ".plt"))
	}
}

// covered reports whether any row of t in [lo, hi), or the row in force at lo, says more
// than "no CFI here".
func covered(t *cfi.Table, lo, hi uint64) bool {
	if r, ok := t.Lookup(lo); ok && r.CFA != cfi.CFAUndefined {
		return true
	}
	for _, r := range t.Rows {
		if r.PC > lo && r.PC < hi && r.CFA != cfi.CFAUndefined {
			return true
		}
	}
	return false
}

// pltRows are the rows of a PLT at lo whose code is code; withHeader: it starts with the
// entry that calls the resolver.
func pltRows(lo uint64, code []byte, withHeader bool) []cfi.Row {
	stub := cfi.Row{PC: lo, CFA: cfi.CFASP}
	if !withHeader || len(code) < aarch64PLTHeader {
		return []cfi.Row{stub}
	}
	for off := 0; off < aarch64PLTHeader; off += 4 {
		if binary.LittleEndian.Uint32(code[off:]) != stpX16X30 {
			continue
		}
		saved := cfi.Row{PC: lo + uint64(off) + 4, CFA: cfi.CFASP, CFAOffset: 16, RA: cfi.RegOffset, RAOffset: -8}
		entries := stub
		entries.PC = lo + aarch64PLTHeader
		rows := []cfi.Row{saved, entries}
		if off > 0 {
			rows = append([]cfi.Row{stub}, rows...)
		}
		return rows
	}
	return []cfi.Row{stub}
}

// insert puts rows, which cover [lo, hi), into t's rows, and after them the rule that was in
// force at hi.
func insert(t *cfi.Table, lo, hi uint64, rows []cfi.Row) {
	after, ok := t.Lookup(hi)
	if !ok {
		after = cfi.Row{}
	}
	after.PC = hi
	i := slices.IndexFunc(t.Rows, func(r cfi.Row) bool { return r.PC >= lo })
	if i < 0 {
		i = len(t.Rows)
	}
	j := slices.IndexFunc(t.Rows, func(r cfi.Row) bool { return r.PC > hi })
	if j < 0 {
		j = len(t.Rows)
	}
	out := make([]cfi.Row, 0, len(t.Rows)+len(rows)+1)
	out = append(out, t.Rows[:i]...)
	out = append(out, rows...)
	out = append(out, after)
	out = append(out, t.Rows[j:]...)
	t.Rows = out
}

// aarch64SigreturnSymbol is the arm64 vDSO's signal trampoline, where a signal handler
// returns.
const aarch64SigreturnSymbol = "__kernel_rt_sigreturn"

// aarch64VdsoTable is the unwind table of an arm64 vDSO without CFI: a signal-frame row over
// __kernel_rt_sigreturn, from the instruction before it (a handler's return address is the
// trampoline's first instruction, looked up one byte back), and no rule elsewhere (the walk
// goes on by frame pointers there, where it can).
func aarch64VdsoTable(f *elf.File) (*encoded, error) {
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("arm64 [vdso] symbols: %w", err)
	}
	for _, s := range syms {
		if s.Name != aarch64SigreturnSymbol || s.Value < 4 {
			continue
		}
		size := s.Size
		if size == 0 {
			size = 8 // mov x8, #__NR_rt_sigreturn; svc #0
		}
		t := &cfi.Table{Arch: elf.EM_AARCH64, Rows: []cfi.Row{
			{PC: s.Value - 4, CFA: cfi.CFASignalFrame},
			{PC: s.Value + size, CFA: cfi.CFAUndefined},
		}}
		return encode(t), nil
	}
	return nil, fmt.Errorf("arm64 [vdso] has no CFI and no %s", aarch64SigreturnSymbol)
}
