// Package cfi turns an ELF file's call frame information (.eh_frame, or .debug_frame
// where there is no .eh_frame) into a compact unwind table for x86-64 or AArch64: per
// address range, how to find the canonical frame address and where the return address and
// the caller's frame pointer were saved.
//
// The table keeps only what a frame-pointer-free unwinder needs: the CFA rule, and the rules
// of the frame pointer register and of the return address column. On x86-64 those are RBP
// (DWARF register 6) and column 16, with the CFA found from RSP (7) or RBP; on AArch64 they
// are x29 (29) and x30, the link register (30), with the CFA found from SP (31) or x29, and
// the row also says whether the return address is signed with pointer authentication. Every
// other register's rule is parsed and dropped. Rules the table cannot express (DWARF
// expressions, a value held in another register, offsets beyond int32) are kept as a kind
// that tells the unwinder to stop, or to treat the register as unknown, instead of being
// approximated.
package cfi

import (
	"debug/elf"
	"errors"
	"fmt"
	"unsafe"
)

// CFARule says how the canonical frame address (the caller's stack pointer before the call)
// is found.
type CFARule uint8

const (
	CFAUndefined  CFARule = iota // no CFI covers this address: the unwinder stops (counted as "no table")
	CFASP                        // CFA = stack pointer + CFAOffset (RSP on x86-64)
	CFAFP                        // CFA = frame pointer register + CFAOffset (RBP on x86-64)
	CFAPLT                       // x86-64 PLT stub expression: CFA = RSP + 8 + ((RIP & 15) >= CFAOffset ? 8 : 0); CFAOffset holds the threshold (10 or 11)
	CFAExpression                // a DWARF expression or register the table cannot express: the unwinder must stop
	CFAEndOfStack                // return address undefined (DW_CFA_undefined rip or x30, e.g. _start): the outermost frame, a clean end
	// CFASignalFrame: the code is a signal trampoline (its CIE has the 'S' augmentation:
	// glibc's __restore_rt on x86-64, the vDSO's __kernel_rt_sigreturn on AArch64). The
	// interrupted registers are in the kernel's signal frame at the stack pointer, at
	// offsets of the architecture's rt_sigframe; every other field of the row is zero.
	CFASignalFrame
)

var cfaRuleNames = [...]string{"undefined", "sp", "fp", "plt", "expression", "end-of-stack", "signal-frame"}

func (r CFARule) String() string {
	if int(r) < len(cfaRuleNames) {
		return cfaRuleNames[r]
	}
	return fmt.Sprintf("CFARule(%d)", uint8(r))
}

// RegRule says where a register of the caller was saved.
//
// For the return address on AArch64, RegSame means the return address is still in x30, the
// link register: no rule for x30 (the CIE's initial state), or DW_CFA_same_value, as in leaf
// functions and prologues before x30 is stored.
type RegRule uint8

const (
	RegSame       RegRule = iota // unchanged in this frame (same value, or no rule); for the AArch64 return address: still in x30 (LR)
	RegOffset                    // saved at CFA + offset
	RegExpression                // saved in a way the table cannot express (expression, another register, val_offset...): the unwinder treats the register as unknown
	RegUndefined                 // explicitly undefined
)

var regRuleNames = [...]string{"same", "offset", "expression", "undefined"}

func (r RegRule) String() string {
	if int(r) < len(regRuleNames) {
		return regRuleNames[r]
	}
	return fmt.Sprintf("RegRule(%d)", uint8(r))
}

// maxSectionSize bounds the frame section Build reads. The largest binaries seen (browsers,
// database servers) have .eh_frame sections of tens of MiB.
const maxSectionSize = 1 << 30

