package cfi

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// Expected rows, in the shape normal x86-64 code has: the return address at cfa-8.
func rsp(pc uint64, off int32) Row {
	return Row{PC: pc, CFA: CFASP, CFAOffset: off, RA: RegOffset, RAOffset: -8}
}
func rbp(pc uint64, off int32) Row {
	return Row{PC: pc, CFA: CFAFP, CFAOffset: off, RA: RegOffset, RAOffset: -8}
}
func (r Row) fp(off int32) Row      { r.FP, r.FPOffset = RegOffset, off; return r }
func (r Row) fpRule(rr RegRule) Row { r.FP, r.FPOffset = rr, 0; return r }
func (r Row) raRule(rr RegRule) Row { r.RA, r.RAOffset = rr, 0; return r }
func end(pc uint64) Row             { return Row{PC: pc} }

const sectAddr = 0x2000

type parseCase struct {
	name    string
	kind    SectionKind
	build   func(s *section)
	want    []Row
	skipped int
	err     string      // a substring of the error, when one is expected
	arch    elf.Machine // Options.Arch: x86-64 when zero
}

func runParseCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &section{kind: tc.kind, addr: sectAddr}
			tc.build(s)
			tb, err := ParseSectionWith(s.b, s.addr, tc.kind, Options{Arch: tc.arch, TextBase: testTextBase, DataBase: testDataBase})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tb.Skipped != tc.skipped {
				t.Errorf("Skipped = %d (%v), want %d", tb.Skipped, tb.SkipReason, tc.skipped)
			}
			if (tb.Skipped == 0) != (tb.SkipReason == nil) {
				t.Errorf("Skipped %d with reason %v", tb.Skipped, tb.SkipReason)
			}
			if !reflect.DeepEqual(tb.Rows, tc.want) && (len(tb.Rows) != 0 || len(tc.want) != 0) {
				t.Errorf("rows:\n%s\nwant:\n%s", rowsString(tb.Rows), rowsString(tc.want))
			}
			checkInvariants(t, tb)
		})
	}
}

func rowsString(rows []Row) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString("  " + r.String() + "\n")
	}
	return b.String()
}

// checkInvariants checks what Table promises for any input.
func checkInvariants(t testing.TB, tb *Table) {
	t.Helper()
	for i, r := range tb.Rows {
		if i > 0 {
			if r.PC <= tb.Rows[i-1].PC {
				t.Fatalf("row %d: PC %#x not above %#x", i, r.PC, tb.Rows[i-1].PC)
			}
			if r.sameRules(tb.Rows[i-1]) {
				t.Fatalf("row %d (%v) repeats the row before", i, r)
			}
		}
		if r.CFA > CFASignalFrame || r.FP > RegUndefined || r.RA > RegUndefined {
			t.Fatalf("row %d: out-of-range rule %v", i, r)
		}
		if r.CFA == CFASignalFrame && r != (Row{PC: r.PC, CFA: CFASignalFrame}) {
			t.Fatalf("row %d: a signal frame row with other rules: %v", i, r)
		}
		switch tb.Arch {
		case elf.EM_X86_64:
			if r.RASigned {
				t.Fatalf("row %d: a signed return address on x86-64: %v", i, r)
			}
		case elf.EM_AARCH64:
			if r.CFA == CFAPLT {
				t.Fatalf("row %d: the x86-64 PLT rule on AArch64: %v", i, r)
			}
		default:
			t.Fatalf("table for %v", tb.Arch)
		}
		if r.FP != RegOffset && r.FPOffset != 0 || r.RA != RegOffset && r.RAOffset != 0 {
			t.Fatalf("row %d: offset without an offset rule: %v", i, r)
		}
	}
	if n := len(tb.Rows); n > 0 && tb.Rows[n-1].CFA != CFAUndefined {
		t.Fatalf("last row %v is not CFAUndefined", tb.Rows[n-1])
	}
}

