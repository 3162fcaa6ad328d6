package symbolize

import (
	"container/list"
	"hash/maphash"
	"sync"
	"time"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/symbolizecodec"
)

type cacheKey struct {
	mod  modKey
	addr uint64
}

// modSeed hashes module keys for the cache's index (per process: the hashes are never stored).
var modSeed = maphash.MakeSeed()

// modHash is what the cache indexes a module by; computed once per mapping of a request, it
// spares hashing three build IDs for every location.
func modHash(k modKey) uint64 { return maphash.Comparable(modSeed, k) }

// lruIndex is the cache's map key: two integers hash several times faster than a cacheKey's
// strings. Two modules with one hash share index entries; the item's full key is compared on
// every hit, so a collision costs a miss, never a wrong answer.
type lruIndex struct {
	mod, addr uint64
}

type cacheEntry struct {
	frames   []symbolizecodec.Frame
	fidelity symbolizerv1.Fidelity
	// expires, when set, is when the entry stops answering: an answer below FIDELITY_FULL may
	// improve when a better file for its binary arrives (Config.PartialAnswerTTL).
	expires time.Time
}

// lru holds the answers of the symbolizer for (binary, mapping, address), so the hot frames
// of a fleet, which every request repeats, cost one call per gateway or Collector instead of one per
// request. Only MODULE_STATUS_OK answers are kept: a missing binary may be uploaded any time.
type lru struct {
	now   func() time.Time
	mu    sync.Mutex
	max   int
	ll    *list.List
	items map[lruIndex]*list.Element
}

type lruItem struct {
	key  cacheKey
	hash uint64
	val  cacheEntry
}

func newLRU(max int) *lru {
	return &lru{now: time.Now, max: max, ll: list.New(), items: make(map[lruIndex]*list.Element)}
}

// clock is the cache's time (time.Now; a test's clock), also when it is off.
func (c *lru) clock() time.Time {
	if c == nil {
		return time.Now()
	}
	return c.now()
}

// get looks k up; h is modHash(k.mod). An expired entry is dropped and misses.
func (c *lru) get(k cacheKey, h uint64) (cacheEntry, bool) {
	if c == nil || c.max <= 0 {
		return cacheEntry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[lruIndex{h, k.addr}]
	if !ok {
		return cacheEntry{}, false
	}
	it := e.Value.(*lruItem)
	if it.key != k {
		return cacheEntry{}, false
	}
	if !it.val.expires.IsZero() && !c.now().Before(it.val.expires) {
		c.ll.Remove(e)
		delete(c.items, lruIndex{h, k.addr})
		return cacheEntry{}, false
	}
	c.ll.MoveToFront(e)
	return it.val, true
}

// put stores v for k; h is modHash(k.mod). An entry under the same index, of k or of a
// colliding module, is replaced.
func (c *lru) put(k cacheKey, h uint64, v cacheEntry) {
	if c == nil || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ix := lruIndex{h, k.addr}
	if e, ok := c.items[ix]; ok {
		it := e.Value.(*lruItem)
		it.key, it.val = k, v
		c.ll.MoveToFront(e)
		return
	}
	c.items[ix] = c.ll.PushFront(&lruItem{key: k, hash: h, val: v})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		it := old.Value.(*lruItem)
		delete(c.items, lruIndex{it.hash, it.key.addr})
	}
}

func (c *lru) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
