package unwind

import "sort"

// span is a run [start, start+n) of rows in the kernel's row array.
type span struct{ start, n uint32 }

// rowAllocator hands out contiguous runs of the row array (a table is binary-searched in
// place, so its rows must be contiguous): first fit over a sorted free list, neighbours
// merged on free.
type rowAllocator struct {
	free []span // sorted by start, never adjacent
	used uint32
	size uint32
}

func newRowAllocator(size uint32) *rowAllocator {
	a := &rowAllocator{size: size}
	if size > 0 {
		a.free = []span{{0, size}}
	}
	return a
}

// alloc returns the start of a free run of n rows, or false when no run is long enough.
func (a *rowAllocator) alloc(n uint32) (uint32, bool) {
	if n == 0 {
		return 0, false
	}
	for i, f := range a.free {
		if f.n < n {
			continue
		}
		start := f.start
		if f.n == n {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = span{f.start + n, f.n - n}
		}
		a.used += n
		return start, true
	}
	return 0, false
}

// release gives a run back.
func (a *rowAllocator) release(start, n uint32) {
	if n == 0 {
		return
	}
	a.used -= n
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].start > start })
	s := span{start, n}
	// Merge with the run before and the run after when they touch.
	if i > 0 && a.free[i-1].start+a.free[i-1].n == start {
		i--
		s = span{a.free[i].start, a.free[i].n + n}
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	if i < len(a.free) && s.start+s.n == a.free[i].start {
		s.n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = s
}

// largest is the longest free run.
func (a *rowAllocator) largest() uint32 {
	var m uint32
	for _, f := range a.free {
		m = max(m, f.n)
	}
	return m
}