func TestInstructions(t *testing.T) {
	fde := func(s *section, cie int, start, length uint64, insns ...[]byte) int {
		return s.fde(fdeSpec{cie: cie, start: start, length: length, hasAug: true, insns: cat(anySlice(insns)...)})
	}
	std := func(s *section) int { return s.cie(stdCIE()) }
	cases := []parseCase{
		{
			name: "push rbp, mov rsp to rbp, leave",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x20,
					advance(1), defCFAOffset(16), offset(regRBP, 2),
					advance(3), defCFARegister(regRBP),
					advance(0x10), defCFA(regRSP, 8))
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1001, 16).fp(-16), rbp(0x1004, 16).fp(-16), rsp(0x1014, 8).fp(-16), end(0x1020)},
		},
		{
			name: "advance_loc1, 2 and 4 with a code alignment factor",
			build: func(s *section) {
				c := stdCIE()
				c.codeAlign = 4
				ci := s.cie(c)
				fde(s, ci, 0x1000, 0x100000,
					advance(0x20), defCFAOffset(16), // 0x80 bytes
					advance(0x100), defCFAOffset(24), // 0x400
					advance(0x10000), defCFAOffset(32)) // 0x40000
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1080, 16), rsp(0x1480, 24), rsp(0x41480, 32), end(0x101000)},
		},
		{
			name: "set_loc in the FDE's pointer encoding",
			build: func(s *section) {
				c := std(s)
				// set_loc's operand is pc-relative to where it is written: the FDE
				// body starts 8 bytes in (length, CIE pointer), then 4+4 bytes of
				// range, then the augmentation length.
				off := len(s.b)
				pos := off + 8 + 4 + 4 + 1 + 1
				fde(s, c, 0x1000, 0x40, cat(cfaSetLoc, s.pointer(0x1b, 0x1010, pos)), defCFAOffset(16))
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1010, 16), end(0x1040)},
		},
		{
			name: "set_loc backwards skips the FDE",
			build: func(s *section) {
				c := std(s)
				off := len(s.b)
				pos := off + 8 + 4 + 4 + 1 + 1
				fde(s, c, 0x1000, 0x40, cat(cfaSetLoc, s.pointer(0x1b, 0xff0, pos)))
			},
			skipped: 1,
		},
		{
			name: "def_cfa_sf and def_cfa_offset_sf are factored",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10,
					advance(1), cat(cfaDefCFASF, uleb(regRBP), sleb(-2)), // -2 * -8 = 16
					advance(1), cat(cfaDefCFAOffsetSF, sleb(-4))) // 32
			},
			want: []Row{rsp(0x1000, 8), rbp(0x1001, 16), rbp(0x1002, 32), end(0x1010)},
		},
		{
			name: "offset_extended, offset_extended_sf, GNU_negative_offset_extended",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10,
					advance(1), cat(cfaOffsetExtended, uleb(regRBP), uleb(3)),
					advance(1), cat(cfaOffsetExtendedSF, uleb(regRBP), sleb(4)), // 4 * -8
					advance(1), cat(cfaGNUNegativeOffsetExtended, uleb(regRBP), uleb(5)), // -(5 * -8)
					advance(1), cat(cfaOffsetExtendedSF, uleb(16), sleb(2)))
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1001, 8).fp(-24), rsp(0x1002, 8).fp(-32), rsp(0x1003, 8).fp(40),
				{PC: 0x1004, CFA: CFASP, CFAOffset: 8, FP: RegOffset, FPOffset: 40, RA: RegOffset, RAOffset: -16}, end(0x1010)},
		},
		{
			name: "restore and restore_extended return to the CIE's rules",
			build: func(s *section) {
				c := stdCIE()
				c.insns = cat(c.insns, offset(regRBP, 3))
				ci := s.cie(c)
				fde(s, ci, 0x1000, 0x10,
					advance(1), offset(regRBP, 2), offset(16, 4),
					advance(1), restore(regRBP),
					advance(1), cat(cfaUndefined, uleb(regRBP)),
					advance(1), cat(cfaRestoreExtended, uleb(regRBP)), cat(cfaRestoreExtended, uleb(16)))
			},
			want: []Row{rsp(0x1000, 8).fp(-24), {PC: 0x1001, CFA: CFASP, CFAOffset: 8, FP: RegOffset, FPOffset: -16, RA: RegOffset, RAOffset: -32},
				{PC: 0x1002, CFA: CFASP, CFAOffset: 8, FP: RegOffset, FPOffset: -24, RA: RegOffset, RAOffset: -32},
				{PC: 0x1003, CFA: CFASP, CFAOffset: 8, FP: RegUndefined, RA: RegOffset, RAOffset: -32},
				rsp(0x1004, 8).fp(-24), end(0x1010)},
		},
		{
			name: "undefined return address is the end of the stack",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, advance(4), undefined(16))
			},
			want: []Row{rsp(0x1000, 8), {PC: 0x1004, CFA: CFAEndOfStack, RA: RegUndefined}, end(0x1010)},
		},
		{
			name: "same_value, register, and the rules the table cannot express",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10,
					advance(1), offset(regRBP, 2),
					advance(1), cat(cfaSameValue, uleb(regRBP)),
					advance(1), cat(cfaRegister, uleb(regRBP), uleb(3)),
					advance(1), cat(cfaRegister, uleb(regRBP), uleb(regRBP)),
					advance(1), cat(cfaExpression, uleb(regRBP), uleb(2), 0x76, 0x00),
					advance(1), cat(cfaValOffset, uleb(regRBP), uleb(1)),
					advance(1), cat(cfaSameValue, uleb(regRBP)),
					advance(1), cat(cfaValOffsetSF, uleb(16), sleb(-1)),
					advance(1), cat(cfaValExpression, uleb(regRBP), uleb(1), 0x30))
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1001, 8).fp(-16), rsp(0x1002, 8), rsp(0x1003, 8).fpRule(RegExpression),
				rsp(0x1004, 8), rsp(0x1005, 8).fpRule(RegExpression),
				rsp(0x1007, 8), rsp(0x1008, 8).raRule(RegExpression), rsp(0x1009, 8).raRule(RegExpression).fpRule(RegExpression), end(0x1010)},
		},
		{
			name: "remember_state and restore_state keep the CFA too",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x20,
					advance(1), defCFAOffset(16), offset(regRBP, 2),
					advance(1), cat(cfaRememberState), defCFA(regRSP, 8), restore(regRBP),
					advance(1), cat(cfaRestoreState),
					advance(1), cat(cfaRememberState), cat(cfaRememberState), defCFAOffset(48),
					advance(1), cat(cfaRestoreState), cat(cfaRestoreState))
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1001, 16).fp(-16), rsp(0x1002, 8), rsp(0x1003, 16).fp(-16),
				rsp(0x1004, 48).fp(-16), rsp(0x1005, 16).fp(-16), end(0x1020)},
		},
		{
			name: "restore_state without remember_state skips the FDE",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, advance(1), cat(cfaRestoreState))
				fde(s, c, 0x1010, 0x10)
			},
			want:    []Row{rsp(0x1010, 8), end(0x1020)},
			skipped: 1,
		},
		{
			name: "remember_state nesting is bounded",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, bytes.Repeat([]byte{cfaRememberState}, maxStateDepth+1))
			},
			skipped: 1,
		},
		{
			name: "remember_state to the limit is fine",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, bytes.Repeat([]byte{cfaRememberState}, maxStateDepth), bytes.Repeat([]byte{cfaRestoreState}, maxStateDepth))
			},
			want: []Row{rsp(0x1000, 8), end(0x1010)},
		},
		{
			name: "PLT expressions with threshold 11 and 10, another expression",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x40,
					defCFAOffset(16), advance(6), defCFAOffset(24),
					advance(10), defCFAExpr(pltExpr(11)))
				fde(s, c, 0x1040, 0x20, advance(0x10), defCFAExpr(pltExpr(10)))
				// As the PLT expression but with lit12: not what the table knows.
				e := pltExpr(11)
				e[6] = 0x3c
				fde(s, c, 0x1060, 0x10, defCFAExpr(e), advance(1), defCFAExpr(pltExpr(11)[:10]))
			},
			want: []Row{rsp(0x1000, 16), rsp(0x1006, 24), {PC: 0x1010, CFA: CFAPLT, CFAOffset: 11, RA: RegOffset, RAOffset: -8},
				rsp(0x1040, 8), {PC: 0x1050, CFA: CFAPLT, CFAOffset: 10, RA: RegOffset, RAOffset: -8},
				{PC: 0x1060, CFA: CFAExpression, RA: RegOffset, RAOffset: -8}, end(0x1070)},
		},
		{
			name: "def_cfa after an expression is a register rule again",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, defCFAExpr([]byte{0x77, 0x10}), defCFAOffset(32), advance(1), defCFARegister(regRSP))
			},
			want: []Row{{PC: 0x1000, CFA: CFAExpression, RA: RegOffset, RAOffset: -8}, rsp(0x1001, 32), end(0x1010)},
		},
		{
			name: "CFA in another register or beyond int32",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, defCFA(10, 0), advance(1), defCFA(regRSP, 1<<31), advance(1), defCFA(regRSP, 1<<31-1),
					advance(1), offset(regRBP, 1<<60))
			},
			want: []Row{{PC: 0x1000, CFA: CFAExpression, RA: RegOffset, RAOffset: -8}, rsp(0x1002, 1<<31-1),
				rsp(0x1003, 1<<31-1).fpRule(RegExpression), end(0x1010)},
		},
		{
			name: "nop and GNU_args_size change nothing",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, cat(cfaNop), advance(1), cat(cfaGNUArgsSize, uleb(16)), cat(cfaNop, cfaNop), advance(1), defCFAOffset(16))
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1002, 16), end(0x1010)},
		},
		{
			name: "window_save, MIPS advance_loc8 and unknown opcodes skip their FDE only",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, cat(cfaGNUWindowSave))
				fde(s, c, 0x1010, 0x10, cat(cfaMIPSAdvanceLoc8, u64(1)))
				fde(s, c, 0x1020, 0x10, cat(0x3f))
				fde(s, c, 0x1030, 0x10, cat(0x17))
				fde(s, c, 0x1040, 0x10, defCFAOffset(16))
			},
			want:    []Row{rsp(0x1040, 16), end(0x1050)},
			skipped: 4,
		},
		{
			name: "a program past the FDE's end skips it",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, cat(cfaDefCFA, uleb(7)))
				fde(s, c, 0x1010, 0x10, cat(cfaDefCFAExpression, uleb(100), 1, 2))
			},
			skipped: 2,
		},
		{
			name: "rows past the FDE's end are dropped",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, advance(0x8), defCFAOffset(16), advance(0x8), defCFAOffset(24), advance(0x8), defCFAOffset(32))
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1008, 16), end(0x1010)},
		},
		{
			name: "advances that overflow the address saturate",
			build: func(s *section) {
				c := stdCIE()
				c.codeAlign = 1 << 62
				c.augData = []byte{0x04}
				ci := s.cie(c)
				s.fde(fdeSpec{cie: ci, enc: 0x04 /* udata8 */, start: math.MaxUint64 - 0x20, length: 0x10, hasAug: true,
					insns: cat(advance(8), defCFAOffset(16))})
			},
			want: []Row{rsp(math.MaxUint64-0x20, 8), end(math.MaxUint64 - 0x10)},
		},
	}
	runParseCases(t, cases)
}

