package symbolizeapi

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestDistinct(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := func(n int, lo, span uint64) []uint64 {
		a := make([]uint64, n)
		for i := range a {
			a[i] = lo + r.Uint64N(span)
		}
		return a
	}
	for _, tc := range []struct {
		name  string
		addrs []uint64
		skip  func(i int) bool // addresses left out (!ok)
	}{
		{"empty", nil, nil},
		{"none ok", []uint64{1, 2, 3}, func(int) bool { return true }},
		{"one", []uint64{0x401000}, nil},
		{"duplicates", []uint64{5, 3, 5, 5, 3, 9, 0}, nil},
		{"some left out", []uint64{7, 1, 7, 2, 9}, func(i int) bool { return i%2 == 1 }},
		{"every byte differs", []uint64{0x0102030405060708, 0x0807060504030201, 0x0102030405060709, 0x0102030405060708}, nil},
		// A span too wide to pack with the positions: the comparison sort.
		{"full range", []uint64{^uint64(0), 0, 1 << 63, ^uint64(0), 42}, nil},
		{"large batch", random(10000, 0x400000, 45<<20), nil},
		{"large batch with repeats", random(20000, 0x400000, 5000), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := make([]bool, len(tc.addrs))
			var want []uint64
			for i, a := range tc.addrs {
				ok[i] = tc.skip == nil || !tc.skip(i)
				if ok[i] {
					want = append(want, a)
				}
			}
			slices.Sort(want)
			want = slices.Compact(want)
			slot := make([]int, len(tc.addrs))
			for i := range slot {
				slot[i] = -1
			}
			got := distinct(tc.addrs, ok, slot)
			if !slices.Equal(got, want) {
				t.Fatalf("distinct = %x, want %x", got, want)
			}
			for i, a := range tc.addrs {
				switch {
				case !ok[i] && slot[i] != -1:
					t.Fatalf("address %d is left out but got slot %d", i, slot[i])
				case ok[i] && (slot[i] < 0 || slot[i] >= len(got) || got[slot[i]] != a):
					t.Fatalf("address %d (%#x): slot %d", i, a, slot[i])
				}
			}
		})
	}
}

func TestRadixSort(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, width := range []int{1, 7, 8, 9, 40, 63, 64} {
		for _, n := range []int{0, 1, 2, 100, 5000} {
			xs := make([]uint64, n)
			for i := range xs {
				xs[i] = r.Uint64()
				if width < 64 {
					xs[i] &= 1<<width - 1
				}
			}
			want := slices.Sorted(slices.Values(xs))
			radixSort(xs, make([]uint64, n), width)
			if !slices.Equal(xs, want) {
				t.Fatalf("width %d, %d values: not sorted", width, n)
			}
		}
	}
}

func BenchmarkDistinct(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	addrs, ok, slot := make([]uint64, 10000), make([]bool, 10000), make([]int, 10000)
	for i := range addrs {
		addrs[i], ok[i] = 0x400000+r.Uint64N(45<<20), true
	}
	for b.Loop() {
		distinct(addrs, ok, slot)
	}
}
