package cfi

import (
	"math/bits"
	"slices"
)

// assemble runs the FDEs' programs in address order into p.rows, as one table: an FDE runs
// until its end or the next FDE's start, whichever comes first, and a CFAUndefined row
// marks where coverage stops. Running in address order writes each row once, in its place,
// with no per-FDE buffer to copy from. It returns the number of FDEs that kept rows.
//
// An FDE whose program turns out malformed is skipped (its rows are taken back), but it
// still ends an earlier FDE that overlaps it: overlaps are rare, and the earlier FDE's rows
// past that point have not been computed.
func (p *parser) assemble() int {
	fdes := p.fdes
	if !slices.IsSortedFunc(fdes, compareFDE) {
		p.sortFDEs()
		fdes = p.fdes
	}
	// GCC's output has one row per 3.3 (libc) to 3.7 (python3) bytes of program, closing
	// rows aside; one per 4 bytes plus two per FDE leaves a little room, and where it does
	// not, append grows the slice once.
	p.rows = make([]Row, 0, p.insnBytes/4+2*len(fdes))
	kept := 0
	for i := 0; i < len(fdes); i++ {
		f := &fdes[i]
		if i > 0 && f.start == fdes[i-1].start && fdes[i-1].cie >= 0 {
			continue // the first in the section with this start wins
		}
		end := f.end
		for j := i + 1; j < len(fdes); j++ {
			if fdes[j].start != f.start {
				end = min(end, fdes[j].start)
				break
			}
		}
		n := len(p.rows)
		var last Row
		if n > 0 {
			last = p.rows[n-1]
		}
		if err := p.run(f, end); err != nil {
			// Take the rows back, and the closing row the first of them may have
			// replaced.
			p.rows = p.rows[:n]
			if n > 0 {
				p.rows[n-1] = last
			}
			p.skip(int(f.off), err)
			// A later FDE with the same start may take its place.
			f.cie = -1
			continue
		}
		kept++
		p.add(Row{PC: end, CFA: CFAUndefined})
	}
	// The table may live as long as its binary runs: give back a large unused tail.
	if cap(p.rows)-len(p.rows) > len(p.rows)/4 {
		p.rows = slices.Clone(p.rows)
	}
	return kept
}

// sortFDEs sorts the FDEs by start, then section order, and moves each FDE once, in place.
// A linker's hot/cold splitting leaves python3's 10,000 FDEs with a descent every third
// entry, and sorting the 32-byte FDEs with a comparison function cost more than running all
// their programs. So it sorts plain integers where it can: the start shifted left with the
// FDE's index in the low bits, which orders by start, then section order, with the native
// comparison. Addresses of real binaries leave the bits free; other inputs sort keys of
// start and index instead.
func (p *parser) sortFDEs() {
	fdes := p.fdes
	n := len(fdes)
	idxBits := bits.Len(uint(n))
	var maxStart uint64
	for i := range fdes {
		maxStart = max(maxStart, fdes[i].start)
	}
	// perm[j] is the index before sorting of the FDE that goes to j.
	perm := make([]uint64, n)
	if bits.Len64(maxStart)+idxBits <= 64 {
		for i := range fdes {
			perm[i] = fdes[i].start<<idxBits | uint64(i)
		}
		slices.Sort(perm)
		mask := uint64(1)<<idxBits - 1
		for j := range perm {
			perm[j] &= mask
		}
	} else {
		type key struct {
			start uint64
			i     int
		}
		keys := make([]key, n)
		for i := range fdes {
			keys[i] = key{fdes[i].start, i}
		}
		slices.SortFunc(keys, func(a, b key) int {
			if a.start != b.start {
				if a.start < b.start {
					return -1
				}
				return 1
			}
			return a.i - b.i
		})
		for j := range keys {
			perm[j] = uint64(keys[j].i)
		}
	}
	// Apply the permutation cycle by cycle; the top bit marks the places already filled
	// (indexes are far below it).
	const done = 1 << 63
	for i := range perm {
		if perm[i]&done != 0 || perm[i] == uint64(i) {
			continue
		}
		tmp := fdes[i]
		j := i
		for {
			k := int(perm[j])
			perm[j] |= done
			if k == i {
				fdes[j] = tmp
				break
			}
			fdes[j] = fdes[k]
			j = k
		}
	}
}

func compareFDE(a, b fde) int {
	if a.start != b.start {
		if a.start < b.start {
			return -1
		}
		return 1
	}
	return int(a.off - b.off)
}

// add appends a row, merging it into the previous one when their rules are equal. A row at
// the PC of the previous one replaces it: that is the closing row of an FDE where the next
// one starts.
//
// It appends to p.rows in place (p.rows = append(p.rows, ...)): the compiler then stores
// only the length unless the slice grows, instead of the whole slice header with a write
// barrier on every row.
func (p *parser) add(r Row) {
	if n := len(p.rows); n > 0 {
		last := &p.rows[n-1]
		if last.PC == r.PC {
			*last = r
			if n > 1 && p.rows[n-2].sameRules(r) {
				p.rows = p.rows[:n-1]
			}
			return
		}
		if last.sameRules(r) {
			return
		}
	}
	p.rows = append(p.rows, r)
}
