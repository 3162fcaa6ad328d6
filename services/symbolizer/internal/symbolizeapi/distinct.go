package symbolizeapi

import (
	"cmp"
	"math/bits"
	"slices"
)

// distinct returns the distinct values of addrs[i] for every i with ok[i], in ascending order,
// and sets slot[i] to the index in that list of addrs[i] (slot[i] is left alone where !ok[i]).
//
// Ascending order is what every later step wants: the result cache keeps neighbouring
// addresses together (a sorted batch reads its buckets one after another, without grouping
// them first), and an index answers neighbours from neighbouring memory. Sorting also finds the
// duplicates, for less than a map of 10,000 entries costs.
func distinct(addrs []uint64, ok []bool, slot []int) []uint64 {
	lo, hi, n := ^uint64(0), uint64(0), 0
	for i, a := range addrs {
		if ok[i] {
			lo, hi, n = min(lo, a), max(hi, a), n+1
		}
	}
	if n == 0 {
		return nil
	}
	// Usually the addresses of a module span a few hundred MB at most, so an address's offset
	// from the lowest and its position fit together in one integer, and the integers sort
	// without a comparison function.
	posBits := bits.Len(uint(len(addrs)))
	if bits.Len64(hi-lo)+posBits <= 64 {
		packed := make([]uint64, 0, n)
		for i, a := range addrs {
			if ok[i] {
				packed = append(packed, (a-lo)<<posBits|uint64(i))
			}
		}
		radixSort(packed, make([]uint64, len(packed)), bits.Len64(hi-lo)+posBits)
		out := make([]uint64, 0, n)
		mask := uint64(1)<<posBits - 1
		for _, p := range packed {
			a := p>>posBits + lo
			if len(out) == 0 || out[len(out)-1] != a {
				out = append(out, a)
			}
			slot[p&mask] = len(out) - 1
		}
		return out
	}
	type pos struct {
		a uint64
		i int
	}
	ps := make([]pos, 0, n)
	for i, a := range addrs {
		if ok[i] {
			ps = append(ps, pos{a, i})
		}
	}
	slices.SortFunc(ps, func(x, y pos) int { return cmp.Compare(x.a, y.a) })
	out := make([]uint64, 0, n)
	for _, p := range ps {
		if len(out) == 0 || out[len(out)-1] != p.a {
			out = append(out, p.a)
		}
		slot[p.i] = len(out) - 1
	}
	return out
}

// radixSort sorts xs, whose values are below 1<<width, using tmp (of len(xs)) as scratch: a
// byte at a time from the lowest, which for the 40-odd bits of a batch of addresses is twice
// as fast as a comparison sort.
func radixSort(xs, tmp []uint64, width int) {
	if len(xs) < 2 {
		return
	}
	src, dst := xs, tmp
	for shift := 0; shift < width; shift += 8 {
		var count [256]int
		for _, x := range src {
			count[byte(x>>shift)]++
		}
		if count[byte(src[0]>>shift)] == len(src) {
			continue // every value has the same byte here: nothing to move
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for _, x := range src {
			d := byte(x >> shift)
			dst[count[d]] = x
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &xs[0] {
		copy(xs, src)
	}
}