func anySlice(b [][]byte) []any {
	r := make([]any, len(b))
	for i := range b {
		r[i] = b[i]
	}
	return r
}

func TestLayout(t *testing.T) {
	fde := func(s *section, cie int, start, length uint64, insns ...[]byte) int {
		return s.fde(fdeSpec{cie: cie, start: start, length: length, hasAug: true, insns: cat(anySlice(insns)...)})
	}
	std := func(s *section) int { return s.cie(stdCIE()) }
	cases := []parseCase{
		{
			name: "gaps get an undefined row, adjacent FDEs none, equal rows merge",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10)
				fde(s, c, 0x1010, 0x10) // same rules as the one before: merged
				fde(s, c, 0x1030, 0x10, advance(1), defCFAOffset(16))
			},
			want: []Row{rsp(0x1000, 8), end(0x1020), rsp(0x1030, 8), rsp(0x1031, 16), end(0x1040)},
		},
		{
			name: "FDEs out of address order",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x3000, 0x10, advance(1), defCFAOffset(16))
				fde(s, c, 0x1000, 0x10, advance(2), defCFAOffset(24))
				fde(s, c, 0x2000, 0x10, advance(3), defCFAOffset(32))
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1002, 24), end(0x1010), rsp(0x2000, 8), rsp(0x2003, 32), end(0x2010),
				rsp(0x3000, 8), rsp(0x3001, 16), end(0x3010)},
		},
		{
			name: "overlap: the later start wins and the earlier FDE does not resume",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x40, advance(1), defCFAOffset(16), advance(0x20), defCFAOffset(24))
				fde(s, c, 0x1010, 0x10, defCFAOffset(48))
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1001, 16), rsp(0x1010, 48), end(0x1020)},
		},
		{
			name: "duplicates: the first in the section wins",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, defCFAOffset(16))
				fde(s, c, 0x1000, 0x20, defCFAOffset(24))
				fde(s, c, 0x1010, 0x10, defCFAOffset(32))
			},
			want: []Row{rsp(0x1000, 16), rsp(0x1010, 32), end(0x1020)},
		},
		{
			name: "a malformed program takes its rows back, the closing row before it too",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10)
				// Adjacent to the one before: its first row would replace that one's
				// closing row.
				fde(s, c, 0x1010, 0x10, defCFAOffset(16), advance(4), defCFAOffset(24), advance(4), cat(cfaGNUWindowSave))
				fde(s, c, 0x1030, 0x10)
			},
			want:    []Row{rsp(0x1000, 8), end(0x1010), rsp(0x1030, 8), end(0x1040)},
			skipped: 1,
		},
		{
			name: "a malformed first of two FDEs with the same start leaves the place to the second",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10, defCFAOffset(16), advance(1), cat(cfaRestoreState))
				fde(s, c, 0x1000, 0x10, defCFAOffset(24))
				fde(s, c, 0x1000, 0x10, defCFAOffset(32))
			},
			want:    []Row{rsp(0x1000, 24), end(0x1010)},
			skipped: 1,
		},
		{
			name: "zero-length FDEs cover nothing",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0, defCFAOffset(16))
				fde(s, c, 0x1000, 0x10)
			},
			want: []Row{rsp(0x1000, 8), end(0x1010)},
		},
		{
			name: "a range that wraps around skips the FDE",
			build: func(s *section) {
				c := stdCIE()
				c.augData = []byte{0x04}
				ci := s.cie(c)
				s.fde(fdeSpec{cie: ci, enc: 0x04, start: math.MaxUint64 - 4, length: 0x10, hasAug: true})
			},
			skipped: 1,
		},
		{
			name:  "empty section",
			build: func(s *section) {},
		},
		{
			name: "zero terminators between entries",
			build: func(s *section) {
				s.zero()
				c := std(s)
				s.zero()
				fde(s, c, 0x1000, 0x10)
				s.zero()
			},
			want: []Row{rsp(0x1000, 8), end(0x1010)},
		},
		{
			name: "zero padding shorter than a length after the last entry",
			build: func(s *section) {
				c := std(s)
				fde(s, c, 0x1000, 0x10)
				s.b = append(s.b, 0, 0, 0)
			},
			want: []Row{rsp(0x1000, 8), end(0x1010)},
		},
		{
			name: "64-bit DWARF lengths",
			build: func(s *section) {
				c := stdCIE()
				c.is64 = true
				ci := s.cie(c)
				s.fde(fdeSpec{is64: true, cie: ci, start: 0x1000, length: 0x10, hasAug: true, insns: cat(advance(1), defCFAOffset(16))})
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1001, 16), end(0x1010)},
		},
	}
	runParseCases(t, cases)
}

