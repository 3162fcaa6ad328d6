package symbolize

import (
	"testing"

	"github.com/profsym/profsym/pkg/symbolizecodec"
)

func TestLRU(t *testing.T) {
	a := modKey{gnu: "aa", start: 0x1000, limit: 0x2000}
	b := modKey{gnu: "bb", start: 0x1000, limit: 0x2000}
	ea := cacheEntry{frames: []symbolizecodec.Frame{{Function: "in a"}}}
	eb := cacheEntry{frames: []symbolizecodec.Frame{{Function: "in b"}}}
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
