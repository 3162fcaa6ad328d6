package cfi

import (
	"fmt"
	"math"
)

// DWARF register numbers that the table follows.
const (
	// x86-64
	regRBP = 6
	regRSP = 7
	// AArch64: the frame pointer x29, the link register x30 (the return address column of
	// GCC's and LLVM's CIEs), the stack pointer.
	regX29 = 29
	regX30 = 30
	regSP  = 31
)

// Call frame instructions (DW_CFA_*). The first three carry an operand in their low six bits.
const (
	cfaAdvanceLoc = 0x40
	cfaOffset     = 0x80
	cfaRestore    = 0xc0

	cfaNop                       = 0x00
	cfaSetLoc                    = 0x01
	cfaAdvanceLoc1               = 0x02
	cfaAdvanceLoc2               = 0x03
	cfaAdvanceLoc4               = 0x04
	cfaOffsetExtended            = 0x05
	cfaRestoreExtended           = 0x06
	cfaUndefined                 = 0x07
	cfaSameValue                 = 0x08
	cfaRegister                  = 0x09
	cfaRememberState             = 0x0a
	cfaRestoreState              = 0x0b
	cfaDefCFA                    = 0x0c
	cfaDefCFARegister            = 0x0d
	cfaDefCFAOffset              = 0x0e
	cfaDefCFAExpression          = 0x0f
	cfaExpression                = 0x10
	cfaOffsetExtendedSF          = 0x11
	cfaDefCFASF                  = 0x12
	cfaDefCFAOffsetSF            = 0x13
	cfaValOffset                 = 0x14
	cfaValOffsetSF               = 0x15
	cfaValExpression             = 0x16
	cfaMIPSAdvanceLoc8           = 0x1d
	cfaGNUWindowSave             = 0x2d // SPARC's; the same number is DW_CFA_AARCH64_negate_ra_state on AArch64
	cfaGNUArgsSize               = 0x2e
	cfaGNUNegativeOffsetExtended = 0x2f
)

// How the state defines the CFA.
const (
	cfaKindUndefined  = iota // no DW_CFA_def_cfa yet
	cfaKindReg               // register + offset
	cfaKindPLT               // the PLT expression
	cfaKindExpression        // any other expression
)

// offsetUnrepresentable stands for a factored offset that overflowed: no row can hold it,
// so the rule becomes an expression.
const offsetUnrepresentable = math.MaxInt64

// regState is the rule of one register column; off is in bytes (already factored).
type regState struct {
	rule RegRule
	off  int64
}

// state is the rule set of one row, for the columns the table keeps.
type state struct {
	cfaKind uint8
	cfaReg  uint64
	cfaOff  int64
	plt     int32 // the threshold of a PLT expression
	fp, ra  regState
	// raSigned is AArch64's RA_SIGN_STATE: DW_CFA_AARCH64_negate_ra_state toggles it, and
	// remember/restore_state save and restore it with the other rules.
	raSigned bool
}

func fits32(v int64) bool { return v >= math.MinInt32 && v <= math.MaxInt32 }

// row turns the state into the table's row at pc for machine a.
func (s *state) row(pc uint64, a *arch) Row {
	r := Row{PC: pc}
	if s.ra.rule == RegUndefined {
		// The outermost frame: nothing about the caller matters.
		r.CFA, r.RA = CFAEndOfStack, RegUndefined
		return r
	}
	switch s.cfaKind {
	case cfaKindUndefined:
		return r // no CFA: nothing else about the caller can be found
	case cfaKindPLT:
		r.CFA, r.CFAOffset = CFAPLT, s.plt
	case cfaKindExpression:
		r.CFA = CFAExpression
	default:
		switch {
		case !fits32(s.cfaOff):
			r.CFA = CFAExpression
		case s.cfaReg == a.sp:
			r.CFA, r.CFAOffset = CFASP, int32(s.cfaOff)
		case s.cfaReg == a.fp:
			r.CFA, r.CFAOffset = CFAFP, int32(s.cfaOff)
		default:
			r.CFA = CFAExpression
		}
	}
	r.FP, r.FPOffset = s.fp.rowRule()
	r.RA, r.RAOffset = s.ra.rowRule()
	r.RASigned = s.raSigned
	return r
}

func (s regState) rowRule() (RegRule, int32) {
	if s.rule != RegOffset {
		return s.rule, 0
	}
	if !fits32(s.off) {
		return RegExpression, 0
	}
	return RegOffset, int32(s.off)
}