func TestCIEs(t *testing.T) {
	fde := func(s *section, cie int, start, length uint64, insns ...[]byte) int {
		return s.fde(fdeSpec{cie: cie, start: start, length: length, hasAug: true, insns: cat(anySlice(insns)...)})
	}
	cases := []parseCase{
		{
			name: "unknown augmentation: that CIE's FDEs are skipped, the others kept",
			build: func(s *section) {
				bad := stdCIE()
				bad.aug = "zRX"
				bad.augData = []byte{0x1b, 0}
				b := s.cie(bad)
				fde(s, b, 0x1000, 0x10)
				fde(s, b, 0x1010, 0x10)
				good := s.cie(stdCIE())
				fde(s, good, 0x1020, 0x10)
			},
			want:    []Row{rsp(0x1020, 8), end(0x1030)},
			skipped: 2,
		},
		{
			name: "zPLR: indirect personality, LSDA pointer in the FDE",
			build: func(s *section) {
				c := stdCIE()
				c.aug = "zPLR"
				// personality: indirect pcrel sdata4; LSDA: pcrel sdata4; FDE: pcrel sdata4.
				c.augData = cat(0x9b, u32(0x1234), 0x1b, 0x1b)
				ci := s.cie(c)
				s.fde(fdeSpec{cie: ci, start: 0x1000, length: 0x10, hasAug: true, augData: u32(0x5678), insns: cat(advance(1), defCFAOffset(16))})
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1001, 16), end(0x1010)},
		},
		{
			name: "zPR with an aligned absolute personality",
			build: func(s *section) {
				c := stdCIE()
				c.aug = "zPR"
				// The personality's 8 bytes are aligned in the loaded section; the
				// augmentation data starts at offset 0x11 of the section (0x2011).
				c.augData = cat(peAligned, make([]byte, 6), u64(0xabc), 0x1b)
				ci := s.cie(c)
				fde(s, ci, 0x1000, 0x10)
			},
			want: []Row{rsp(0x1000, 8), end(0x1010)},
		},
		{
			name: "zRS: a signal trampoline described by expressions is a signal frame",
			build: func(s *section) {
				c := stdCIE()
				c.aug = "zRS"
				c.insns = nil
				ci := s.cie(c)
				// __restore_rt: CFA = *(rsp+160); rbp and rip from the sigcontext.
				fde(s, ci, 0x1000, 0x10,
					defCFAExpr([]byte{0x77, 0xa0, 0x01, 0x06}),
					cat(cfaExpression, uleb(regRBP), uleb(3), 0x77, 0x78, 0x06),
					cat(cfaExpression, uleb(16), uleb(3), 0x77, 0xa8, 0x01))
			},
			want: []Row{{PC: 0x1000, CFA: CFASignalFrame}, end(0x1010)},
		},
		{
			name: "no 'R': absolute 8-byte pointers",
			build: func(s *section) {
				c := stdCIE()
				c.aug = "z"
				c.augData = nil
				ci := s.cie(c)
				s.fde(fdeSpec{cie: ci, absptr: true, start: 0x1000, length: 0x10, hasAug: true})
			},
			want: []Row{rsp(0x1000, 8), end(0x1010)},
		},
		{
			name: "legacy eh augmentation and an empty one",
			build: func(s *section) {
				c := stdCIE()
				c.aug = "eh"
				c.augData = u64(0) // the EH data pointer
				ci := s.cie(c)
				s.fde(fdeSpec{cie: ci, absptr: true, start: 0x1000, length: 0x10, insns: defCFAOffset(16)})
				c.aug, c.augData = "", nil
				ci = s.cie(c)
				s.fde(fdeSpec{cie: ci, absptr: true, start: 0x1010, length: 0x10})
			},
			want: []Row{rsp(0x1000, 16), rsp(0x1010, 8), end(0x1020)},
		},
		{
			name: "version 3 (return address column in ULEB128)",
			build: func(s *section) {
				c := stdCIE()
				c.version = 3
				ci := s.cie(c)
				fde(s, ci, 0x1000, 0x10)
			},
			want: []Row{rsp(0x1000, 8), end(0x1010)},
		},
		{
			name: "version 2 and a return address in rbp are unsupported",
			build: func(s *section) {
				c := stdCIE()
				c.version = 2
				ci := s.cie(c)
				fde(s, ci, 0x1000, 0x10)
				c = stdCIE()
				c.ra = regRBP
				ci = s.cie(c)
				fde(s, ci, 0x1010, 0x10)
			},
			skipped: 2,
		},
		{
			name: "CIE initial instructions with a remembered state and a restore",
			build: func(s *section) {
				c := stdCIE()
				c.insns = cat(c.insns, cat(cfaRememberState), defCFAOffset(99), cat(cfaRestoreState), offset(regRBP, 2), restore(regRBP), advance(4))
				ci := s.cie(c)
				fde(s, ci, 0x1000, 0x10, offset(regRBP, 2), advance(1), restore(regRBP))
			},
			want: []Row{rsp(0x1000, 8).fp(-16), rsp(0x1001, 8), end(0x1010)},
		},
		{
			name: "a bad CIE program skips its FDEs",
			build: func(s *section) {
				c := stdCIE()
				c.insns = cat(cfaRestoreState)
				ci := s.cie(c)
				fde(s, ci, 0x1000, 0x10)
				fde(s, ci, 0x1010, 0x10)
			},
			skipped: 2,
		},
		{
			name: "pointer encodings of the initial location",
			build: func(s *section) {
				encs := []byte{0x00 /* absptr via udata8 */, 0x02, 0x03, 0x04, 0x01, 0x09, 0x0a, 0x0b, 0x0c,
					0x1b, 0x19, 0x1c, 0x2b, 0x3b, 0x50} // pc-relative unsigned would wrap: the section is above the code
				for i, enc := range encs {
					c := stdCIE()
					e := enc
					if e == 0 {
						e = 0x04
					}
					c.augData = []byte{e}
					ci := s.cie(c)
					s.fde(fdeSpec{cie: ci, enc: e, start: 0x1000 + uint64(i)*0x10, length: 0x10, hasAug: true, insns: defCFAOffset(uint64(16 + i))})
				}
			},
			want: func() []Row {
				var r []Row
				for i := range 15 {
					r = append(r, rsp(0x1000+uint64(i)*0x10, int32(16+i)))
				}
				return append(r, end(0x1000+15*0x10))
			}(),
		},
		{
			name: "indirect or omitted FDE pointers are unsupported",
			build: func(s *section) {
				c := stdCIE()
				c.augData = []byte{0x9b}
				ci := s.cie(c)
				fde(s, ci, 0x1000, 0x10)
				c.augData = []byte{0xff}
				ci = s.cie(c)
				fde(s, ci, 0x1000, 0x10)
				c.augData = []byte{0x0d}
				ci = s.cie(c)
				fde(s, ci, 0x1000, 0x10)
			},
			skipped: 3,
		},
	}
	runParseCases(t, cases)
}

