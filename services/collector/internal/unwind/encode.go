package unwind

import (
	"debug/elf"
	"math"

	"github.com/profsym/profsym/pkg/debuginfo/cfi"
)

// Kernel rule values (enum psym_cfa_rule, psym_fp_rule and psym_ra_rule in bpf/profiler.c).
const (
	cfaUndefined   = 0
	cfaSP          = 1
	cfaFP          = 2
	cfaPLT         = 3
	cfaUnsupported = 4
	cfaOutermost   = 5
	cfaSignal      = 6

	fpSame    = 0
	fpOffset  = 1
	fpUnknown = 2

	raOffset = 0
	raLink   = 1
)

// row is struct psym_row: 16 bytes, so a table costs 16 bytes per row in the kernel.
type row struct {
	PC        uint32
	CFAOffset int32
	CFARule   uint8
	FPRule    uint8
	RARule    uint8
	_         uint8
	FPOffset  int16
	RAOffset  int16
}

// encoded is a table in the kernel's form: row PCs relative to base.
type encoded struct {
	base uint64
	rows []row
}

// encode turns a CFI table into kernel rows. Relative PCs are 32 bits and the saved
// registers' offsets 16: rows the kernel could not follow become unsupported, which ends a
// stack there instead of reading a wrong word as the return address.
func encode(t *cfi.Table) *encoded {
	out := &encoded{}
	if len(t.Rows) == 0 {
		return out
	}
	out.base = t.Rows[0].PC
	out.rows = make([]row, 0, len(t.Rows))
	for _, r := range t.Rows {
		rel := r.PC - out.base
		if rel > math.MaxUint32 {
			// A file spanning more than 4 GiB of addresses: the rest has no table.
			out.rows = appendRow(out.rows, row{PC: math.MaxUint32, CFARule: cfaUndefined})
			break
		}
		out.rows = appendRow(out.rows, encodeRow(t.Arch, uint32(rel), r))
	}
	return out
}

func fits16(v int32) bool { return v >= math.MinInt16 && v <= math.MaxInt16 }

func encodeRow(arch elf.Machine, pc uint32, r cfi.Row) row {
	k := row{PC: pc}
	switch r.CFA {
	case cfi.CFAUndefined:
		k.CFARule = cfaUndefined
		return k
	case cfi.CFAEndOfStack:
		k.CFARule = cfaOutermost
		return k
	case cfi.CFASignalFrame:
		k.CFARule = cfaSignal
		return k
	case cfi.CFAExpression:
		k.CFARule = cfaUnsupported
		return k
	case cfi.CFASP:
		k.CFARule = cfaSP
	case cfi.CFAFP:
		k.CFARule = cfaFP
	case cfi.CFAPLT:
		k.CFARule = cfaPLT
	default:
		k.CFARule = cfaUnsupported
		return k
	}
	k.CFAOffset = r.CFAOffset
	switch {
	case r.RA == cfi.RegUndefined:
		return row{PC: pc, CFARule: cfaOutermost}
	case r.RA == cfi.RegOffset && fits16(r.RAOffset):
		k.RARule, k.RAOffset = raOffset, int16(r.RAOffset)
	case r.RA == cfi.RegSame && arch == elf.EM_AARCH64:
		// Still in x30: a leaf, or a prologue before x30 is stored.
		k.RARule = raLink
	default:
		return row{PC: pc, CFARule: cfaUnsupported}
	}
	switch r.FP {
	case cfi.RegSame:
		k.FPRule = fpSame
	case cfi.RegOffset:
		if fits16(r.FPOffset) {
			k.FPRule, k.FPOffset = fpOffset, int16(r.FPOffset)
		} else {
			k.FPRule = fpUnknown
		}
	default:
		k.FPRule = fpUnknown
	}
	return k
}

// appendRow adds r unless it repeats the previous row's rules (merging what encoding made
// equal), and replaces a previous row at the same PC.
func appendRow(rows []row, r row) []row {
	if n := len(rows); n > 0 {
		last := rows[n-1]
		if last.PC == r.PC {
			rows[n-1] = r
			return rows
		}
		r2 := r
		r2.PC = last.PC
		if r2 == last {
			return rows
		}
	}
	return append(rows, r)
}