// Row applies from PC up to the next row's PC. PC is an ELF virtual address (the file's
// link-time address, as in the symbol table).
//
// Offsets are zero unless their rule uses them, so that rows compare with ==. A
// CFAUndefined, CFAEndOfStack or CFASignalFrame row carries no other rule than RA =
// RegUndefined for CFAEndOfStack. CFAUndefined also marks an FDE range whose CIE defines no
// CFA at all.
type Row struct {
	PC  uint64
	CFA CFARule
	// FP is the rule of the frame pointer register: RBP (DWARF 6) on x86-64, x29 (29) on
	// AArch64.
	FP RegRule
	// RA is the rule of the return address column: 16 on x86-64; 30 (x30, the link
	// register) on AArch64, where RegSame means the return address is still in x30.
	RA RegRule
	// RASigned: on AArch64, the return address is signed with pointer authentication
	// (DW_CFA_AARCH64_negate_ra_state toggled it on). Always false on x86-64. The unwinder
	// masks every AArch64 return address to the user address range, so this says what the
	// code does rather than changing how a frame is walked.
	RASigned  bool
	CFAOffset int32
	FPOffset  int32 // with FP == RegOffset: the frame pointer saved at CFA + FPOffset
	RAOffset  int32 // with RA == RegOffset: return address at CFA + RAOffset (-8 in normal x86-64 code)
}

// sameRules reports whether r and o differ only in PC, so that o adds nothing after r.
func (r Row) sameRules(o Row) bool {
	return r.CFA == o.CFA && r.FP == o.FP && r.RA == o.RA && r.RASigned == o.RASigned &&
		r.CFAOffset == o.CFAOffset && r.FPOffset == o.FPOffset && r.RAOffset == o.RAOffset
}

func (r Row) String() string {
	s := fmt.Sprintf("%#x cfa=%v", r.PC, r.CFA)
	switch r.CFA {
	case CFASP, CFAFP:
		s += fmt.Sprintf("%+d", r.CFAOffset)
	case CFAPLT:
		s += fmt.Sprintf("(%d)", r.CFAOffset)
	}
	s += fmt.Sprintf(" fp=%v", r.FP)
	if r.FP == RegOffset {
		s += fmt.Sprintf("%+d", r.FPOffset)
	}
	s += fmt.Sprintf(" ra=%v", r.RA)
	if r.RA == RegOffset {
		s += fmt.Sprintf("%+d", r.RAOffset)
	}
	if r.RASigned {
		s += " ra-signed"
	}
	return s
}

// Table is the unwind table of one file.
type Table struct {
	// Arch is the machine the rows are for, elf.EM_X86_64 or elf.EM_AARCH64: it says which
	// registers CFASP, CFAFP, FP and RA name. A consumer checks it with CheckArch.
	Arch elf.Machine
	// Rows is sorted by PC, strictly increasing; consecutive rows with equal rules are
	// merged; a CFAUndefined row closes each FDE range not followed immediately by another
	// FDE; the last row is CFAUndefined at the end of the last covered range.
	//
	// Where FDE ranges overlap, the FDE that starts later wins from its start on: the
	// earlier one is cut there and does not resume after the later one ends. Of FDEs with
	// the same start, the first in the section wins and the others are dropped.
	Rows []Row
	// Source is the section the table was read from: ".eh_frame" or ".debug_frame".
	Source string
	// FDEs is the number of FDEs whose rows are in the table.
	FDEs int
	// Skipped counts the FDEs left out because their CIE is unsupported (an unknown
	// augmentation, version or address size) or their own program or pointers could not be
	// read. Their ranges have no rows unless another FDE covers them.
	Skipped int
	// SkipReason is the first reason an FDE was skipped, nil when none was.
	SkipReason error
}

// Sentinel errors; match them with errors.Is.
var (
	// ErrNoCFI: the file has neither .eh_frame nor .debug_frame (or they hold no bytes).
	ErrNoCFI = errors.New("cfi: no .eh_frame or .debug_frame")
	// ErrUnsupportedMachine: the file is not a 64-bit little-endian x86-64 or AArch64 ELF
	// file, or Options.Arch names another machine.
	ErrUnsupportedMachine = errors.New("cfi: unsupported machine (want 64-bit little-endian x86-64 or AArch64)")
	// ErrArchMismatch: a table is for another machine than the one it is used for.
	ErrArchMismatch = errors.New("cfi: unwind table of another architecture")
)