// factor multiplies a factored operand by an alignment factor; an overflow gives
// offsetUnrepresentable, which no row can hold, so that the rule becomes an expression.
func factor(n, f int64) int64 {
	if n == 0 || f == 0 {
		return 0
	}
	v := n * f
	if v/f != n || (n == -1 && f == math.MinInt64) || (f == -1 && n == math.MinInt64) || v == offsetUnrepresentable {
		return offsetUnrepresentable
	}
	return v
}

func factorU(n uint64, f int64) int64 {
	if n > math.MaxInt64 {
		return offsetUnrepresentable
	}
	return factor(int64(n), f)
}

func signedOff(n uint64) int64 {
	if n > math.MaxInt64 {
		return offsetUnrepresentable
	}
	return int64(n)
}

// runCIE computes a CIE's initial state from its initial instructions.
func (p *parser) runCIE(c *cie) error {
	var st state
	r := reader{data: p.data, pos: c.insns[0], end: c.insns[1]}
	if err := p.exec(c, &st, &r, 0, 0, true); err != nil {
		return fmt.Errorf("CIE initial instructions: %w", err)
	}
	c.init, c.initDone = st, true
	return nil
}

// run executes an FDE's program from the CIE's initial state and adds its rows for
// [f.start, end) to p.rows.
func (p *parser) run(f *fde, end uint64) error {
	c := p.cieList[f.cie]
	st := c.init
	p.fdeStart = f.start
	p.signal = c.signal
	r := reader{data: p.data, pos: int(f.insns[0]), end: int(f.insns[1])}
	return p.exec(c, &st, &r, f.start, end, false)
}

// emit adds the row of st at loc, unless loc is past the FDE's (kept) end. The rows of a
// signal trampoline's FDE are CFASignalFrame whatever its program says: the program
// describes the kernel's signal frame with expressions, which the unwinder knows by
// another way.
func (p *parser) emit(st *state, loc, end uint64) {
	if loc < end {
		if p.signal {
			p.add(Row{PC: loc, CFA: CFASignalFrame})
			return
		}
		p.add(st.row(loc, p.arch))
	}
}

// setReg gives a register the rule rs when it is a column the table keeps.
func setReg(c *cie, st *state, reg uint64, rs regState) {
	if reg == c.fpReg {
		st.fp = rs
	}
	if reg == c.raReg {
		st.ra = rs
	}
}

// restoreReg gives a register its rule of the CIE's initial state.
func restoreReg(c *cie, st *state, reg uint64, inCIE bool) {
	var init state
	if !inCIE {
		init = c.init
	}
	if reg == c.fpReg {
		st.fp = init.fp
	}
	if reg == c.raReg {
		st.ra = init.ra
	}
}

// exec runs call frame instructions. In a CIE (inCIE) there are no rows: location changes
// are ignored and a restore returns a register to having no rule. The loop ends at the
// program's end or once the location passes end, since later rows would not be kept.
func (p *parser) exec(c *cie, st *state, r *reader, loc, end uint64, inCIE bool) error {
	p.stack = p.stack[:0]
	advance := func(to uint64) {
		if to > loc && !inCIE {
			p.emit(st, loc, end)
		}
		loc = to
	}
	for r.pos < r.end && (inCIE || loc < end) {
		at := r.pos
		op := r.u8()
		if op >= cfaAdvanceLoc {
			switch op & 0xc0 {
			case cfaAdvanceLoc:
				advance(addSat(loc, mulSat(uint64(op&0x3f), c.codeAlign)))
			case cfaOffset:
				setReg(c, st, uint64(op&0x3f), regState{RegOffset, factorU(r.uleb(), c.dataAlign)})
			default:
				restoreReg(c, st, uint64(op&0x3f), inCIE)
			}
		} else if err := p.execExtended(c, st, r, op, at, &loc, advance, inCIE); err != nil {
			return err
		}
		if r.bad {
			return fmt.Errorf("instruction %#x at %#x runs past the entry's end", op, at)
		}
	}
	if !inCIE {
		p.emit(st, loc, end)
	}
	return nil
}

