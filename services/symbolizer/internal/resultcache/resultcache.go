// Package resultcache caches symbolization results per (file, ELF virtual address): a small
// in-process LRU in front of Redis. Redis is optional and never on the failure path: a call
// that errors or times out counts as a miss, is logged and counted, and Redis is left alone
// for a short back-off so an outage costs one timeout per back-off period, not one per call.
package resultcache

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Key names one cached result. BuildID is the ID the file was found under and Tag a short
// prefix of the file's SHA-256, so a better file uploaded later under the same build ID
// does not inherit the old file's results.
type Key struct {
	BuildID string
	Tag     string
	Addr    uint64
}

func (k Key) redisKey() string {
	return "psym:v1:" + k.BuildID + "@" + k.Tag + ":" + strconv.FormatUint(k.Addr, 16)
}

// Metrics receives cache outcomes.
type Metrics interface {
	CacheResult(layer string, hits, misses int)
	RedisError(op string)
}

// Options configures a Cache.
type Options struct {
	Redis       redis.UniversalClient // nil: no Redis
	TTL         time.Duration         // Redis TTL of positive entries
	NegativeTTL time.Duration         // Redis TTL of empty results
	Timeout     time.Duration         // per Redis read
	// WriteTimeout bounds one pipelined write of a batch; writes run in the background.
	WriteTimeout time.Duration
	// WriteQueue is how many batches may wait to be written; more are dropped (counted as
	// Redis errors of op "queue").
	WriteQueue int
	Backoff    time.Duration // how long Redis is skipped after a failure
	LocalSize  int           // entries in the in-process LRU; 0 disables it
	Metrics    Metrics
	Logger     *slog.Logger
}

// Cache is the two-layer result cache.
type Cache struct {
	opt       Options
	cluster   bool
	downUntil atomic.Int64 // unix nanos; Redis is skipped until then

	mu    sync.Mutex
	ll    *list.List
	items map[Key]*list.Element

	writes    chan writeJob
	closeOnce sync.Once
	done      chan struct{}
}

type writeJob struct {
	keys []Key
	vals []string
	sync chan struct{} // closed when written, for Flush
}

type localItem struct {
	k Key
	v string
}

