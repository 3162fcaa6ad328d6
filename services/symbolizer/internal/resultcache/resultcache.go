// Package resultcache caches symbolization results per (file, ELF virtual address): a small
// in-process LRU in front of Redis. Redis is optional and never on the failure path: a call
// that errors or times out counts as a miss, is logged and counted, and Redis is left alone
// for a short back-off so an outage costs one timeout per back-off period, not one per call.
//
// Values are opaque strings to this package; the caller encodes, parses and validates them.
//
// # Redis layout
//
// Results are grouped in hashes of 1 MiB of address space each:
//
//	key:   psym:v3:<BuildID>@<Tag>:<Addr>>20 in lower-case hex>
//	field: <Addr in lower-case hex>
//	value: "=" + the cached value
//
// A tenant's keys are in its own part of Redis (tenant.Key): "tenants/<tenant>/psym:v3:...";
// the default tenant's are as above.
//
// A 10,000-address lookup then touches a few dozen Redis keys (one HMGET each, in one
// pipeline) instead of 10,000: Redis's cost per lookup is dominated by the memory latency of
// each key it visits, and a per-key TTL adds a second dictionary to visit. The "=" prefix
// tells a cached empty result (a negative result: the address resolves to nothing), stored as
// "=", from a missing field, which HMGET answers with nil and go-redis with "".
//
// The field is the whole address in hex, not a binary encoding of its offset in the bucket:
// it reads as itself in redis-cli, and binary would save at most a dozen bytes of an entry
// whose value is a few hundred, while a lookup's cost is in reaching the entry, not in
// comparing its few bytes.
//
// A hash has one TTL (Redis 7.0 has no per-field expiry): every write of a bucket sets it
// again, so a bucket lives TTL after its last write. Negative results share it: a result is
// deterministic for the file's content, which Tag names, so an empty one is as durable as
// any other.
package resultcache

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/profsym/profsym/pkg/degraded"
	"github.com/profsym/profsym/services/symbolizer/internal/tenant"
)

const (
	// keyPrefix changes with the format of the values the symbolizer keeps (v3: string IDs).
	keyPrefix = "psym:v3:"
	// bucketShift sizes a bucket: 1 MiB of address space. Measured on a 500,000-entry
	// Redis, 10,000 random addresses cost Redis 9.9 ms with >>20 buckets against 13.5 ms with
	// >>16 ones; larger buckets would make single hashes of hot binaries very large.
	bucketShift = 20
	// valuePrefix precedes every stored value, so "" from HMGET can only mean "no field".
	valuePrefix = '='
)

// Key names one cached result. BuildID is the ID the file was found under and Tag names
// everything else the value depends on: the symbolizer puts a prefix of the file's SHA-256
// there, so a better file uploaded later under the same build ID does not inherit the old
// file's results, and the tag of the string table its values refer to.
type Key struct {
	BuildID string
	Tag     string
	Addr    uint64
	// Tenant is the tenant the result is kept for ("" for the default tenant).
	Tenant string
}

// bucketKey is the Redis key of the hash that holds k.
func (k Key) bucketKey() string {
	return tenant.Key(k.Tenant, keyPrefix+k.BuildID+"@"+k.Tag+":"+strconv.FormatUint(k.Addr>>bucketShift, 16))
}

// field is the hash field of k within its bucket.
func (k Key) field() string {
	return strconv.FormatUint(k.Addr, 16)
}

// Metrics receives cache outcomes.
type Metrics interface {
	CacheResult(layer string, hits, misses int)
	RedisError(op string)
}

// Options configures a Cache.
type Options struct {
	Redis redis.UniversalClient // nil: no Redis
	// TTL is how long a bucket lives after its last write; negative results share it.
	TTL     time.Duration
	Timeout time.Duration // per Redis read
	// WriteTimeout bounds one pipelined write of a batch; writes run in the background.
	WriteTimeout time.Duration
	// WriteQueue is how many batches may wait to be written; more are dropped (counted as
	// Redis errors of op "queue").
	WriteQueue int
	Backoff    time.Duration // how long Redis is skipped after a failure
	LocalSize  int           // entries in the in-process LRU; 0 disables it
	Metrics    Metrics
	// OnDegraded, when set, hears Redis's degraded mode start (true) and end (a gauge).
	OnDegraded func(down bool)
	Logger     *slog.Logger
}