// execExtended runs one instruction whose opcode is in the low six bits.
func (p *parser) execExtended(c *cie, st *state, r *reader, op uint8, at int, loc *uint64, advance func(uint64), inCIE bool) error {
	switch op {
	case cfaNop:
	case cfaSetLoc:
		var to uint64
		if p.kind == EHFrame {
			var err error
			to, err = p.pointer(r, c.fdeEnc, p.fdeStart)
			if err != nil {
				return fmt.Errorf("DW_CFA_set_loc at %#x: %w", at, err)
			}
		} else {
			to = p.address(r, c.addrSize)
		}
		if !r.bad && to < *loc && !inCIE {
			return fmt.Errorf("DW_CFA_set_loc at %#x: location %#x is below the current %#x", at, to, *loc)
		}
		advance(to)
	case cfaAdvanceLoc1:
		advance(addSat(*loc, mulSat(uint64(r.u8()), c.codeAlign)))
	case cfaAdvanceLoc2:
		advance(addSat(*loc, mulSat(uint64(r.u16()), c.codeAlign)))
	case cfaAdvanceLoc4:
		advance(addSat(*loc, mulSat(uint64(r.u32()), c.codeAlign)))
	case cfaOffsetExtended:
		reg := r.uleb()
		setReg(c, st, reg, regState{RegOffset, factorU(r.uleb(), c.dataAlign)})
	case cfaOffsetExtendedSF:
		reg := r.uleb()
		setReg(c, st, reg, regState{RegOffset, factor(r.sleb(), c.dataAlign)})
	case cfaGNUNegativeOffsetExtended:
		reg := r.uleb()
		off := factorU(r.uleb(), c.dataAlign)
		if off != offsetUnrepresentable {
			off = -off
		}
		setReg(c, st, reg, regState{RegOffset, off})
	case cfaRestoreExtended:
		restoreReg(c, st, r.uleb(), inCIE)
	case cfaUndefined:
		setReg(c, st, r.uleb(), regState{rule: RegUndefined})
	case cfaSameValue:
		setReg(c, st, r.uleb(), regState{rule: RegSame})
	case cfaRegister:
		reg, from := r.uleb(), r.uleb()
		if reg == from {
			setReg(c, st, reg, regState{rule: RegSame})
		} else {
			setReg(c, st, reg, regState{rule: RegExpression})
		}
	case cfaValOffset:
		reg := r.uleb()
		r.uleb()
		setReg(c, st, reg, regState{rule: RegExpression})
	case cfaValOffsetSF:
		reg := r.uleb()
		r.sleb()
		setReg(c, st, reg, regState{rule: RegExpression})
	case cfaExpression, cfaValExpression:
		reg := r.uleb()
		r.bytes(r.uleb())
		setReg(c, st, reg, regState{rule: RegExpression})
	case cfaRememberState:
		if len(p.stack) >= maxStateDepth {
			return fmt.Errorf("DW_CFA_remember_state at %#x: more than %d states remembered", at, maxStateDepth)
		}
		p.stack = append(p.stack, *st)
	case cfaRestoreState:
		if len(p.stack) == 0 {
			return fmt.Errorf("DW_CFA_restore_state at %#x: no state remembered", at)
		}
		*st = p.stack[len(p.stack)-1]
		p.stack = p.stack[:len(p.stack)-1]
	case cfaDefCFA:
		st.cfaReg = r.uleb()
		st.cfaOff = signedOff(r.uleb())
		st.cfaKind = cfaKindReg
	case cfaDefCFASF:
		st.cfaReg = r.uleb()
		st.cfaOff = factor(r.sleb(), c.dataAlign)
		st.cfaKind = cfaKindReg
	case cfaDefCFARegister:
		st.cfaReg = r.uleb()
		st.cfaKind = cfaKindReg
	case cfaDefCFAOffset:
		st.cfaOff = signedOff(r.uleb())
		if st.cfaKind == cfaKindUndefined {
			st.cfaKind = cfaKindReg
			st.cfaReg = math.MaxUint64 // no register yet: an expression if used
		}
	case cfaDefCFAOffsetSF:
		st.cfaOff = factor(r.sleb(), c.dataAlign)
		if st.cfaKind == cfaKindUndefined {
			st.cfaKind = cfaKindReg
			st.cfaReg = math.MaxUint64
		}
	case cfaDefCFAExpression:
		expr := r.bytes(r.uleb())
		if t, ok := isPLTExpression(expr); ok && p.arch.plt {
			st.cfaKind, st.plt = cfaKindPLT, t
		} else {
			st.cfaKind = cfaKindExpression
		}
	case cfaGNUArgsSize:
		r.uleb()
	case cfaGNUWindowSave:
		if !p.arch.pauth {
			return fmt.Errorf("instruction %#x (DW_CFA_GNU_window_save) at %#x on %v: %w", op, at, p.arch.machine, errUnsupported)
		}
		// DW_CFA_AARCH64_negate_ra_state: paciasp/pacibsp signed x30, or autiasp
		// authenticated it.
		st.raSigned = !st.raSigned
	case cfaMIPSAdvanceLoc8:
		return fmt.Errorf("instruction %#x at %#x: %w", op, at, errUnsupported)
	default:
		return fmt.Errorf("unknown instruction %#x at %#x: %w", op, at, errUnsupported)
	}
	return nil
}

func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

func mulSat(a, b uint64) uint64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxUint64/b {
		return math.MaxUint64
	}
	return a * b
}
