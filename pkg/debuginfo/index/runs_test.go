package index

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortedRunsOrdersAsASort: the run order equals a full sort, for sequences added out of
// order (disjoint) and for interleaved ones (overlapping: the rows are sorted instead).
func TestSortedRunsOrdersAsASort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name    string
		overlap bool
	}{{"disjoint sequences", false}, {"overlapping sequences", true}} {
		t.Run(tc.name, func(t *testing.T) {
			for round := 0; round < 50; round++ {
				b := NewBuilder()
				nseq := 1 + rng.IntN(30)
				starts := rng.Perm(nseq)
				for _, s := range starts {
					base := uint64(s) * 1000
					if tc.overlap {
						base = uint64(rng.IntN(nseq)) * 500
					}
					a := base
					for r := 0; r < 1+rng.IntN(20); r++ {
						b.AddLine(a, uint32(rng.IntN(3)), uint32(rng.IntN(3)), 0)
						a += uint64(1 + rng.IntN(20))
					}
					b.EndSequence(a)
				}
				rows := b.lines.Join()
				want := slices.Clone(rows)
				cmpRows := func(a, b lineRow) int {
					switch {
					case a.addr != b.addr:
						if a.addr < b.addr {
							return -1
						}
						return 1
					case a.end() != b.end():
						if a.end() {
							return -1
						}
						return 1
					case a.seq < b.seq:
						return -1
					case a.seq > b.seq:
						return 1
					}
					return 0
				}
				slices.SortFunc(want, cmpRows)
				var got []lineRow
				for _, sp := range sortedRuns(rows, cmpRows) {
					got = append(got, rows[sp.lo:sp.hi]...)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("round %d: run order differs from a sort", round)
				}
			}
		})
	}
}
