package cfi

import (
	"bytes"
	"debug/elf"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// AArch64 expected rows: CFA = SP or x29 + off; x29 and x30 (the return address) as the
// prologue left them.
func sp(pc uint64, off int32) Row { return Row{PC: pc, CFA: CFASP, CFAOffset: off} }
func x29(pc uint64, off int32) Row {
	return Row{PC: pc, CFA: CFAFP, CFAOffset: off}
}

// saved says where a frame record (stp x29, x30) put x29 and x30.
func (r Row) saved(fpOff, raOff int32) Row {
	r.FP, r.FPOffset, r.RA, r.RAOffset = RegOffset, fpOff, RegOffset, raOff
	return r
}
func (r Row) signed() Row { r.RASigned = true; return r }

// a64CIE is the CIE GCC writes for AArch64 .eh_frame: instructions of 4 bytes, CFA = sp+0,
// the return address in x30 with no rule (still in the link register).
func a64CIE() cieSpec {
	return cieSpec{version: 1, aug: "zR", augData: []byte{0x1b}, codeAlign: 4, dataAlign: -8, ra: regX30,
		insns: defCFA(regSP, 0)}
}

var negateRAState = []byte{cfaGNUWindowSave}

// insFDE appends an .eh_frame FDE of the given CIE with its instructions.
func insFDE(s *section, cie int, start, length uint64, insns ...[]byte) int {
	return s.fde(fdeSpec{cie: cie, start: start, length: length, hasAug: true, insns: cat(anySlice(insns)...)})
}

func TestAArch64(t *testing.T) {
	prologue := func() []byte {
		// stp x29, x30, [sp, -32]!; mov x29, sp
		return cat(advance(1), defCFAOffset(32), offset(regX29, 4), offset(regX30, 3),
			advance(1), defCFARegister(regX29))
	}
	runParseCases(t, []parseCase{
		{
			name: "frame record: stp x29, x30, [sp, -32]!; mov x29, sp; ...; ldp; ret",
			arch: elf.EM_AARCH64,
			build: func(s *section) {
				ci := s.cie(a64CIE())
				insFDE(s, ci, 0x1000, 0x20, prologue(),
					// ldp x29, x30, [sp], 32 after the body: the rules of the entry.
					advance(4), restore(regX30), restore(regX29), defCFA(regSP, 0))
			},
			want: []Row{sp(0x1000, 0), sp(0x1004, 32).saved(-32, -24), x29(0x1008, 32).saved(-32, -24),
				sp(0x1018, 0), end(0x1020)},
		},
		{
			name: "leaf functions keep the return address in x30",
			arch: elf.EM_AARCH64,
			build: func(s *section) {
				ci := s.cie(a64CIE())
				insFDE(s, ci, 0x1000, 0x10)
				// A leaf that only moves sp; then an explicit same_value of x30.
				insFDE(s, ci, 0x1010, 0x10, advance(1), defCFAOffset(16), advance(2), cat(cfaSameValue, uleb(regX30)), defCFAOffset(0))
				// x30 copied to x9: the table cannot follow it.
				insFDE(s, ci, 0x1020, 0x10, advance(1), cat(cfaRegister, uleb(regX30), uleb(9)))
			},
			// The FDEs' first rows equal the rows before them: merged.
			want: []Row{sp(0x1000, 0), sp(0x1014, 16), sp(0x101c, 0), sp(0x1024, 0).raRule(RegExpression), end(0x1030)},
		},
		{
			name: "pac-ret: negate_ra_state around the frame, through remember and restore_state",
			arch: elf.EM_AARCH64,
			build: func(s *section) {
				ci := s.cie(a64CIE())
				insFDE(s, ci, 0x1000, 0x30,
					advance(1), negateRAState, // paciasp
					prologue(),
					advance(2), cat(cfaRememberState),
					// an early return: ldp; autiasp; ret
					defCFA(regSP, 32), advance(1), restore(regX30), restore(regX29), defCFAOffset(0),
					advance(1), negateRAState,
					// the next block is in the body again: signed, frame record saved
					advance(1), cat(cfaRestoreState),
					advance(2), defCFA(regSP, 0), restore(regX30), restore(regX29), negateRAState)
			},
			want: []Row{sp(0x1000, 0), sp(0x1004, 0).signed(), sp(0x1008, 32).saved(-32, -24).signed(),
				x29(0x100c, 32).saved(-32, -24).signed(),
				sp(0x1014, 32).saved(-32, -24).signed(), sp(0x1018, 0).signed(), sp(0x101c, 0),
				x29(0x1020, 32).saved(-32, -24).signed(), sp(0x1028, 0), end(0x1030)},
		},
		{
			name: "negate_ra_state twice in one row, and in a CIE's initial instructions",
			arch: elf.EM_AARCH64,
			build: func(s *section) {
				ci := s.cie(a64CIE())
				insFDE(s, ci, 0x1000, 0x10, advance(1), negateRAState, negateRAState, defCFAOffset(16))
				c := a64CIE()
				c.insns = cat(c.insns, negateRAState)
				ci = s.cie(c)
				insFDE(s, ci, 0x1010, 0x10, advance(1), negateRAState)
			},
			want: []Row{sp(0x1000, 0), sp(0x1004, 16), sp(0x1010, 0).signed(), sp(0x1014, 0), end(0x1020)},
		},
		{
			name: "B and G augmentations, with a personality and an LSDA",
			arch: elf.EM_AARCH64,
			build: func(s *section) {
				c := a64CIE()
				c.aug = "zRB"
				ci := s.cie(c)
				insFDE(s, ci, 0x1000, 0x10, advance(1), negateRAState)
				c.aug = "zPLRBG"
				c.augData = cat(0x9b, u32(0x1234), 0x1b, 0x1b)
				ci = s.cie(c)
				s.fde(fdeSpec{cie: ci, start: 0x1010, length: 0x10, hasAug: true, augData: u32(0), insns: cat(advance(1), defCFAOffset(16))})
			},
			want: []Row{sp(0x1000, 0), sp(0x1004, 0).signed(), sp(0x1010, 0), sp(0x1014, 16), end(0x1020)},
		},
		{
			name: "B and G augmentations are AArch64's only",
			build: func(s *section) {
				for _, aug := range []string{"zRB", "zRG"} {
					c := stdCIE()
					c.aug = aug
					insFDE(s, s.cie(c), 0x1000, 0x10)
				}
				insFDE(s, s.cie(stdCIE()), 0x1010, 0x10)
			},
			want:    []Row{rsp(0x1010, 8), end(0x1020)},
			skipped: 2,
		},
		{
			name: "negate_ra_state is AArch64's only: on x86-64 it is SPARC's window_save",
			build: func(s *section) {
				ci := s.cie(stdCIE())
				insFDE(s, ci, 0x1000, 0x10, advance(1), negateRAState)
				insFDE(s, ci, 0x1010, 0x10)
			},
			want:    []Row{rsp(0x1010, 8), end(0x1020)},
			skipped: 1,
		},
		{
			name: "the vDSO's __kernel_rt_sigreturn: a signal frame",
			arch: elf.EM_AARCH64,
			build: func(s *section) {
				c := a64CIE()
				c.aug = "zRS"
				c.insns = cat(defCFA(regSP, 0), defCFA(regX29, 0), offset(regX29, 0),
					cat(cfaOffsetExtendedSF, uleb(regX30), sleb(-1)))
				ci := s.cie(c)
				insFDE(s, ci, 0x1000, 0xc, advance(1), negateRAState, defCFAOffset(16))
				insFDE(s, s.cie(a64CIE()), 0x100c, 0x4)
			},
			want: []Row{{PC: 0x1000, CFA: CFASignalFrame}, sp(0x100c, 0), end(0x1010)},
		},
		{
			name: "_start: x30 undefined is the outermost frame",
			arch: elf.EM_AARCH64,
			build: func(s *section) {
				insFDE(s, s.cie(a64CIE()), 0x1000, 0x10, advance(1), undefined(regX30))
			},
			want: []Row{sp(0x1000, 0), {PC: 0x1004, CFA: CFAEndOfStack, RA: RegUndefined}, end(0x1010)},
		},
		{
			name: "CFA in other registers, and the x86-64 PLT expression, are expressions on AArch64",
			arch: elf.EM_AARCH64,
			build: func(s *section) {
				insFDE(s, s.cie(a64CIE()), 0x1000, 0x20,
					advance(1), defCFA(0, 0), // __start_context: CFA in x0
					advance(1), defCFA(regRSP, 16), // x7
					advance(1), defCFAExpr(pltExpr(11)),
					advance(1), defCFA(regSP, 16))
			},
			want: []Row{sp(0x1000, 0), {PC: 0x1004, CFA: CFAExpression}, sp(0x1010, 16), end(0x1020)},
		},
		{
			name: "x29 cannot be the return address column",
			arch: elf.EM_AARCH64,
			build: func(s *section) {
				c := a64CIE()
				c.ra = regX29
				insFDE(s, s.cie(c), 0x1000, 0x10)
			},
			skipped: 1,
		},
	})
}

func TestOptionsArch(t *testing.T) {
	s := &section{kind: EHFrame, addr: sectAddr}
	insFDE(s, s.cie(stdCIE()), 0x1000, 0x10, advance(1), defCFA(regRBP, 16), offset(regRBP, 2))
	for _, tc := range []struct {
		arch elf.Machine
		want []Row
	}{
		// RBP and RSP are x6 and x7 on AArch64: a CFA in x6 is an expression.
		{elf.EM_NONE, []Row{rsp(0x1000, 8), rbp(0x1001, 16).fp(-16), end(0x1010)}},
		{elf.EM_X86_64, []Row{rsp(0x1000, 8), rbp(0x1001, 16).fp(-16), end(0x1010)}},
		{elf.EM_AARCH64, []Row{{PC: 0x1000, CFA: CFAExpression, RA: RegOffset, RAOffset: -8}, end(0x1010)}},
	} {
		tb, err := ParseSectionWith(s.b, s.addr, EHFrame, Options{Arch: tc.arch})
		if err != nil {
			t.Fatal(err)
		}
		want := tc.arch
		if want == elf.EM_NONE {
			want = elf.EM_X86_64
		}
		if tb.Arch != want {
			t.Errorf("%v: Arch = %v", tc.arch, tb.Arch)
		}
		// The return address column is 16, which AArch64 code does not use; the table
		// follows the CIE's column on any machine.
		if tc.arch == elf.EM_AARCH64 && tb.Rows[0].RA != RegOffset {
			t.Errorf("AArch64 with column 16: %v", tb.Rows[0])
		}
		if !reflect.DeepEqual(tb.Rows, tc.want) {
			t.Errorf("%v: rows:\n%s\nwant:\n%s", tc.arch, rowsString(tb.Rows), rowsString(tc.want))
		}
		checkInvariants(t, tb)
	}
	for _, m := range []elf.Machine{elf.EM_386, elf.EM_ARM, elf.EM_RISCV} {
		_, err := ParseSectionWith(s.b, s.addr, EHFrame, Options{Arch: m})
		if !errors.Is(err, ErrUnsupportedMachine) || !strings.Contains(err.Error(), m.String()) {
			t.Errorf("%v: err = %v, want ErrUnsupportedMachine naming it", m, err)
		}
	}
}

func TestCheckArch(t *testing.T) {
	tb := &Table{Arch: elf.EM_AARCH64}
	if err := tb.CheckArch(elf.EM_AARCH64); err != nil {
		t.Errorf("same machine: %v", err)
	}
	err := tb.CheckArch(elf.EM_X86_64)
	if !errors.Is(err, ErrArchMismatch) || !strings.Contains(err.Error(), "EM_AARCH64") || !strings.Contains(err.Error(), "EM_X86_64") {
		t.Errorf("err = %v, want ErrArchMismatch naming both machines", err)
	}
	// A table built without an Arch (a zero Table) is for no machine.
	if err := (&Table{}).CheckArch(elf.EM_X86_64); !errors.Is(err, ErrArchMismatch) {
		t.Errorf("zero Table: err = %v", err)
	}
}

func TestBuildAArch64(t *testing.T) {
	eh := &section{kind: EHFrame, addr: 0x3000}
	c := a64CIE()
	c.aug = "zRB"
	ci := eh.cie(c)
	eh.fde(fdeSpec{cie: ci, start: 0x1000, length: 0x20, hasAug: true, insns: cat(advance(1), negateRAState, advance(1), defCFAOffset(16),
		offset(regX29, 2), offset(regX30, 1))})
	f, err := elf.NewFile(bytes.NewReader(minimalELF(elf.ELFCLASS64, elf.EM_AARCH64, elfSection{".eh_frame", elf.SHT_PROGBITS, eh.addr, eh.b})))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := Build(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{sp(0x1000, 0), sp(0x1004, 0).signed(), sp(0x1008, 16).saved(-16, -8).signed(), end(0x1020)}
	if tb.Arch != elf.EM_AARCH64 || !reflect.DeepEqual(tb.Rows, want) {
		t.Errorf("Arch %v, rows:\n%s\nwant:\n%s", tb.Arch, rowsString(tb.Rows), rowsString(want))
	}
	if got := want[2].String(); got != "0x1008 cfa=sp+16 fp=offset-16 ra=offset-8 ra-signed" {
		t.Errorf("String() = %q", got)
	}
}
