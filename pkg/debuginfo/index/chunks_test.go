package index

import (
	"slices"
	"testing"
)

// TestChunks: rows come back in the order added, across chunk boundaries and Grow's larger
// chunks, and a single chunk is returned without a copy.
func TestChunks(t *testing.T) {
	per := chunkBytes / 24 // rows of lineRow's size per chunk
	tests := []struct {
		name  string
		n     int
		grow  int // Grow(grow) before adding, 0 for none
		after int // Grow(per) again after this many rows, 0 for never
	}{
		{"empty", 0, 0, 0},
		{"one row", 1, 0, 0},
		{"one chunk", per, 0, 0},
		{"a chunk and a row", per + 1, 0, 0},
		{"several chunks", 3*per + 17, 0, 0},
		{"grown to fit", 2*per + 5, 2*per + 5, 0},
		{"grown too little", 2*per + 5, per / 2, 0},
		{"grown midway", 2*per + 5, 0, per / 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c chunks[lineRow]
			c.Grow(tt.grow)
			want := make([]lineRow, 0, tt.n)
			for i := range tt.n {
				if tt.after > 0 && i == tt.after {
					c.Grow(per)
				}
				r := lineRow{addr: uint64(i), seq: uint32(i)}
				c.Append(r)
				want = append(want, r)
			}
			if c.Len() != tt.n {
				t.Fatalf("Len = %d, want %d", c.Len(), tt.n)
			}
			single := len(c.full) == 0
			last := c.last
			got := c.Join()
			if !slices.Equal(got, want) {
				t.Fatalf("Join: %d rows, not the %d added in order", len(got), len(want))
			}
			if single && tt.n > 0 && &got[0] != &last[0] {
				t.Error("a single chunk was copied")
			}
			if c.Len() != 0 {
				t.Errorf("Len after Join = %d", c.Len())
			}
			if tt.grow >= tt.n && tt.after == 0 && !single {
				t.Errorf("Grow(%d) before %d rows left %d chunks", tt.grow, tt.n, len(c.full)+1)
			}
		})
	}
}