// Cache is the two-layer result cache.
type Cache struct {
	opt       Options
	downUntil atomic.Int64 // unix nanos; Redis is skipped until then
	health    *degraded.Tracker

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
	c := &Cache{opt: opt, ll: list.New(), items: map[Key]*list.Element{}, done: make(chan struct{}),
		health: degraded.New("redis", "symbolizing without the Redis result cache (answers stay right, repeated work is not saved)", time.Minute, opt.Logger)}
	if opt.OnDegraded != nil {
		c.health.OnChange(opt.OnDegraded)
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
		c.health.Fail(fmt.Errorf("write queue full: a batch of %d results not cached", len(keys)))
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

// Get sets out[i] to the cached value of keys[i] and found[i] for every key found; out and
// found must have len(keys). An empty value is a cached negative result (an address that
// resolves to nothing): found[i] is true and out[i] is "".
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
	start := time.Now()
	rh, err := c.getRedis(ctx, keys, missIdx, out, found)
	if err != nil {
		c.redisFailed("get", err)
	} else {
		c.health.OKStarted(start)
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

// getRedis looks keys[i] up for i in idx with one pipeline, and sets out[i] and found[i] for
// each hit. Splitting large batches into concurrent pipelines was measured (10,000 addresses
// in 47 buckets, 1, 2 or 4 pipelines) and made no difference beyond noise: Redis answers the
// pipeline's first HMGETs while the client still sends the last ones, so one pipeline already
// overlaps both sides.
func (c *Cache) getRedis(ctx context.Context, keys []Key, idx []int, out []string, found []bool) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	b := newBatch(keys, idx, nil)
	defer b.release()
	return c.hmget(ctx, b, out, found)
}

// hmget sends one HMGET per bucket in one pipeline. Go-redis's cluster client splits the
// pipeline by slot; all fields of one HMGET share its key, hence its slot.
func (c *Cache) hmget(ctx context.Context, b *batch, out []string, found []bool) (int, error) {
	buckets := b.buckets
	cmds := make([]*redis.StringSliceCmd, len(buckets))
	_, err := c.opt.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, bk := range buckets {
			// args[0] is the command name; the rest point into the batch's strings, so
			// passing them costs no allocation per field.
			cmds[j] = redis.NewStringSliceCmd(ctx, b.args[bk.arg:bk.arg+2+bk.n:bk.arg+2+bk.n]...)
			if err := p.Process(ctx, cmds[j]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("hmget %d buckets: %w", len(buckets), err)
	}
	hits, bad := 0, 0
	for j, bk := range buckets {
		vals := cmds[j].Val()
		if len(vals) != bk.n {
			return hits, fmt.Errorf("hmget %s: %d values for %d fields", *b.args[bk.arg+1].(*string), len(vals), bk.n)
		}
		for f, v := range vals {
			if v == "" {
				continue
			}
			if v[0] != valuePrefix {
				bad++
				continue
			}
			i := b.order[bk.first+f]
			out[i], found[i] = v[1:], true
			hits++
		}
	}
	if bad > 0 {
		c.opt.Logger.Warn("result cache entries without the value prefix; treated as misses", "entries", bad)
	}
	return hits, nil
}

// bucket is one hash of a batch: its key is args[arg+1], its n fields args[arg+2:arg+2+n],
// and they belong to keys order[first:first+n].
type bucket struct {
	arg, first, n int
}

// batch is the Redis form of a batch of keys, grouped by bucket. Its keys, fields and
// prefixed values are substrings of one string each, and args holds pointers to them: a
// *string in an interface costs no allocation, where a string would cost one per field.
type batch struct {
	buckets []bucket
	order   []int // indexes into the caller's keys, bucket by bucket
	strs    []string
	args    []any
	ends    []int // scratch of newBatch
}

type moduleKey struct{ buildID, tag, tenant string }

// packedModules is how many modules of a batch fit in the bits of a packed bucket number;
// a variable so tests can cross it without a batch of a million modules.
var packedModules int32 = 1 << bucketShift

type bucketID struct {
	module int32
	hi     uint64
}

// newBatch groups keys[i] for i in idx by bucket. With vals (of len(keys)), each bucket's
// args are those of HSET (key, field, value, field, value...); without, those of HMGET (key,
// fields...). args[bk.arg] is the command name.
func newBatch(keys []Key, idx []int, vals []string) *batch {
	// A batch usually holds one module or a few, in runs, so the previous key's module is
	// tried before the map. Buckets are found by a uint64 packing the module's index above
	// the 64-bucketShift bits of Addr>>bucketShift: a map of integers is several times
	// faster than one of structs. A batch of over packedModules modules, which only a
	// hostile request would send, keeps the modules past that in a map of structs.
	var (
		modules   []moduleKey
		moduleIdx = make(map[moduleKey]int32)
		last      = int32(-1)
		bucketOf  = make([]int32, len(idx))
		packed    = make(map[uint64]int32)
		unpacked  map[bucketID]int32
		ids       []bucketID
		counts    []int
		lastID    = bucketID{module: -1}
		lastBI    int32
	)
	for j, i := range idx {
		k := &keys[i]
		if last < 0 || k.BuildID != modules[last].buildID || k.Tag != modules[last].tag || k.Tenant != modules[last].tenant {
			mk := moduleKey{k.BuildID, k.Tag, k.Tenant}
			m, ok := moduleIdx[mk]
			if !ok {
				m = int32(len(modules))
				modules = append(modules, mk)
				moduleIdx[mk] = m
			}
			last = m
		}
		id := bucketID{last, k.Addr >> bucketShift}
		if id != lastID {
			var bi int32
			var ok bool
			if id.module < packedModules {
				bi, ok = packed[uint64(id.module)<<(64-bucketShift)|id.hi]
			} else {
				bi, ok = unpacked[id]
			}
			if !ok {
				bi = int32(len(ids))
				switch {
				case id.module < packedModules:
					packed[uint64(id.module)<<(64-bucketShift)|id.hi] = bi
				case unpacked == nil:
					unpacked = map[bucketID]int32{id: bi}
				default:
					unpacked[id] = bi
				}
				ids = append(ids, id)
				counts = append(counts, 0)
			}
			lastID, lastBI = id, bi
		}
		bucketOf[j] = lastBI
		counts[lastBI]++
	}

	b := batchPool.Get().(*batch)
	b.buckets = resize(b.buckets, len(ids))
	b.order = resize(b.order, len(idx))
	perField := 1
	if vals != nil {
		perField = 2
	}
	first, arg := 0, 0
	keyBytes := 0
	for bi, id := range ids {
		b.buckets[bi] = bucket{arg: arg, first: first, n: counts[bi]}
		first += counts[bi]
		arg += 2 + perField*counts[bi]
		m := modules[id.module]
		keyBytes += len(tenant.Key(m.tenant, "")) + len(keyPrefix) + len(m.buildID) + 1 + len(m.tag) + 1 + 16
	}
	fill := make([]int, len(ids))
	for j, i := range idx {
		bi := bucketOf[j]
		b.order[b.buckets[bi].first+fill[bi]] = i
		fill[bi]++
	}

	// One string holds every key and field (and value): strings.Builder hands its buffer
	// over without copying it.
	var sb strings.Builder
	valBytes := 0
	if vals != nil {
		for _, i := range idx {
			valBytes += 1 + len(vals[i])
		}
	}
	sb.Grow(keyBytes + 16*len(idx) + valBytes)
	ends := b.ends[:0]
	var num [16]byte
	for bi, id := range ids {
		m := modules[id.module]
		sb.WriteString(tenant.Key(m.tenant, "")) // the tenant's part of Redis, as bucketKey
		sb.WriteString(keyPrefix)
		sb.WriteString(m.buildID)
		sb.WriteByte('@')
		sb.WriteString(m.tag)
		sb.WriteByte(':')
		sb.Write(hex(&num, id.hi))
		ends = append(ends, sb.Len())
		bk := b.buckets[bi]
		for _, i := range b.order[bk.first : bk.first+bk.n] {
			sb.Write(hex(&num, keys[i].Addr))
			ends = append(ends, sb.Len())
			if vals != nil {
				sb.WriteByte(valuePrefix)
				sb.WriteString(vals[i])
				ends = append(ends, sb.Len())
			}
		}
	}
	b.ends = ends
	all := sb.String()
	b.strs = resize(b.strs, len(ends))
	start := 0
	for j, end := range ends {
		b.strs[j] = all[start:end]
		start = end
	}
	cmd := "hmget"
	if vals != nil {
		cmd = "hset"
	}
	b.args = resize(b.args, arg)
	n := 0
	for _, bk := range b.buckets {
		b.args[bk.arg] = cmd
		for a := bk.arg + 1; a < bk.arg+2+perField*bk.n; a++ {
			b.args[a] = &b.strs[n]
			n++
		}
	}
	return b
}

// Batches are pooled: a 10,000-key batch is about half a megabyte of slices, most of it
// pointers the garbage collector would scan.
var batchPool = sync.Pool{New: func() any { return new(batch) }}

// maxPooledArgs bounds the batches the pool keeps, so one huge batch is not pinned for good.
const maxPooledArgs = 1 << 17

// release returns b to the pool; b and the strings of its args must not be used after.
func (b *batch) release() {
	if cap(b.args) > maxPooledArgs {
		return
	}
	// The strings point into one large string: cleared, the pool does not keep it alive.
	clear(b.strs)
	batchPool.Put(b)
}

// resize returns s with length n, reusing its array when large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// hexPairs holds the two lower-case hex digits of every byte.
const hexPairs = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" +
	"202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f" +
	"404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f" +
	"606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f" +
	"808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f" +
	"a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf" +
	"c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf" +
	"e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"

// hex returns x in lower-case hex without leading zeros, as strconv.FormatUint(x, 16) does,
// written into buf: a byte at a time from the end, where strconv's general loop goes a digit
// at a time (hex formatting was a fifth of a lookup's preparation).
func hex(buf *[16]byte, x uint64) []byte {
	i := len(buf)
	for x >= 0x10 {
		i -= 2
		p := 2 * (x & 0xff)
		buf[i], buf[i+1] = hexPairs[p], hexPairs[p+1]
		x >>= 8
	}
	if x > 0 || i == len(buf) {
		i--
		buf[i] = hexPairs[2*x+1]
	}
	return buf[i:]
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

// putRedis writes one HSET per bucket and sets the bucket's TTL again, in one pipeline.
func (c *Cache) putRedis(ctx context.Context, keys []Key, vals []string) {
	if !c.redisUp() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.opt.WriteTimeout)
	defer cancel()
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	b := newBatch(keys, idx, vals)
	defer b.release()
	start := time.Now()
	_, err := c.opt.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, bk := range b.buckets {
			end := bk.arg + 2 + 2*bk.n
			if err := p.Process(ctx, redis.NewIntCmd(ctx, b.args[bk.arg:end:end]...)); err != nil {
				return err
			}
			p.Expire(ctx, *b.args[bk.arg+1].(*string), c.opt.TTL)
		}
		return nil
	})
	if err != nil {
		c.redisFailed("set", fmt.Errorf("hset %d buckets: %w", len(b.buckets), err))
		return
	}
	c.health.OKStarted(start)
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
	// Logged when the outage starts, summarized each minute, and when it ends.
	c.health.Fail(fmt.Errorf("%s: %w", op, err))
	if c.opt.Metrics != nil {
		c.opt.Metrics.RedisError(op)
	}
}

func (c *Cache) metric(layer string, hits, misses int) {
	if c.opt.Metrics != nil {
		c.opt.Metrics.CacheResult(layer, hits, misses)
	}
}

// Enabled reports whether the cache keeps anything (Redis or an in-process layer), so a caller
// can skip encoding values nobody would store.
func (c *Cache) Enabled() bool {
	return c != nil && (c.opt.Redis != nil || c.opt.LocalSize > 0)
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

// SetRedisLogger sends go-redis's own messages (reconnects, pool and cluster notices) to log,
// so they come out in the service's format instead of as plain lines on stderr.
func SetRedisLogger(log *slog.Logger) {
	redis.SetLogger(redisLogger{log})
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}

// NewRedisClient builds a UniversalClient from a URL: redis:// or rediss:// for one node,
// redis+cluster:// (or several addrs via ParseClusterURL syntax) for a cluster, and
// redis+sentinel://.../?master_name=M for Sentinel failover.
func NewRedisClient(rawURL string) (redis.UniversalClient, error) {
	return newRedisClient(rawURL)
}
