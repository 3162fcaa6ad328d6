package symbolize

import (
	"container/list"
	"sync"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/frametable"
)

type cacheKey struct {
	mod  modKey
	addr uint64
}

type cacheEntry struct {
	frames   []frametable.Frame
	fidelity symbolizerv1.Fidelity
}

// lru holds the answers of the symbolizer for (binary, mapping, address), so the hot frames
// of a fleet, which every request repeats, cost one call per gateway instead of one per
// request. Only MODULE_STATUS_OK answers are kept: a missing binary may be uploaded any time.
type lru struct {
	mu    sync.Mutex
	max   int
	ll    *list.List
	items map[cacheKey]*list.Element
}

type lruItem struct {
	key cacheKey
	val cacheEntry
}

func newLRU(max int) *lru {
	return &lru{max: max, ll: list.New(), items: make(map[cacheKey]*list.Element)}
}

func (c *lru) get(k cacheKey) (cacheEntry, bool) {
	if c == nil || c.max <= 0 {
		return cacheEntry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[k]
	if !ok {
		return cacheEntry{}, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(*lruItem).val, true
}

func (c *lru) put(k cacheKey, v cacheEntry) {
	if c == nil || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		e.Value.(*lruItem).val = v
		c.ll.MoveToFront(e)
		return
	}
	c.items[k] = c.ll.PushFront(&lruItem{key: k, val: v})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*lruItem).key)
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
