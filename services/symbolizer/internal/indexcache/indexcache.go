// Package indexcache keeps loaded symbolization indexes in memory, bounded by their size in
// bytes, and makes concurrent requests for one file share a single load or build.
package indexcache

import (
	"container/list"
	"context"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// Entry is a loaded index with the PT_LOAD segments that normalize addresses for it, or,
// in a cache of string tables, an index's string table alone (Index nil).
type Entry struct {
	Index   *index.Index
	Strings *index.StringTable
	Loads   []addrmap.Load
	Bytes   int64
}

// Loader produces an entry on a miss (from the stored index or by building it).
type Loader func(ctx context.Context) (*Entry, error)

// Cache is an LRU of entries keyed by file content (SHA-256), bounded by bytes.
type Cache struct {
	max int64

	mu    sync.Mutex
	used  int64
	ll    *list.List
	items map[string]*list.Element
	sf    singleflight.Group

	// OnEvict is told about evictions (metrics).
	OnEvict func(bytes int64)

	// superseded holds what an entry of this cache makes redundant (see Supersede).
	superseded *Cache
}

type item struct {
	key string
	e   *Entry
}

// New returns a cache holding at most maxBytes of indexes. An index larger than the whole
// cache is returned to its caller but not kept.
func New(maxBytes int64) *Cache {
	return &Cache{max: maxBytes, ll: list.New(), items: map[string]*list.Element{}}
}

// Get returns the cached entry for key, or nil.
func (c *Cache) Get(key string) *Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		return el.Value.(*item).e
	}
	return nil
}

// GetOrLoad returns the entry for key, running load once for all concurrent callers on a
// miss. hit reports whether the entry came from memory; shared whether this caller waited
// for another's load.
func (c *Cache) GetOrLoad(ctx context.Context, key string, load Loader) (e *Entry, hit bool, err error) {
	if e := c.Get(key); e != nil {
		return e, true, nil
	}
	ch := c.sf.DoChan(key, func() (any, error) {
		if e := c.Get(key); e != nil {
			return e, nil
		}
		// The load outlives any one caller's cancellation: others may be waiting for it.
		e, err := load(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		c.Add(key, e)
		return e, nil
	})
	select {
	case <-ctx.Done():
		return nil, false, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return nil, false, r.Err
		}
		return r.Val.(*Entry), false, nil
	}
}

// Supersede makes every entry kept in c remove the entry of the same key from other: a cache
// of indexes supersedes the cache of string tables, since an index held whole holds its
// string table (keeping both would hold that table twice).
func (c *Cache) Supersede(other *Cache) {
	c.mu.Lock()
	c.superseded = other
	c.mu.Unlock()
}

// Add inserts an entry, evicting the least recently used ones to make room. An entry larger
// than the whole cache is not kept (and supersedes nothing).
func (c *Cache) Add(key string, e *Entry) {
	if e.Bytes > c.max {
		return
	}
	c.mu.Lock()
	other := c.superseded
	c.add(key, e)
	c.mu.Unlock()
	if other != nil {
		other.Remove(key)
	}
}

// add is Add with c.mu held.
func (c *Cache) add(key string, e *Entry) {
	if el, ok := c.items[key]; ok {
		c.used -= el.Value.(*item).e.Bytes
		el.Value.(*item).e = e
		c.used += e.Bytes
		c.ll.MoveToFront(el)
	} else {
		c.items[key] = c.ll.PushFront(&item{key, e})
		c.used += e.Bytes
	}
	for c.used > c.max {
		el := c.ll.Back()
		it := el.Value.(*item)
		c.ll.Remove(el)
		delete(c.items, it.key)
		c.used -= it.e.Bytes
		if c.OnEvict != nil {
			c.OnEvict(it.e.Bytes)
		}
	}
}

// Remove drops key.
func (c *Cache) Remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.used -= el.Value.(*item).e.Bytes
		c.ll.Remove(el)
		delete(c.items, key)
	}
}

// Used returns the bytes held and the number of entries.
func (c *Cache) Used() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used, c.ll.Len()
}