// New returns a cache.
func New(opt Options) *Cache {
	if opt.TTL == 0 {
		opt.TTL = 24 * time.Hour
	}
	if opt.NegativeTTL == 0 {
		opt.NegativeTTL = time.Hour
	}
	if opt.Timeout == 0 {
		opt.Timeout = 250 * time.Millisecond
	}
	if opt.Backoff == 0 {
		opt.Backoff = time.Second
	}
	if opt.WriteTimeout == 0 {
		opt.WriteTimeout = max(2*time.Second, opt.Timeout)
	}
	if opt.WriteQueue == 0 {
		opt.WriteQueue = 16
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	c := &Cache{opt: opt, ll: list.New(), items: map[Key]*list.Element{}, done: make(chan struct{})}
	if _, ok := opt.Redis.(*redis.ClusterClient); ok {
		c.cluster = true
	}
	if opt.Redis != nil {
		c.writes = make(chan writeJob, opt.WriteQueue)
		go c.writer()
	}
	return c
}

// writer writes queued batches to Redis one at a time, so writes never delay a response.
func (c *Cache) writer() {
	defer close(c.done)
	for j := range c.writes {
		if j.keys != nil {
			c.putRedis(context.Background(), j.keys, j.vals)
		}
		if j.sync != nil {
			close(j.sync)
		}
	}
}

// PutAsync stores results in memory now and queues them for Redis. Keys the in-process
// layer already holds with the same value were written recently and are not sent again, so a
// steady stream of requests answered by a resident index does not rewrite Redis each time.
func (c *Cache) PutAsync(keys []Key, vals []string) {
	if len(keys) == 0 {
		return
	}
	if c.opt.LocalSize > 0 {
		var newKeys []Key
		var newVals []string
		c.mu.Lock()
		for i, k := range keys {
			if el, ok := c.items[k]; ok && el.Value.(*localItem).v == vals[i] {
				c.ll.MoveToFront(el)
				continue
			}
			c.addLocal(k, vals[i])
			newKeys, newVals = append(newKeys, k), append(newVals, vals[i])
		}
		c.mu.Unlock()
		keys, vals = newKeys, newVals
	}
	if len(keys) == 0 || c.writes == nil || !c.redisUp() {
		return
	}
	select {
	case c.writes <- writeJob{keys: keys, vals: vals}:
	default:
		c.opt.Logger.Warn("redis write queue full; dropping a batch of results", "keys", len(keys))
		if c.opt.Metrics != nil {
			c.opt.Metrics.RedisError("queue")
		}
	}
}

// Flush waits until the batches queued so far are written (or ctx ends).
func (c *Cache) Flush(ctx context.Context) {
	if c.writes == nil {
		return
	}
	j := writeJob{sync: make(chan struct{})}
	select {
	case c.writes <- j:
	case <-ctx.Done():
		return
	}
	select {
	case <-j.sync:
	case <-ctx.Done():
	}
}

// Close stops the background writer after the queued batches are written.
func (c *Cache) Close() {
	if c.writes == nil {
		return
	}
	c.closeOnce.Do(func() {
		close(c.writes)
		<-c.done
	})
}

// Get sets out[i] to the cached value of keys[i] (see EncodeLocation) and found[i] for every
// key found; out and found must have len(keys). An empty value is a cached negative result
// (an address that resolves to nothing).
func (c *Cache) Get(ctx context.Context, keys []Key, out []string, found []bool) {
	var missIdx []int
	hits := 0
	if c.opt.LocalSize > 0 {
		c.mu.Lock()
		for i, k := range keys {
			if el, ok := c.items[k]; ok {
				c.ll.MoveToFront(el)
				out[i], found[i] = el.Value.(*localItem).v, true
				hits++
			} else {
				missIdx = append(missIdx, i)
			}
		}
		c.mu.Unlock()
		c.metric("memory", hits, len(missIdx))
	} else {
		missIdx = make([]int, len(keys))
		for i := range keys {
			missIdx[i] = i
		}
	}
	if len(missIdx) == 0 || !c.redisUp() {
		return
	}
	// Large batches are fetched and decoded in parallel chunks: decoding is most of the
	// cost of a cache hit, and the chunks' round trips overlap.
	chunks := 1
	if len(missIdx) >= 2*minChunk {
		chunks = min(maxChunks, len(missIdx)/minChunk)
	}
	var (
		wg     sync.WaitGroup
		rhits  = make([]int, chunks)
		errs   = make([]error, chunks)
		per    = (len(missIdx) + chunks - 1) / chunks
		failed atomic.Bool
	)
	for ch := 0; ch < chunks; ch++ {
		part := missIdx[ch*per : min(len(missIdx), (ch+1)*per)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rhits[ch], errs[ch] = c.getChunk(ctx, keys, part, out, found)
			if errs[ch] != nil {
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		c.redisFailed("get", errors.Join(errs...))
	}
	rh := 0
	for _, h := range rhits {
		rh += h
	}
	c.metric("redis", rh, len(missIdx)-rh)
	if rh > 0 && c.opt.LocalSize > 0 {
		c.mu.Lock()
		for _, i := range missIdx {
			if found[i] {
				c.addLocal(keys[i], out[i])
			}
		}
		c.mu.Unlock()
	}
}

// redisKeys builds the Redis keys of keys[i] for i in idx as substrings of one string: one
// allocation for the whole batch instead of one per key.
func redisKeys(keys []Key, idx []int) []string {
	size := 0
	if len(idx) > 0 {
		k := keys[idx[0]]
		size = len(idx) * (len("psym:v1:@:") + len(k.BuildID) + len(k.Tag) + 16)
	}
	buf := make([]byte, 0, size)
	ends := make([]int, len(idx))
	for j, i := range idx {
		k := keys[i]
		buf = append(buf, "psym:v1:"...)
		buf = append(buf, k.BuildID...)
		buf = append(buf, '@')
		buf = append(buf, k.Tag...)
		buf = append(buf, ':')
		buf = strconv.AppendUint(buf, k.Addr, 16)
		ends[j] = len(buf)
	}
	all := string(buf)
	out := make([]string, len(idx))
	start := 0
	for j, end := range ends {
		out[j] = all[start:end]
		start = end
	}
	return out
}

const (
	minChunk  = 2500
	maxChunks = 4
)

// getChunk fetches keys[i] for i in idx from Redis into out[i], fills the in-process layer,
// and returns the number of hits.
func (c *Cache) getChunk(ctx context.Context, keys []Key, idx []int, out []string, found []bool) (int, error) {
	rkeys := redisKeys(keys, idx)
	vals, ok, err := c.mget(ctx, rkeys)
	if err != nil {
		return 0, err
	}
	rh := 0
	for j, v := range vals {
		if !ok[j] {
			continue
		}
		// Values go into responses as they are: one that is not a well-formed Location
		// would break the whole response, so each is checked (without decoding it).
		if err := ValidateLocation(v); err != nil {
			c.opt.Logger.Warn("unusable result cache entry", "key", rkeys[j], "err", err)
			continue
		}
		out[idx[j]], found[idx[j]] = v, true
		rh++
	}
	return rh, nil
}

func (c *Cache) mget(ctx context.Context, keys []string) ([]string, []bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	out := make([]string, len(keys))
	found := make([]bool, len(keys))
	if !c.cluster {
		vals, err := c.opt.Redis.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, nil, err
		}
		for i, v := range vals {
			out[i], found[i] = v.(string)
		}
		return out, found, nil
	}
	// Cluster: keys of one batch live in many slots, which MGET refuses; a pipeline of GETs
	// is split by slot by the client.
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := c.opt.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	for i, cmd := range cmds {
		if v, err := cmd.Result(); err == nil {
			out[i], found[i] = v, true
		}
	}
	return out, found, nil
}

// Put stores results: in memory, and in Redis with one pipelined round trip before it
// returns.
func (c *Cache) Put(ctx context.Context, keys []Key, vals []string) {
	if len(keys) == 0 {
		return
	}
	c.putLocal(keys, vals)
	c.putRedis(ctx, keys, vals)
}

func (c *Cache) putLocal(keys []Key, vals []string) {
	if c.opt.LocalSize > 0 {
		c.mu.Lock()
		for i, k := range keys {
			c.addLocal(k, vals[i])
		}
		c.mu.Unlock()
	}
}

func (c *Cache) putRedis(ctx context.Context, keys []Key, vals []string) {
	if !c.redisUp() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.opt.WriteTimeout)
	defer cancel()
	_, err := c.opt.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			ttl := c.opt.TTL
			if vals[i] == "" {
				ttl = c.opt.NegativeTTL
			}
			p.Set(ctx, k.redisKey(), vals[i], ttl)
		}
		return nil
	})
	if err != nil {
		c.redisFailed("set", err)
	}
}

