package resultcache

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/testsupport"
)

type countMetrics struct {
	mu     sync.Mutex
	hits   map[string]int
	errors int
}

func (m *countMetrics) CacheResult(layer string, hits, misses int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hits[layer] += hits
}

func (m *countMetrics) RedisError(op string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errors++
}

func locMsg(fn string) *symbolizerv1.Location {
	if fn == "" {
		return &symbolizerv1.Location{}
	}
	return &symbolizerv1.Location{Frames: []*symbolizerv1.Frame{{FunctionName: fn, File: "a.c", Line: 3}}}
}

// loc is the cache value of a one-frame location in fn ("" for an empty location).
func loc(fn string) string {
	v, err := EncodeLocation(locMsg(fn))
	if err != nil {
		panic(err)
	}
	return v
}

func TestRedisOutageAndRecovery(t *testing.T) {
	r := testsupport.StartRedis(t)
	client, err := NewRedisClient(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	m := &countMetrics{hits: map[string]int{}}
	c := New(Options{Redis: client, Timeout: 100 * time.Millisecond, Backoff: 100 * time.Millisecond, Metrics: m})
	ctx := context.Background()
	keys := []Key{{"abcd", "t1", 0x10}, {"abcd", "t1", 0x20}, {"abcd", "t1", 0x30}}
	c.Put(ctx, keys[:2], []string{loc("main"), loc("")})

	out, found := make([]string, 3), make([]bool, 3)
	c.Get(ctx, keys, out, found)
	if out[0] != loc("main") || !found[0] || !found[1] || out[1] != "" || found[2] {
		t.Fatalf("get = %q %v", out, found)
	}
	if ttl := client.TTL(ctx, keys[1].redisKey()).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("negative entry TTL = %v", ttl)
	}
	if n := client.Exists(ctx, "psym:v1:abcd@t1:10").Val(); n != 1 {
		t.Fatalf("key format changed: %d", n)
	}

	// A batch large enough to be fetched in parallel chunks.
	big := make([]Key, 12000)
	bigVals := make([]string, len(big))
	for i := range big {
		big[i] = Key{"abcd", "t2", uint64(i)}
		bigVals[i] = loc("f" + strconv.Itoa(i%7))
	}
	c.Put(ctx, big[:9000], bigVals[:9000])
	bigOut, bigFound := make([]string, len(big)), make([]bool, len(big))
	c.Get(ctx, big, bigOut, bigFound)
	for i := range big {
		if (i < 9000) != bigFound[i] || (i < 9000 && bigOut[i] != bigVals[i]) {
			t.Fatalf("big batch: entry %d = %q", i, bigOut[i])
		}
	}

	r.Stop()
	start := time.Now()
	for i := 0; i < 5; i++ {
		out, found := make([]string, 3), make([]bool, 3)
		c.Get(ctx, keys, out, found) // must return, as misses
		c.Put(ctx, keys[2:], []string{loc("x")})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("calls with Redis down took %v", d)
	}
	if m.errors == 0 {
		t.Fatal("the outage was not counted")
	}

	r.Restart() // an empty Redis (no persistence)
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(150 * time.Millisecond)
		c.Put(ctx, keys[:1], []string{loc("again")})
		out, found := make([]string, 1), make([]bool, 1)
		c.Get(ctx, keys[:1], out, found)
		if found[0] && out[0] == loc("again") && client.Exists(ctx, keys[0].redisKey()).Val() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cache did not come back after Redis restarted")
		}
	}
}

func TestLocalLayer(t *testing.T) {
	m := &countMetrics{hits: map[string]int{}}
	c := New(Options{LocalSize: 2, Metrics: m})
	ctx := context.Background()
	k := []Key{{"a", "t", 1}, {"a", "t", 2}, {"a", "t", 3}}
	c.Put(ctx, k, []string{loc("f1"), loc("f2"), loc("f3")})
	out, found := make([]string, 3), make([]bool, 3)
	c.Get(ctx, k, out, found)
	if found[0] || !found[1] || !found[2] || out[2] != loc("f3") {
		t.Fatalf("LRU of 2 kept %v", out)
	}
	if m.hits["memory"] != 2 {
		t.Fatalf("memory hits = %d", m.hits["memory"])
	}
}

func TestRedisURLs(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"redis://127.0.0.1:6379/0", true},
		{"rediss://u:p@host:6380/1", true},
		{"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001", true},
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

func TestValidateLocation(t *testing.T) {
	for _, l := range []*symbolizerv1.Location{
		{},
		locMsg("main"),
		{Frames: []*symbolizerv1.Frame{{FunctionName: "a", LinkageName: "_Z1av", File: "x.cc", Line: 1<<32 - 1, Column: 7, StartLine: 3}, {FunctionName: "ü"}}},
	} {
		v, err := EncodeLocation(l)
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateLocation(v); err != nil {
			t.Fatalf("ValidateLocation(%v) = %v", l, err)
		}
	}
	good := loc("main")
	for _, bad := range []string{"\x08\x01", "\x0a", "\x0a\x05ab", good[:len(good)-1], good + "\x10", "\x0a\x03\x0a\x01\xff", "\x0a\x06\x20\xff\xff\xff\xff\x7f", "\x12\x00"} {
		if err := ValidateLocation(bad); err == nil {
			t.Errorf("ValidateLocation(%q) accepted", bad)
		}
	}
}

// Whatever ValidateLocation accepts decodes as a Location, so a response that carries it
// stays parseable.
func FuzzValidateLocation(f *testing.F) {
	good := loc("main")
	f.Add(good)
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateLocation(s) != nil {
			return
		}
		var l symbolizerv1.Location
		if err := proto.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("accepted %q, which does not decode: %v", s, err)
		}
	})
}

func TestRedisKeys(t *testing.T) {
	keys := []Key{{"ab", "t", 0x10}, {"go/id", "u", 0}, {"cd", "v", 1 << 63}}
	got := redisKeys(keys, []int{2, 0, 1})
	for j, i := range []int{2, 0, 1} {
		if got[j] != keys[i].redisKey() {
			t.Fatalf("key %d = %q, want %q", j, got[j], keys[i].redisKey())
		}
	}
}

func TestPutAsync(t *testing.T) {
	r := testsupport.StartRedis(t)
	client, err := NewRedisClient(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := New(Options{Redis: client, WriteQueue: 2})
	ctx := context.Background()
	keys := []Key{{"ab", "t", 1}, {"ab", "t", 2}}
	c.PutAsync(keys, []string{loc("x"), loc("")})
	c.Flush(ctx)
	if n := client.Exists(ctx, keys[0].redisKey(), keys[1].redisKey()).Val(); n != 2 {
		t.Fatalf("%d of 2 keys written", n)
	}
	c.Close()
	c.Close() // idempotent

	// With the in-process layer, a key written recently is not written again.
	c2 := New(Options{Redis: client, LocalSize: 10})
	defer c2.Close()
	k := []Key{{"ab", "t", 99}}
	c2.PutAsync(k, []string{loc("y")})
	c2.Flush(ctx)
	client.Del(ctx, k[0].redisKey())
	c2.PutAsync(k, []string{loc("y")})
	c2.Flush(ctx)
	if client.Exists(ctx, k[0].redisKey()).Val() != 0 {
		t.Fatal("an unchanged recent result was written again")
	}
	c2.PutAsync(k, []string{loc("z")})
	c2.Flush(ctx)
	if client.Exists(ctx, k[0].redisKey()).Val() != 1 {
		t.Fatal("a changed result was not written")
	}
}