// CheckArch returns nil when the table's rows are for machine m, and an error wrapping
// ErrArchMismatch that names both machines otherwise: rows of one architecture read as
// another's would name the wrong registers.
func (t *Table) CheckArch(m elf.Machine) error {
	if t.Arch != m {
		return fmt.Errorf("%w: the table is for %v, wanted for %v", ErrArchMismatch, t.Arch, m)
	}
	return nil
}

// Lookup returns the row covering pc (binary search) and false when pc is below the first
// row. A pc past the last covered range gets the closing CFAUndefined row.
func (t *Table) Lookup(pc uint64) (Row, bool) {
	rows := t.Rows
	// Find the first row whose PC is above pc; the row before it covers pc.
	lo, hi := 0, len(rows)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rows[m].PC > pc {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return Row{}, false
	}
	return rows[lo-1], true
}

// SizeBytes returns the memory the table holds, rows included.
func (t *Table) SizeBytes() int {
	return int(unsafe.Sizeof(*t)) + cap(t.Rows)*int(unsafe.Sizeof(Row{})) + len(t.Source)
}

// Build reads f's CFI: .eh_frame, or .debug_frame when the file has no .eh_frame. It returns
// an error naming the problem for malformed input, ErrNoCFI when the file has neither
// section, and ErrUnsupportedMachine for files that are not 64-bit little-endian x86-64 or
// AArch64. The table's Arch is the file's machine.
//
// An .eh_frame without a single FDE counts as none: a library built with
// -fno-asynchronous-unwind-tables keeps the C runtime's lone CIE there and describes its
// functions in .debug_frame only.
func Build(f *elf.File) (*Table, error) {
	if (f.Machine != elf.EM_X86_64 && f.Machine != elf.EM_AARCH64) || f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("%w: %v %v %v", ErrUnsupportedMachine, f.Class, f.Data, f.Machine)
	}
	opt := Options{Arch: f.Machine}
	// The LSB defines DW_EH_PE_textrel against .text and DW_EH_PE_datarel against .got;
	// compilers for x86-64 and AArch64 use neither for the pointers read here, so absent
	// sections are left at zero.
	if t := f.Section(".text"); t != nil {
		opt.TextBase = t.Addr
	}
	if g := f.Section(".got"); g != nil {
		opt.DataBase = g.Addr
	}
	eh, err := buildFrom(f, ".eh_frame", EHFrame, opt)
	if err != nil || (eh != nil && (eh.FDEs > 0 || eh.Skipped > 0)) {
		return eh, err
	}
	dbg, err := buildFrom(f, ".debug_frame", DebugFrame, opt)
	switch {
	case err != nil && eh == nil:
		return nil, err
	case err == nil && dbg != nil && (dbg.FDEs > 0 || dbg.Skipped > 0 || eh == nil):
		return dbg, nil
	case eh != nil:
		// The well-formed, empty .eh_frame is the answer when .debug_frame adds nothing.
		return eh, nil
	}
	return nil, ErrNoCFI
}

// buildFrom builds the table of the named section, or returns nil when the file has no such
// section or it holds no bytes.
func buildFrom(f *elf.File, name string, kind SectionKind, opt Options) (*Table, error) {
	s := f.Section(name)
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size == 0 {
		return nil, nil
	}
	// Size is the decompressed size of a compressed section: checked before anything is
	// allocated for it.
	if s.Size > maxSectionSize {
		return nil, fmt.Errorf("cfi: %s of %d bytes: larger than the %d accepted", name, s.Size, maxSectionSize)
	}
	data, err := sectionData(s)
	if err != nil {
		return nil, fmt.Errorf("cfi: read %s: %w", name, err)
	}
	return ParseSectionWith(data, s.Addr, kind, opt)
}

// sectionData reads a section's bytes, decompressed if need be, turning a panic inside
// debug/elf on a hostile header into an error.
func sectionData(s *elf.Section) (data []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("debug/elf panicked: %v", p)
		}
	}()
	return s.Data()
}
