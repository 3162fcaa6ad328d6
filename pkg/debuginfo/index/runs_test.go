package index

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortedRunsOrdersAsASort: the run order equals a full sort, for sequences added out of
// order (disjoint); interleaved ones (overlapping) are either in runs that equal the sort or
// reported as needing one; either way the built index answers as the sorted rows do.
func TestSortedRunsOrdersAsASort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name    string
		overlap bool
	}{{"disjoint sequences", false}, {"overlapping sequences", true}} {
		t.Run(tc.name, func(t *testing.T) {
			for round := 0; round < 50; round++ {
				b, twin := NewBuilder(), NewBuilder() // twin gets the same rows and is built
				files := [3]uint32{twin.String("a.c"), twin.String("b.c"), twin.String("c.c")}
				nseq := 1 + rng.IntN(30)
				starts := rng.Perm(nseq)
				for _, s := range starts {
					base := uint64(s) * 1000
					if tc.overlap {
						base = uint64(rng.IntN(nseq)) * 500
					}
					a := base
					for r := 0; r < 1+rng.IntN(20); r++ {
						file, line := uint32(rng.IntN(3)), uint32(rng.IntN(3))
						b.AddLine(a, file, line, 0)
						twin.AddLine(a, files[file], line, 0)
						a += uint64(1 + rng.IntN(20))
					}
					b.EndSequence(a)
					twin.EndSequence(a)
				}
				rows := b.lines.Join()
				want := slices.Clone(rows)
				cmpRows := func(a, b *lineRow) int {
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
				slices.SortFunc(want, func(a, b lineRow) int { return cmpRows(&a, &b) })
				// Built, the rows answer as the sorted rows do: the last row at or below an
				// address gives its line, unless it ends a sequence.
				ix, err := twin.Build()
				if err != nil {
					t.Fatal(err)
				}
				for addr := uint64(0); addr <= want[len(want)-1].addr+1; addr++ {
					k, _ := slices.BinarySearchFunc(want, addr+1, func(r lineRow, a uint64) int { return cmp.Compare(r.addr, a) })
					var wantLine []FrameRef
					if k > 0 && !want[k-1].end() {
						wantLine = []FrameRef{{File: files[want[k-1].file], Line: want[k-1].line}}
					}
					if got := ix.AppendLookupRefs(nil, addr); !slices.Equal(got, wantLine) {
						t.Fatalf("round %d, address %d: %+v, want %+v", round, addr, got, wantLine)
					}
				}
				var c chunks[lineRow]
				for _, r := range rows {
					c.Append(r)
				}
				runs := sortedRuns(&c)
				if runs == nil {
					if !tc.overlap {
						t.Fatalf("round %d: disjoint sequences reported as interleaved", round)
					}
					continue
				}
				var got []lineRow
				for _, sp := range runs {
					got = append(got, rows[sp.lo:sp.hi]...)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("round %d: run order differs from a sort", round)
				}
			}
		})
	}
}
