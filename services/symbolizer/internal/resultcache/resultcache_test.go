package resultcache

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/profsym/profsym/pkg/testsupport"
)

type countMetrics struct {
	mu     sync.Mutex
	hits   map[string]int
	misses map[string]int
	errors map[string]int
}

func newCountMetrics() *countMetrics {
	return &countMetrics{hits: map[string]int{}, misses: map[string]int{}, errors: map[string]int{}}
}

func (m *countMetrics) CacheResult(layer string, hits, misses int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hits[layer] += hits
	m.misses[layer] += misses
}

func (m *countMetrics) RedisError(op string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errors[op]++
}

func (m *countMetrics) errorCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.errors {
		n += e
	}
	return n
}

// val is an opaque cache value; the cache never looks inside.
func val(s string) string { return "v\x00" + s + "\xff" }

func startRedis(t *testing.T) (*testsupport.Redis, redis.UniversalClient) {
	t.Helper()
	r := testsupport.StartRedis(t)
	client, err := NewRedisClient(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return r, client
}

func get(t *testing.T, c *Cache, keys []Key) ([]string, []bool) {
	t.Helper()
	out, found := make([]string, len(keys)), make([]bool, len(keys))
	c.Get(context.Background(), keys, out, found)
	return out, found
}

func TestRedisOutageAndRecovery(t *testing.T) {
	r, client := startRedis(t)
	m := newCountMetrics()
	var logs testsupport.Buffer
	c := New(Options{Redis: client, Timeout: 100 * time.Millisecond, Backoff: 100 * time.Millisecond, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer c.Close()
	ctx := context.Background()
	keys := []Key{{"abcd", "t1", 0x10, ""}, {"abcd", "t1", 0x20, ""}, {"abcd", "t1", 0x30, ""}}
	c.Put(ctx, keys[:2], []string{val("main"), ""})

	out, found := get(t, c, keys)
	if out[0] != val("main") || !found[0] || !found[1] || out[1] != "" || found[2] {
		t.Fatalf("get = %q %v", out, found)
	}
	if got := client.HGet(ctx, "psym:v3:abcd@t1:0", "20").Val(); got != "=" {
		t.Fatalf("negative entry stored as %q, want %q", got, "=")
	}

	// A large batch over several buckets.
	big := make([]Key, 12000)
	bigVals := make([]string, len(big))
	for i := range big {
		big[i] = Key{"abcd", "t2", uint64(i) * 997, ""}
		bigVals[i] = val("f" + strconv.Itoa(i%7))
	}
	c.Put(ctx, big[:9000], bigVals[:9000])
	bigOut, bigFound := get(t, c, big)
	for i := range big {
		if (i < 9000) != bigFound[i] || (i < 9000 && bigOut[i] != bigVals[i]) {
			t.Fatalf("big batch: entry %d = %q %v", i, bigOut[i], bigFound[i])
		}
	}

	r.Stop()
	start := time.Now()
	for range 5 {
		get(t, c, keys) // must return, as misses
		c.Put(ctx, keys[2:], []string{val("x")})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("calls with Redis down took %v", d)
	}
	if m.errorCount() == 0 {
		t.Fatal("the outage was not counted")
	}

	r.Restart() // an empty Redis (no persistence)
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(150 * time.Millisecond)
		c.Put(ctx, keys[:1], []string{val("again")})
		out, found := get(t, c, keys[:1])
		if found[0] && out[0] == val("again") && client.HExists(ctx, keys[0].bucketKey(), keys[0].field()).Val() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cache did not come back after Redis restarted")
		}
	}
	// The outage is told once when it starts and once when it ends, however many calls
	// failed in between.
	text := logs.String()
	if n := strings.Count(text, "redis degraded"); n != 1 || strings.Count(text, "level=WARN") != 1 {
		t.Errorf("outage start logged %d times (WARN lines: %d):\n%s", n, strings.Count(text, "level=WARN"), text)
	}
	if !strings.Contains(text, "level=INFO") || !strings.Contains(text, "redis recovered") {
		t.Errorf("recovery not logged:\n%s", text)
	}
}

// The Redis layout is what the package documentation promises: one hash per 1 MiB of
// address space, fields named by the address in hex, values prefixed with '=', a TTL.
func TestBucketLayout(t *testing.T) {
	_, client := startRedis(t)
	c := New(Options{Redis: client, TTL: time.Hour})
	defer c.Close()
	ctx := context.Background()
	keys := []Key{
		{"abcd", "t1", 0x7f0000001234, ""},
		{"abcd", "t1", 0x7f00000fffff, ""},
		{"abcd", "t1", 0x7f0000100000, ""},
		{"abcd", "t1", 0, ""},
		{"abcd", "t1", 1<<64 - 1, ""},
	}
	c.Put(ctx, keys, []string{"a", "", "c", "d", "e"})
	want := map[string]map[string]string{
		"psym:v3:abcd@t1:7f00000":     {"7f0000001234": "=a", "7f00000fffff": "="},
		"psym:v3:abcd@t1:7f00001":     {"7f0000100000": "=c"},
		"psym:v3:abcd@t1:0":           {"0": "=d"},
		"psym:v3:abcd@t1:fffffffffff": {"ffffffffffffffff": "=e"},
	}
	got, err := client.Keys(ctx, "psym:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if wantKeys := slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(got, wantKeys) {
		t.Fatalf("keys = %q, want %q", got, wantKeys)
	}
	for key, fields := range want {
		if typ := client.Type(ctx, key).Val(); typ != "hash" {
			t.Errorf("%s: type %q, want hash", key, typ)
		}
		if ttl := client.TTL(ctx, key).Val(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s: TTL %v, want (0, 1h]", key, ttl)
		}
		all, err := client.HGetAll(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != len(fields) {
			t.Errorf("%s: fields %q, want %q", key, all, fields)
		}
		for f, v := range fields {
			if all[f] != v {
				t.Errorf("%s %s = %q, want %q", key, f, all[f], v)
			}
		}
	}

	// A later write to a bucket sets its TTL again.
	client.Expire(ctx, "psym:v3:abcd@t1:0", time.Minute)
	c.Put(ctx, []Key{{"abcd", "t1", 5, ""}}, []string{"f"})
	if ttl := client.TTL(ctx, "psym:v3:abcd@t1:0").Val(); ttl <= time.Minute {
		t.Errorf("TTL after a new write = %v, want it reset to about 1h", ttl)
	}
}

// Values of any bytes come back as written, whichever protocol the client speaks: Redis
// marks a missing field differently in RESP2 ("$-1") and RESP3 ("_").
func TestValuesRoundTrip(t *testing.T) {
	r := testsupport.StartRedis(t)
	for _, proto := range []string{"2", "3"} {
		t.Run("resp"+proto, func(t *testing.T) {
			client, err := NewRedisClient(r.URL() + "?protocol=" + proto)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			ctx := context.Background()
			w := New(Options{Redis: client})
			defer w.Close()
			vals := []string{"", "x", "=", "==a", "\x00", "\x00\xff\r\n$-1\r\n", "_\r\n", strings.Repeat("long", 50000)}
			keys := make([]Key, len(vals))
			for i := range keys {
				keys[i] = Key{"abcd" + proto, "t", 0x400000 + uint64(i), ""}
			}
			w.Put(ctx, keys, vals)
			// A second cache with no in-process layer reads what the first wrote.
			rd := New(Options{Redis: client})
			defer rd.Close()
			out, found := get(t, rd, append(slices.Clone(keys), Key{"abcd" + proto, "t", 0x400000 + uint64(len(vals)), ""}))
			for i, v := range vals {
				if !found[i] || out[i] != v {
					t.Errorf("value %d: got %q found=%v, want %q", i, out[i], found[i], v)
				}
			}
			if found[len(vals)] {
				t.Errorf("a key never written was found: %q", out[len(vals)])
			}
		})
	}
}

// A bucket key that holds something other than a hash makes Redis answer HMGET with an
// error: the read fails as a whole, is counted, and reads as misses.
func TestWrongType(t *testing.T) {
	_, client := startRedis(t)
	ctx := context.Background()
	k := Key{"abcd", "t", 0x10, ""}
	if err := client.Set(ctx, k.bucketKey(), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m := newCountMetrics()
	c := New(Options{Redis: client, Metrics: m})
	defer c.Close()
	out, found := get(t, c, []Key{k})
	if found[0] || out[0] != "" {
		t.Fatalf("get = %q %v", out, found)
	}
	if m.errorCount() != 1 {
		t.Fatalf("errors %v, want one", m.errors)
	}
}

// One Get spanning many buckets of several modules, with hits and misses interleaved.
func TestManyBuckets(t *testing.T) {
	_, client := startRedis(t)
	ctx := context.Background()
	m := newCountMetrics()
	c := New(Options{Redis: client, Metrics: m})
	defer c.Close()
	var keys []Key
	var vals []string
	for i := range 6000 {
		mod := strconv.Itoa(i % 3)
		keys = append(keys, Key{"build" + mod, "t" + mod, uint64(i) << 16, ""})
		vals = append(vals, val(strconv.Itoa(i)))
	}
	var written []Key
	var writtenVals []string
	for i := range keys {
		if i%5 != 0 {
			written, writtenVals = append(written, keys[i]), append(writtenVals, vals[i])
		}
	}
	c.Put(ctx, written, writtenVals)
	if n := client.DBSize(ctx).Val(); n < 300 {
		t.Fatalf("only %d Redis keys for 6000 entries in 3 modules over 375 buckets each", n)
	}
	// Reversed, so the batch is not in bucket order.
	rev := slices.Clone(keys)
	slices.Reverse(rev)
	out, found := get(t, c, rev)
	for j, k := range rev {
		i := len(keys) - 1 - j
		if want := i%5 != 0; found[j] != want || (want && out[j] != vals[i]) {
			t.Fatalf("%+v = %q found=%v", k, out[j], found[j])
		}
	}
	if m.hits["redis"] != len(written) || m.misses["redis"] != len(keys)-len(written) {
		t.Fatalf("redis hits %d misses %d", m.hits["redis"], m.misses["redis"])
	}
	if m.errorCount() != 0 {
		t.Fatalf("errors: %v", m.errors)
	}
}

// Go build IDs contain '/'; the key keeps them as they are.
func TestGoBuildID(t *testing.T) {
	_, client := startRedis(t)
	ctx := context.Background()
	c := New(Options{Redis: client})
	defer c.Close()
	id := "Vt9dgwVp0yd1oCTpZpVU/Z3WfQk8ckW0lXZ5Sm6Sa/oz4L1cxNVLZzNs8iGgBt/uAhnR0sYJbdOB8rW7cXo"
	k := Key{id, "0123abcd", 0x4a5b6c, ""}
	c.Put(ctx, []Key{k}, []string{val("go")})
	if got := client.HGet(ctx, "psym:v3:"+id+"@0123abcd:4", "4a5b6c").Val(); got != "="+val("go") {
		t.Fatalf("stored %q", got)
	}
	if out, found := get(t, New(Options{Redis: client}), []Key{k}); !found[0] || out[0] != val("go") {
		t.Fatalf("get = %q %v", out[0], found[0])
	}
}

// A better file uploaded later under the same build ID has another tag and must not see the
// old file's results.
func TestTagIsolation(t *testing.T) {
	_, client := startRedis(t)
	ctx := context.Background()
	c := New(Options{Redis: client})
	defer c.Close()
	c.Put(ctx, []Key{{"abcd", "old", 0x1000, ""}, {"abcd", "old", 0x2000, ""}}, []string{val("old"), ""})
	out, found := get(t, c, []Key{{"abcd", "new", 0x1000, ""}, {"abcd", "new", 0x2000, ""}, {"abcd", "old", 0x1000, ""}})
	if found[0] || found[1] || !found[2] || out[2] != val("old") {
		t.Fatalf("get = %q %v", out, found)
	}
}

// A field written without the value prefix (by something else) reads as a miss.
func TestUnprefixedValue(t *testing.T) {
	_, client := startRedis(t)
	ctx := context.Background()
	k := Key{"abcd", "t", 0x10, ""}
	client.HSet(ctx, k.bucketKey(), k.field(), "raw", Key{"abcd", "t", 0x11, ""}.field(), "=ok")
	m := newCountMetrics()
	out, found := get(t, New(Options{Redis: client, Metrics: m}), []Key{k, {"abcd", "t", 0x11, ""}})
	if found[0] || !found[1] || out[1] != "ok" {
		t.Fatalf("get = %q %v", out, found)
	}
	if m.errorCount() != 0 {
		t.Fatalf("a bad entry counted as a Redis error: %v", m.errors)
	}
}

// After a failure Redis is left alone for the back-off period, then tried again.
func TestBackoff(t *testing.T) {
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	// Nothing listens there now: every call is refused at once.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	m := newCountMetrics()
	c := New(Options{Redis: client, Backoff: time.Second, Metrics: m})
	defer c.Close()
	keys := []Key{{"abcd", "t", 1, ""}}
	for i, tc := range []struct {
		sleep  time.Duration
		errors int
	}{
		{0, 1},                       // the first call fails
		{0, 1},                       // within the back-off: Redis is skipped
		{1200 * time.Millisecond, 2}, // after it: tried (and failing) again
	} {
		time.Sleep(tc.sleep)
		if _, found := get(t, c, keys); found[0] {
			t.Fatalf("call %d: found with no Redis", i)
		}
		if got := m.errorCount(); got != tc.errors {
			t.Fatalf("call %d: %d errors, want %d", i, got, tc.errors)
		}
	}
	if m.errors["get"] != 2 {
		t.Fatalf("errors = %v", m.errors)
	}
	c.PutAsync(keys, []string{"x"}) // skipped: Redis is in back-off
	c.Flush(context.Background())
	if m.errors["set"] != 0 {
		t.Fatalf("a write was attempted during the back-off: %v", m.errors)
	}
}

func TestLocalLayer(t *testing.T) {
	m := newCountMetrics()
	c := New(Options{LocalSize: 2, Metrics: m})
	ctx := context.Background()
	k := []Key{{"a", "t", 1, ""}, {"a", "t", 2, ""}, {"a", "t", 3, ""}}
	c.Put(ctx, k, []string{val("f1"), val("f2"), ""})
	out, found := get(t, c, k)
	if found[0] || !found[1] || !found[2] || out[1] != val("f2") || out[2] != "" {
		t.Fatalf("LRU of 2 kept %q %v", out, found)
	}
	if m.hits["memory"] != 2 {
		t.Fatalf("memory hits = %d", m.hits["memory"])
	}
}

// Redis hits fill the in-process layer, so the next Get does not ask Redis.
func TestLocalLayerFilledFromRedis(t *testing.T) {
	_, client := startRedis(t)
	ctx := context.Background()
	k := []Key{{"a", "t", 1, ""}, {"a", "t", 2, ""}}
	w := New(Options{Redis: client})
	w.Put(ctx, k, []string{val("1"), ""})
	w.Close()
	m := newCountMetrics()
	c := New(Options{Redis: client, LocalSize: 10, Metrics: m})
	defer c.Close()
	get(t, c, k)
	client.FlushAll(ctx)
	out, found := get(t, c, k)
	if !found[0] || !found[1] || out[0] != val("1") || out[1] != "" {
		t.Fatalf("get = %q %v", out, found)
	}
	if m.hits["redis"] != 2 || m.hits["memory"] != 2 {
		t.Fatalf("hits = %v", m.hits)
	}
}

func TestRedisURLs(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"redis://127.0.0.1:6379/0", true},
		{"rediss://u:p@host:6380/1", true},
		{"unix:///tmp/redis.sock", true},
		{"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001", true},
		{"rediss+cluster://127.0.0.1:7000", true},
		{"redis+sentinel://127.0.0.1:26379?master_name=m", true},
		{"http://x", false},
		{"::bad", false},
	} {
		c, err := NewRedisClient(tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v", tc.url, err)
		}
		if c != nil {
			if err := c.Close(); err != nil {
				t.Errorf("%s: close: %v", tc.url, err)
			}
		}
	}
}

// newBatch groups a batch by bucket with every key and field where the layout puts it.
func TestNewBatch(t *testing.T) {
	keys := []Key{
		{"ab", "t", 0x10, ""},
		{"go/id/x/y", "u", 0, ""},
		{"ab", "t", 0x200000, ""},
		{"cd", "v", 1 << 63, ""},
		{"ab", "t", 0x20, ""},
		{"ab", "u", 0x10, ""},
	}
	vals := []string{"0", "", "2", "3", "4", "5"}
	for _, tc := range []struct {
		name string
		idx  []int
		vals []string
	}{
		{"all", []int{0, 1, 2, 3, 4, 5}, nil},
		{"subset out of order", []int{4, 3, 0}, nil},
		{"one", []int{1}, nil},
		{"with values", []int{5, 4, 3, 2, 1, 0}, vals},
	} {
		t.Run(tc.name, func(t *testing.T) { checkBatch(t, keys, tc.idx, tc.vals) })
	}
	// Batches come from a pool: one made after a larger one was released has nothing of it.
	t.Run("reused", func(t *testing.T) {
		for range 3 {
			checkBatch(t, keys, []int{0, 1, 2, 3, 4, 5}, vals)
			checkBatch(t, keys, []int{2}, nil)
		}
	})
}

// hex writes what strconv writes, on the edges of every digit count and at random.
func TestHex(t *testing.T) {
	xs := []uint64{0, ^uint64(0)}
	for d := range 64 {
		xs = append(xs, 1<<d, 1<<d-1, 1<<d+1)
	}
	r := rand.New(rand.NewPCG(1, 1))
	for range 10000 {
		xs = append(xs, r.Uint64()>>r.UintN(64))
	}
	var buf [16]byte
	for _, x := range xs {
		if got, want := string(hex(&buf, x)), strconv.FormatUint(x, 16); got != want {
			t.Fatalf("hex(%#x) = %q, want %q", x, got, want)
		}
	}
}

// A batch of more modules than the packed bucket numbers can hold still groups correctly.
func TestNewBatchManyModules(t *testing.T) {
	defer func(n int32) { packedModules = n }(packedModules)
	packedModules = 4
	n := 10
	keys := make([]Key, 0, n+6)
	for i := range n {
		keys = append(keys, Key{"b" + strconv.Itoa(i), "t", uint64(i), ""})
	}
	// Keys of the first and the last modules again, in the buckets they have and in new ones.
	for _, i := range []int{0, 0, n - 1, n - 1, n - 2} {
		k := keys[i]
		keys = append(keys, k, Key{k.BuildID, k.Tag, k.Addr + 5<<bucketShift, ""})
	}
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	checkBatch(t, keys, idx, nil)
}

// checkBatch checks that newBatch puts every key of keys[idx] in its bucket once, with its
// field (and value) where the bucket's args say.
func checkBatch(t *testing.T, keys []Key, idx []int, vals []string) {
	t.Helper()
	b := newBatch(keys, idx, vals)
	defer b.release()
	cmd, per := "hmget", 1
	if vals != nil {
		cmd, per = "hset", 2
	}
	seen := make(map[int]bool, len(idx))
	bucketKeys := make(map[string]bool, len(b.buckets))
	for _, bk := range b.buckets {
		if b.args[bk.arg] != cmd {
			t.Fatalf("command %v", b.args[bk.arg])
		}
		key := *b.args[bk.arg+1].(*string)
		if bucketKeys[key] {
			t.Fatalf("bucket %s twice", key)
		}
		bucketKeys[key] = true
		for f := range bk.n {
			i := b.order[bk.first+f]
			seen[i] = true
			k := keys[i]
			if key != k.bucketKey() {
				t.Fatalf("key %d in bucket %s, want %s", i, key, k.bucketKey())
			}
			if got := *b.args[bk.arg+2+per*f].(*string); got != k.field() {
				t.Fatalf("key %d: field %q, want %q", i, got, k.field())
			}
			if vals != nil {
				if got := *b.args[bk.arg+3+per*f].(*string); got != "="+vals[i] {
					t.Fatalf("key %d: value %q", i, got)
				}
			}
		}
	}
	if len(seen) != len(idx) || len(b.order) != len(idx) {
		t.Fatalf("batch covers %d of %d keys", len(seen), len(idx))
	}
	if end := b.buckets[len(b.buckets)-1]; end.arg+2+per*end.n != len(b.args) {
		t.Fatalf("args has %d entries past the last bucket", len(b.args)-end.arg-2-per*end.n)
	}
}

func TestPutAsync(t *testing.T) {
	_, client := startRedis(t)
	c := New(Options{Redis: client, WriteQueue: 2})
	ctx := context.Background()
	keys := []Key{{"ab", "t", 1, ""}, {"ab", "t", 2, ""}}
	c.PutAsync(keys, []string{val("x"), ""})
	c.Flush(ctx)
	for _, k := range keys {
		if !client.HExists(ctx, k.bucketKey(), k.field()).Val() {
			t.Fatalf("%+v not written", k)
		}
	}
	c.Close()
	c.Close() // idempotent

	// With the in-process layer, a key written recently is not written again.
	c2 := New(Options{Redis: client, LocalSize: 10})
	defer c2.Close()
	k := []Key{{"ab", "t", 99, ""}}
	c2.PutAsync(k, []string{val("y")})
	c2.Flush(ctx)
	client.HDel(ctx, k[0].bucketKey(), k[0].field())
	c2.PutAsync(k, []string{val("y")})
	c2.Flush(ctx)
	if client.HExists(ctx, k[0].bucketKey(), k[0].field()).Val() {
		t.Fatal("an unchanged recent result was written again")
	}
	c2.PutAsync(k, []string{val("z")})
	c2.Flush(ctx)
	if got := client.HGet(ctx, k[0].bucketKey(), k[0].field()).Val(); got != "="+val("z") {
		t.Fatalf("a changed result was written as %q", got)
	}
}

// A full write queue drops batches (counted) instead of blocking the caller.
func TestWriteQueueFull(t *testing.T) {
	// A server that accepts connections and never answers keeps the writer busy until its
	// write timeout.
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				<-stop
				// The server side of a test connection that never carried a reply.
				_ = conn.Close()
			}()
		}
	}()
	defer func() { close(stop); l.Close(); conns.Wait() }()
	client := redis.NewClient(&redis.Options{Addr: l.Addr().String(), MaxRetries: -1, Protocol: 2, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer client.Close()
	m := newCountMetrics()
	c := New(Options{Redis: client, WriteQueue: 1, WriteTimeout: 2 * time.Second, Metrics: m})
	c.PutAsync([]Key{{"ab", "t", 0, ""}}, []string{"v"})
	// Wait for the writer to take the first batch; it then waits on the silent server.
	for deadline := time.Now().Add(5 * time.Second); len(c.writes) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not take the first batch")
		}
	}
	start := time.Now()
	for i := 1; i < 4; i++ {
		c.PutAsync([]Key{{"ab", "t", uint64(i), ""}}, []string{"v"})
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("PutAsync blocked for %v", d)
	}
	m.mu.Lock()
	dropped := m.errors["queue"]
	m.mu.Unlock()
	// One batch is being written, one waits; the other two are dropped.
	if dropped != 2 {
		t.Fatalf("dropped %d batches, want 2 (errors %v)", dropped, m.errors)
	}
	c.Close()
	if m.errorCount() < 3 {
		t.Fatalf("the timed-out write was not counted: %v", m.errors)
	}
}