func TestDebugFrame(t *testing.T) {
	dcie := func(version, addrSize byte) cieSpec {
		return cieSpec{version: version, codeAlign: 1, dataAlign: -8, ra: 16, addrSize: addrSize, insns: cat(defCFA(regRSP, 8), offset(16, 1))}
	}
	cases := []parseCase{
		{
			name: "versions 1, 3 and 4, with absolute CIE offsets",
			kind: DebugFrame,
			build: func(s *section) {
				c1 := s.cie(dcie(1, 0))
				c3 := s.cie(dcie(3, 0))
				c4 := s.cie(dcie(4, 8))
				s.fde(fdeSpec{cie: c1, start: 0x1000, length: 0x10, insns: cat(advance(1), defCFAOffset(16))})
				s.fde(fdeSpec{cie: c3, start: 0x1010, length: 0x10, insns: cat(advance(2), defCFAOffset(24))})
				s.fde(fdeSpec{cie: c4, start: 0x1020, length: 0x10, insns: cat(advance(3), defCFAOffset(32))})
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1001, 16), rsp(0x1010, 8), rsp(0x1012, 24), rsp(0x1020, 8), rsp(0x1023, 32), end(0x1030)},
		},
		{
			name: "4-byte addresses and set_loc",
			kind: DebugFrame,
			build: func(s *section) {
				c := s.cie(dcie(4, 4))
				s.fde(fdeSpec{cie: c, addrSize: 4, start: 0x1000, length: 0x10, insns: cat(cfaSetLoc, u32(0x1008), defCFAOffset(16))})
			},
			want: []Row{rsp(0x1000, 8), rsp(0x1008, 16), end(0x1010)},
		},
		{
			name: "a CIE after its FDE and 64-bit entries",
			kind: DebugFrame,
			build: func(s *section) {
				// The FDE names the CIE's offset before the CIE is written: 0x24 is
				// where the 36-byte 64-bit FDE below ends.
				s.fde(fdeSpec{is64: true, cie: 0x24, start: 0x1000, length: 0x10})
				c := dcie(1, 0)
				c.is64 = true
				if got := s.cie(c); got != 0x24 {
					t.Fatalf("CIE at %#x", got)
				}
			},
			want: []Row{rsp(0x1000, 8), end(0x1010)},
		},
		{
			name: "segment selectors and odd address sizes are unsupported",
			kind: DebugFrame,
			build: func(s *section) {
				c := dcie(4, 8)
				c.segSize = 2
				ci := s.cie(c)
				s.fde(fdeSpec{cie: ci, start: 0x1000, length: 0x10})
				ci = s.cie(dcie(4, 2))
				s.fde(fdeSpec{cie: ci, start: 0x1000, length: 0x10})
			},
			skipped: 2,
		},
		{
			name: "an eh_frame CIE id is an FDE pointing at offset 0",
			kind: DebugFrame,
			build: func(s *section) {
				s.entry(false, 0, func(int) []byte { return []byte{1, 0} })
			},
			err: "not a CIE",
		},
	}
	runParseCases(t, cases)
}

