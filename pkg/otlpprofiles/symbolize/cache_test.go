package symbolize

import (
	"slices"
	"testing"
	"unsafe"

	"github.com/profsym/profsym/pkg/frametable"
)

func TestLRU(t *testing.T) {
	a := modKey{gnu: "aa", start: 0x1000, limit: 0x2000}
	b := modKey{gnu: "bb", start: 0x1000, limit: 0x2000}
	ea := cacheEntry{frames: []frametable.Frame{{Function: "in a"}}}
	eb := cacheEntry{frames: []frametable.Frame{{Function: "in b"}}}
	for _, c := range []struct {
		name   string
		ha, hb uint64
	}{
		{"distinct hashes", modHash(a), modHash(b)},
		// Two modules whose hashes collide share index entries: each must still get its own
		// answer or a miss, never the other's frames.
		{"colliding hashes", 7, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLRU(2)
			l.put(cacheKey{a, 0x1010}, c.ha, ea)
			if e, ok := l.get(cacheKey{a, 0x1010}, c.ha); !ok || e.frames[0].Function != "in a" {
				t.Fatalf("a: %v %v", e, ok)
			}
			if e, ok := l.get(cacheKey{b, 0x1010}, c.hb); ok {
				t.Fatalf("b answered with %v before it was put", e)
			}
			l.put(cacheKey{b, 0x1010}, c.hb, eb)
			if e, ok := l.get(cacheKey{b, 0x1010}, c.hb); !ok || e.frames[0].Function != "in b" {
				t.Fatalf("b: %v %v", e, ok)
			}
			if e, ok := l.get(cacheKey{a, 0x1010}, c.ha); ok && e.frames[0].Function != "in a" {
				t.Fatalf("a answered with b's frames %v", e)
			}
			// Eviction keeps the index and the list in step: max 2 entries.
			l.put(cacheKey{a, 0x1020}, c.ha, ea)
			l.put(cacheKey{a, 0x1030}, c.ha, ea)
			if n, m := l.len(), len(l.items); n != 2 || m != 2 {
				t.Fatalf("%d entries, %d index entries; want 2 and 2", n, m)
			}
			if _, ok := l.get(cacheKey{a, 0x1030}, c.ha); !ok {
				t.Fatal("the newest entry was evicted")
			}
		})
	}
}

// TestOwnerCopies: frames bound for the cache share no memory with the answer they came from,
// and a string repeated across frames is copied once.
func TestOwnerCopies(t *testing.T) {
	// As decoded: the frames of all addresses in one array, every string in one allocation.
	all := "mainsrc/a.c_ZN1a1bEv"
	answer := []frametable.Frame{
		{Function: all[:4], File: all[4:11], Line: 3},
		{Function: all[11:], LinkageName: all[11:], File: all[4:11], Line: 9, Column: 2, StartLine: 1},
		{Function: all[:4], File: all[4:11], Line: 4},
	}
	inAnswer := func(s string) bool {
		p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(all)))
		return p >= lo && p < lo+uintptr(len(all))
	}
	o := owner{strs: map[string]string{}}
	first, second := o.frames(answer[:2]), o.frames(answer[2:])
	if !slices.Equal(first, answer[:2]) || !slices.Equal(second, answer[2:]) {
		t.Fatalf("copies differ: %v %v", first, second)
	}
	if cap(first) != 2 || cap(second) != 1 || &first[0] == &answer[0] {
		t.Fatal("frames still in the answer's array")
	}
	for _, f := range append(first, second...) {
		for _, s := range []string{f.Function, f.LinkageName, f.File} {
			if s != "" && inAnswer(s) {
				t.Fatalf("%q still points into the answer", s)
			}
		}
	}
	if unsafe.StringData(first[0].File) != unsafe.StringData(second[0].File) || unsafe.StringData(first[0].Function) != unsafe.StringData(second[0].Function) {
		t.Fatal("a repeated string was copied more than once")
	}
	if o.frames(nil) != nil {
		t.Fatal("no frames should stay nil")
	}
}
