package index

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestChunks: rows read in place (At) and joined (Join) come back in the order added, across
// chunk boundaries, and a single chunk is joined without a copy.
func TestChunks(t *testing.T) {
	var probe chunks[lineRow]
	probe.Append(lineRow{})
	per := 1 << probe.shift
	if per*24 > chunkBytes || per*24*2 <= chunkBytes {
		t.Fatalf("%d rows of 24 bytes per chunk: not the largest power of two within %d bytes", per, chunkBytes)
	}
	tests := []struct {
		n, grow, growAt, growBy int // n rows; Grow(grow) first; Grow(growBy) after growAt rows
	}{
		{n: 0}, {n: 1}, {n: per - 1}, {n: per}, {n: per + 1}, {n: 3*per + 17},
		{n: 10, grow: 10}, {n: per + 5, grow: per + 5}, {n: 2*per + 3, grow: 100, growAt: 50, growBy: per},
		{n: 2*per + 3, growAt: per + 1, growBy: 7},
		// Grow on a first chunk at its full size, partly filled.
		{n: per + 9, growAt: per/2 + 3, growBy: 5},
	}
	for _, tt := range tests {
		n := tt.n
		var c chunks[lineRow]
		c.Grow(tt.grow)
		want := make([]lineRow, 0, n)
		for i := range n {
			if tt.growBy > 0 && i == tt.growAt {
				c.Grow(tt.growBy)
			}
			r := lineRow{addr: uint64(i), seq: uint32(i)}
			c.Append(r)
			want = append(want, r)
			if i == 0 && tt.grow == 0 && cap(c.list[0]) >= per {
				t.Fatalf("one row took a whole chunk of %d", cap(c.list[0]))
			}
		}
		for k, ch := range c.list[:max(len(c.list)-1, 0)] {
			if len(ch) != per {
				t.Fatalf("%d rows: chunk %d of %d holds %d rows, not %d", n, k, len(c.list), len(ch), per)
			}
		}
		if c.Len() != n {
			t.Fatalf("%d rows: Len = %d", n, c.Len())
		}
		for i := range n {
			if *c.At(i) != want[i] {
				t.Fatalf("%d rows: At(%d) = %+v, want %+v", n, i, *c.At(i), want[i])
			}
		}
		single := len(c.list) == 1
		var first *lineRow
		if n > 0 {
			first = c.At(0)
		}
		got := c.Join()
		if !slices.Equal(got, want) {
			t.Fatalf("%d rows: Join is not the rows added, in order", n)
		}
		if single && &got[0] != first {
			t.Errorf("%d rows: a single chunk was copied", n)
		}
		if c.Len() != 0 {
			t.Errorf("%d rows: Len after Join = %d", n, c.Len())
		}
	}
}

// TestSortByLo: the ranges come back ordered by start, every one of them, whether they
// arrive sorted, shuffled, few, many, spread over a small or a large span of addresses.
func TestSortByLo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		n      int
		span   uint64
		sorted bool
	}{
		{0, 0, false}, {1, 10, false}, {100, 1 << 20, false}, {5000, 1 << 12, true},
		{5000, 1, false}, {50000, 1 << 12, false}, {50000, 1 << 25, false}, {50000, 1 << 62, false},
	} {
		var c chunks[rangeEntry]
		var want []rangeEntry
		for i := range tc.n {
			lo := 0x400000 + rng.Uint64N(tc.span+1)
			if tc.sorted {
				lo = 0x400000 + uint64(i)*tc.span/uint64(tc.n)
			}
			r := rangeEntry{lo: lo, hi: lo + 1 + rng.Uint64N(64), node: NodeID(i), seq: uint32(i)}
			c.Append(r)
			want = append(want, r)
		}
		got := sortByLo(&c)
		if c.Len() != 0 {
			t.Errorf("n=%d span=%d: %d ranges left in the chunks", tc.n, tc.span, c.Len())
		}
		if !slices.IsSortedFunc(got, func(a, b rangeEntry) int { return cmp.Compare(a.lo, b.lo) }) {
			t.Errorf("n=%d span=%d: not sorted by start", tc.n, tc.span)
		}
		bySeq := func(a, b rangeEntry) int { return cmp.Compare(a.seq, b.seq) }
		got = slices.Clone(got)
		slices.SortFunc(got, bySeq)
		if !slices.Equal(got, want) {
			t.Errorf("n=%d span=%d: the ranges are not those added", tc.n, tc.span)
		}
	}
}