func TestMalformed(t *testing.T) {
	std := func(s *section) int { return s.cie(stdCIE()) }
	cases := []parseCase{
		{
			name:  "truncated length",
			build: func(s *section) { s.b = []byte{1, 2} },
			err:   "cfi: .eh_frame entry at 0x0: truncated length",
		},
		{
			name:  "length past the end",
			build: func(s *section) { std(s); s.b = append(s.b, u32(100)...) },
			err:   "cfi: .eh_frame entry at 0x16: length 0x64 runs past the section end",
		},
		{
			name:  "64-bit length past the end",
			build: func(s *section) { s.b = cat(u32(0xffffffff), u64(1<<62)) },
			err:   "length 0x4000000000000000 runs past the section end",
		},
		{
			name:  "too short for the id",
			build: func(s *section) { s.b = cat(u32(2), 0, 0) },
			err:   "too short for the CIE id",
		},
		{
			name: "CIE pointer before the section",
			build: func(s *section) {
				s.entry(false, 0x100, func(int) []byte { return make([]byte, 16) })
			},
			err: "cfi: .eh_frame FDE at 0x0: CIE pointer 0x100 out of range",
		},
		{
			name: "CIE pointer at an FDE",
			build: func(s *section) {
				c := std(s)
				f := s.fde(fdeSpec{cie: c, start: 0x1000, length: 0x10, hasAug: true})
				s.fde(fdeSpec{cie: f, start: 0x1000, length: 0x10, hasAug: true})
			},
			err: "leads to an entry that is not a CIE",
		},
		{
			name: "CIE pointer into the middle of an entry",
			build: func(s *section) {
				c := std(s)
				s.fde(fdeSpec{cie: c + 1, start: 0x1000, length: 0x10, hasAug: true})
			},
			err: "cfi: .eh_frame FDE at 0x16: CIE pointer 0x1 leads to an entry that is not a CIE",
		},
		{
			name:  "debug_frame CIE pointer past the end",
			kind:  DebugFrame,
			build: func(s *section) { s.entry(false, 0x1000, func(int) []byte { return make([]byte, 16) }) },
			err:   "cfi: .debug_frame FDE at 0x0: CIE pointer 0x1000 out of range",
		},
		{
			name: "CIE pointer at an entry that runs past the end",
			kind: DebugFrame,
			build: func(s *section) {
				s.entry(false, 0x18, func(int) []byte { return make([]byte, 16) })
				s.b = append(s.b, u32(0x100)...)
			},
			err: "cfi: .debug_frame FDE at 0x0: CIE pointer 0x18: entry at 0x18: length 0x100 runs past the section end",
		},
		{
			name: "truncated CIE",
			build: func(s *section) {
				c := s.entry(false, 0, func(int) []byte { return []byte{1, 'z', 'R', 0} })
				s.fde(fdeSpec{cie: c, start: 0x1000, length: 0x10, hasAug: true})
			},
			err: "cfi: .eh_frame CIE at 0x0: truncated header",
		},
		{
			name: "CIE augmentation data too long",
			build: func(s *section) {
				c := stdCIE()
				ci := s.entry(false, 0, func(int) []byte { return cat(1, []byte("zR"), 0, 1, 0x78, 16, 100, 0x1b) })
				_ = c
				s.fde(fdeSpec{cie: ci, start: 0x1000, length: 0x10, hasAug: true})
			},
			err: "augmentation data past the CIE's end",
		},
		{
			name: "CIE augmentation data too short for its letters",
			build: func(s *section) {
				ci := s.entry(false, 0, func(int) []byte { return cat(1, []byte("zPR"), 0, 1, 0x78, 16, 2, 0x03, 0) })
				s.fde(fdeSpec{cie: ci, start: 0x1000, length: 0x10, hasAug: true})
			},
			err: "augmentation data too short",
		},
	}
	runParseCases(t, cases)
}

func TestFDEHeaderProblemsSkip(t *testing.T) {
	runParseCases(t, []parseCase{
		{
			name: "truncated initial location, range, augmentation data",
			build: func(s *section) {
				c := s.cie(stdCIE())
				s.entry(false, uint64(len(s.b)+4-c), func(int) []byte { return []byte{1, 2} })
				s.entry(false, uint64(len(s.b)+4-c), func(int) []byte { return cat(u32(0), 1) })
				s.entry(false, uint64(len(s.b)+4-c), func(int) []byte { return cat(u32(0), u32(1), 5) })
				s.fde(fdeSpec{cie: c, start: 0x1000, length: 0x10, hasAug: true})
			},
			want:    []Row{rsp(0x1000, 8), end(0x1010)},
			skipped: 3,
		},
		{
			name: "debug_frame truncated addresses",
			kind: DebugFrame,
			build: func(s *section) {
				c := s.cie(cieSpec{version: 1, codeAlign: 1, dataAlign: -8, ra: 16, insns: defCFA(regRSP, 8)})
				s.entry(false, uint64(c), func(int) []byte { return u64(5) })
			},
			skipped: 1,
		},
	})
}