func (c *Cache) addLocal(k Key, v string) {
	if el, ok := c.items[k]; ok {
		el.Value.(*localItem).v = v
		c.ll.MoveToFront(el)
		return
	}
	c.items[k] = c.ll.PushFront(&localItem{k, v})
	for c.ll.Len() > c.opt.LocalSize {
		el := c.ll.Back()
		c.ll.Remove(el)
		delete(c.items, el.Value.(*localItem).k)
	}
}

func (c *Cache) redisUp() bool {
	return c.opt.Redis != nil && time.Now().UnixNano() >= c.downUntil.Load()
}

func (c *Cache) redisFailed(op string, err error) {
	c.downUntil.Store(time.Now().Add(c.opt.Backoff).UnixNano())
	c.opt.Logger.Warn("redis result cache unavailable; continuing without it", "op", op, "backoff", c.opt.Backoff, "err", err)
	if c.opt.Metrics != nil {
		c.opt.Metrics.RedisError(op)
	}
}

func (c *Cache) metric(layer string, hits, misses int) {
	if c.opt.Metrics != nil {
		c.opt.Metrics.CacheResult(layer, hits, misses)
	}
}

// Ping reports whether Redis answers (nil when Redis is not configured).
func (c *Cache) Ping(ctx context.Context) error {
	if c.opt.Redis == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	return c.opt.Redis.Ping(ctx).Err()
}

// NewRedisClient builds a UniversalClient from a URL: redis:// or rediss:// for one node,
// redis+cluster:// (or several addrs via ParseClusterURL syntax) for a cluster, and
// redis+sentinel://.../?master_name=M for Sentinel failover.
func NewRedisClient(rawURL string) (redis.UniversalClient, error) {
	return newRedisClient(rawURL)
}
