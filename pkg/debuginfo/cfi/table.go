package cfi

import (
	"slices"
)

// assemble orders the FDEs by start address and lays their rows out as one table: an FDE
// runs until its end or the next FDE's start, whichever comes first, and a CFAUndefined
// row marks where coverage stops. Equal consecutive rules are merged. It returns the rows
// and the number of FDEs that kept any.
func (p *parser) assemble() ([]Row, int) {
	fdes := p.fdes
	sorted := true
	for i := 1; i < len(fdes); i++ {
		if fdes[i].start < fdes[i-1].start {
			sorted = false
			break
		}
	}
	if !sorted {
		slices.SortFunc(fdes, func(a, b fde) int {
			if a.start != b.start {
				if a.start < b.start {
					return -1
				}
				return 1
			}
			return int(a.order - b.order)
		})
	}
	out := make([]Row, 0, len(p.rows)+len(fdes))
	add := func(r Row) {
		if n := len(out); n > 0 {
			if out[n-1].PC == r.PC {
				// A row closing the previous FDE where the next one starts.
				out[n-1] = r
				if n > 1 && out[n-2].sameRules(r) {
					out = out[:n-1]
				}
				return
			}
			if out[n-1].sameRules(r) {
				return
			}
		}
		out = append(out, r)
	}
	kept := 0
	for i := 0; i < len(fdes); i++ {
		f := fdes[i]
		if i > 0 && f.start == fdes[i-1].start {
			continue // the first in the section with this start wins
		}
		end := f.end
		for j := i + 1; j < len(fdes); j++ {
			if fdes[j].start != f.start {
				end = min(end, fdes[j].start)
				break
			}
		}
		kept++
		for _, r := range p.rows[f.rows[0]:f.rows[1]] {
			if r.PC >= end {
				break
			}
			add(r)
		}
		add(Row{PC: end, CFA: CFAUndefined})
	}
	return out, kept
}