func TestLookup(t *testing.T) {
	tb := &Table{Rows: []Row{rsp(0x1000, 8), rsp(0x1004, 16), end(0x1010), rsp(0x2000, 8), end(0x2010)}}
	for _, tc := range []struct {
		pc   uint64
		want Row
		ok   bool
	}{
		{0, Row{}, false},
		{0xfff, Row{}, false},
		{0x1000, rsp(0x1000, 8), true},
		{0x1003, rsp(0x1000, 8), true},
		{0x1004, rsp(0x1004, 16), true},
		{0x100f, rsp(0x1004, 16), true},
		{0x1010, end(0x1010), true},
		{0x1fff, end(0x1010), true},
		{0x2005, rsp(0x2000, 8), true},
		{math.MaxUint64, end(0x2010), true},
	} {
		got, ok := tb.Lookup(tc.pc)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Lookup(%#x) = %v, %v; want %v, %v", tc.pc, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := (&Table{}).Lookup(5); ok {
		t.Error("Lookup in an empty table found a row")
	}
	if tb.SizeBytes() < 5*24 {
		t.Errorf("SizeBytes = %d, below the rows' size", tb.SizeBytes())
	}
}

// minimalELF returns an ELF header of the given class and machine with the given sections
// (name, type, address, bytes).
func minimalELF(class elf.Class, machine elf.Machine, sections ...elfSection) []byte {
	// Layout: header (64), section data, .shstrtab, section headers.
	var shstr []byte
	shstr = append(shstr, 0)
	names := make([]int, len(sections))
	for i, s := range sections {
		names[i] = len(shstr)
		shstr = append(shstr, s.name...)
		shstr = append(shstr, 0)
	}
	shstrName := len(shstr)
	shstr = append(shstr, ".shstrtab\x00"...)
	b := make([]byte, 64)
	offs := make([]int, len(sections))
	for i, s := range sections {
		offs[i] = len(b)
		b = append(b, s.data...)
	}
	shstrOff := len(b)
	b = append(b, shstr...)
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	shoff := len(b)
	le := binary.LittleEndian
	sh := func(name uint32, typ elf.SectionType, addr uint64, off, size int) {
		h := make([]byte, 64)
		le.PutUint32(h[0:], name)
		le.PutUint32(h[4:], uint32(typ))
		le.PutUint64(h[16:], addr)
		le.PutUint64(h[24:], uint64(off))
		le.PutUint64(h[32:], uint64(size))
		le.PutUint64(h[48:], 1)
		b = append(b, h...)
	}
	sh(0, elf.SHT_NULL, 0, 0, 0)
	for i, s := range sections {
		sh(uint32(names[i]), s.typ, s.addr, offs[i], len(s.data))
	}
	sh(uint32(shstrName), elf.SHT_STRTAB, 0, shstrOff, len(shstr))
	copy(b, "\x7fELF")
	b[4] = byte(class)
	b[5] = byte(elf.ELFDATA2LSB)
	b[6] = byte(elf.EV_CURRENT)
	le.PutUint16(b[16:], uint16(elf.ET_DYN))
	le.PutUint16(b[18:], uint16(machine))
	le.PutUint32(b[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(b[40:], uint64(shoff))
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[58:], 64)
	le.PutUint16(b[60:], uint16(len(sections)+2))
	le.PutUint16(b[62:], uint16(len(sections)+1))
	return b
}

type elfSection struct {
	name string
	typ  elf.SectionType
	addr uint64
	data []byte
}

func TestBuild(t *testing.T) {
	eh := &section{kind: EHFrame, addr: 0x3000}
	c := eh.cie(stdCIE())
	eh.fde(fdeSpec{cie: c, start: 0x1000, length: 0x10, hasAug: true, insns: cat(advance(1), defCFAOffset(16))})
	dbg := &section{kind: DebugFrame}
	dc := dbg.cie(cieSpec{version: 1, codeAlign: 1, dataAlign: -8, ra: 16, insns: cat(defCFA(regRSP, 8), offset(16, 1))})
	dbg.fde(fdeSpec{cie: dc, start: 0x1000, length: 0x10, insns: cat(advance(2), defCFAOffset(24))})

	open := func(t *testing.T, b []byte) *elf.File {
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	t.Run("eh_frame preferred", func(t *testing.T) {
		f := open(t, minimalELF(elf.ELFCLASS64, elf.EM_X86_64,
			elfSection{".debug_frame", elf.SHT_PROGBITS, 0, dbg.b},
			elfSection{".eh_frame", elf.SHT_PROGBITS, eh.addr, eh.b}))
		tb, err := Build(f)
		if err != nil {
			t.Fatal(err)
		}
		want := []Row{rsp(0x1000, 8), rsp(0x1001, 16), end(0x1010)}
		if tb.Source != ".eh_frame" || !reflect.DeepEqual(tb.Rows, want) || tb.FDEs != 1 {
			t.Errorf("got %s %d FDEs\n%s", tb.Source, tb.FDEs, rowsString(tb.Rows))
		}
	})
	t.Run("debug_frame when there is no eh_frame", func(t *testing.T) {
		f := open(t, minimalELF(elf.ELFCLASS64, elf.EM_X86_64, elfSection{".debug_frame", elf.SHT_PROGBITS, 0, dbg.b}))
		tb, err := Build(f)
		if err != nil {
			t.Fatal(err)
		}
		want := []Row{rsp(0x1000, 8), rsp(0x1002, 24), end(0x1010)}
		if tb.Source != ".debug_frame" || !reflect.DeepEqual(tb.Rows, want) {
			t.Errorf("got %s\n%s", tb.Source, rowsString(tb.Rows))
		}
	})
	t.Run("debug_frame when eh_frame has no FDE", func(t *testing.T) {
		lone := &section{kind: EHFrame, addr: 0x3000}
		lone.cie(stdCIE())
		lone.zero()
		f := open(t, minimalELF(elf.ELFCLASS64, elf.EM_X86_64,
			elfSection{".eh_frame", elf.SHT_PROGBITS, lone.addr, lone.b},
			elfSection{".debug_frame", elf.SHT_PROGBITS, 0, dbg.b}))
		tb, err := Build(f)
		if err != nil {
			t.Fatal(err)
		}
		if tb.Source != ".debug_frame" || tb.FDEs != 1 {
			t.Errorf("got %s with %d FDEs", tb.Source, tb.FDEs)
		}
		// A malformed .debug_frame then leaves the empty .eh_frame table.
		f = open(t, minimalELF(elf.ELFCLASS64, elf.EM_X86_64,
			elfSection{".eh_frame", elf.SHT_PROGBITS, lone.addr, lone.b},
			elfSection{".debug_frame", elf.SHT_PROGBITS, 0, []byte{9, 0}}))
		tb, err = Build(f)
		if err != nil || tb.Source != ".eh_frame" || len(tb.Rows) != 0 {
			t.Errorf("got %v, %v", tb, err)
		}
	})
	t.Run("no CFI", func(t *testing.T) {
		f := open(t, minimalELF(elf.ELFCLASS64, elf.EM_X86_64, elfSection{".text", elf.SHT_PROGBITS, 0x1000, []byte{0xc3}},
			elfSection{".eh_frame", elf.SHT_NOBITS, 0x2000, nil}))
		if _, err := Build(f); !errors.Is(err, ErrNoCFI) {
			t.Errorf("err = %v, want ErrNoCFI", err)
		}
	})
	t.Run("other machines", func(t *testing.T) {
		for _, m := range []elf.Machine{elf.EM_386, elf.EM_ARM, elf.EM_RISCV, elf.EM_PPC64} {
			f := open(t, minimalELF(elf.ELFCLASS64, m, elfSection{".eh_frame", elf.SHT_PROGBITS, eh.addr, eh.b}))
			_, err := Build(f)
			if !errors.Is(err, ErrUnsupportedMachine) {
				t.Errorf("%v: err = %v, want ErrUnsupportedMachine", m, err)
			}
			if err != nil && (!strings.Contains(err.Error(), "x86-64 or AArch64") || !strings.Contains(err.Error(), m.String())) {
				t.Errorf("%v: error %q names neither the supported machines nor the file's", m, err)
			}
		}
		// Big-endian AArch64 (aarch64_be) lays out its CFI in big-endian order; the
		// machine check comes before any section is read.
		be := &elf.File{FileHeader: elf.FileHeader{Class: elf.ELFCLASS64, Data: elf.ELFDATA2MSB, Machine: elf.EM_AARCH64}}
		if _, err := Build(be); !errors.Is(err, ErrUnsupportedMachine) {
			t.Errorf("big-endian AArch64: err = %v, want ErrUnsupportedMachine", err)
		}
	})
	t.Run("malformed section names the section", func(t *testing.T) {
		f := open(t, minimalELF(elf.ELFCLASS64, elf.EM_X86_64, elfSection{".eh_frame", elf.SHT_PROGBITS, 0, []byte{9, 0, 0, 0, 1}}))
		_, err := Build(f)
		if err == nil || !strings.Contains(err.Error(), ".eh_frame entry at 0x0") {
			t.Errorf("err = %v", err)
		}
	})
}

// TestShuffledFDEs lays out many FDEs given in a random order, some sharing a start, and
// checks each address against the FDE that must own it.
func TestShuffledFDEs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		s := &section{kind: EHFrame, addr: 0x100000}
		ci := stdCIE()
		ci.augData = []byte{0x04} // udata8: any address
		c := s.cie(ci)
		type want struct {
			start, end uint64
			off        int32
		}
		n := 1 + rng.IntN(300)
		perm := rng.Perm(n)
		owners := map[uint64]want{} // start -> the first FDE written with that start
		for k, i := range perm {
			// Pairs share a start. Odd rounds place the code high enough that the
			// sort cannot pack start and index into one integer.
			base := uint64(0x1000)
			if round%2 == 1 {
				base = 1<<63 + 0x1000
			}
			start := base + uint64(i/2)*0x10
			length := uint64(1 + rng.IntN(0x10))
			off := int32(16 + 8*k)
			s.fde(fdeSpec{cie: c, enc: 0x04, start: start, length: length, hasAug: true, insns: defCFAOffset(uint64(off))})
			if _, ok := owners[start]; !ok {
				owners[start] = want{start, start + length, off}
			}
		}
		tb, err := ParseSection(s.b, s.addr, EHFrame)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, tb)
		for _, w := range owners {
			for pc := w.start; pc < w.start+0x10; pc++ {
				got, _ := tb.Lookup(pc)
				if pc < w.end && (got.CFA != CFASP || got.CFAOffset != w.off) {
					t.Fatalf("round %d: %#x: %v, want rsp+%d", round, pc, got, w.off)
				}
				if pc >= w.end && got.CFA != CFAUndefined {
					t.Fatalf("round %d: %#x past the FDE's end %#x: %v", round, pc, w.end, got)
				}
			}
		}
	}
}
