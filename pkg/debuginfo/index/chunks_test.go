package index

import (
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
	for _, n := range []int{0, 1, per - 1, per, per + 1, 3*per + 17} {
		var c chunks[lineRow]
		want := make([]lineRow, 0, n)
		for i := range n {
			r := lineRow{addr: uint64(i), seq: uint32(i)}
			c.Append(r)
			want = append(want, r)
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
