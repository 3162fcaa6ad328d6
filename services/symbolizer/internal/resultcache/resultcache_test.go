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

func loc(fn string) *symbolizerv1.Location {
	if fn == "" {
		return &symbolizerv1.Location{}
	}
	return &symbolizerv1.Location{Frames: []*symbolizerv1.Frame{{FunctionName: fn, File: "a.c", Line: 3}}}
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
	c.Put(ctx, keys[:2], []*symbolizerv1.Location{loc("main"), loc("")})

	out := make([]*symbolizerv1.Location, 3)
	c.Get(ctx, keys, out)
	if !proto.Equal(out[0], loc("main")) || out[1] == nil || len(out[1].Frames) != 0 || out[2] != nil {
		t.Fatalf("get = %v", out)
	}
	if ttl := client.TTL(ctx, keys[1].redisKey()).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("negative entry TTL = %v", ttl)
	}
	if n := client.Exists(ctx, "psym:v1:abcd@t1:10").Val(); n != 1 {
		t.Fatalf("key format changed: %d", n)
	}

	// A batch large enough to be fetched in parallel chunks.
	big := make([]Key, 12000)
	bigVals := make([]*symbolizerv1.Location, len(big))
	for i := range big {
		big[i] = Key{"abcd", "t2", uint64(i)}
		bigVals[i] = loc("f" + strconv.Itoa(i%7))
	}
	c.Put(ctx, big[:9000], bigVals[:9000])
	bigOut := make([]*symbolizerv1.Location, len(big))
	c.Get(ctx, big, bigOut)
	for i := range big {
		if (i < 9000) != (bigOut[i] != nil) || (i < 9000 && !proto.Equal(bigOut[i], bigVals[i])) {
			t.Fatalf("big batch: entry %d = %v", i, bigOut[i])
		}
	}

	r.Stop()
	start := time.Now()
	for i := 0; i < 5; i++ {
		out := make([]*symbolizerv1.Location, 3)
		c.Get(ctx, keys, out) // must return, as misses
		c.Put(ctx, keys[2:], []*symbolizerv1.Location{loc("x")})
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
		c.Put(ctx, keys[:1], []*symbolizerv1.Location{loc("again")})
		out := make([]*symbolizerv1.Location, 1)
		c.Get(ctx, keys[:1], out)
		if proto.Equal(out[0], loc("again")) && client.Exists(ctx, keys[0].redisKey()).Val() == 1 {
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
	c.Put(ctx, k, []*symbolizerv1.Location{loc("f1"), loc("f2"), loc("f3")})
	out := make([]*symbolizerv1.Location, 3)
	c.Get(ctx, k, out)
	if out[0] != nil || out[1] == nil || out[2] == nil {
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
			c.Close()
		}
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, loc := range []*symbolizerv1.Location{
		{},
		loc("main"),
		{Frames: []*symbolizerv1.Frame{{FunctionName: "a", LinkageName: "_Z1av", File: "x.cc", Line: 1 << 31, Column: 7, StartLine: 3}, {FunctionName: "ü", File: ""}}},
	} {
		got, err := decode(string(encode(nil, loc)))
		if err != nil || !proto.Equal(got, loc) {
			t.Fatalf("round trip of %v = %v, %v", loc, got, err)
		}
	}
	good := string(encode(nil, loc("main")))
	for _, bad := range []string{"", "\x02", "\x01", "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "\x01\x7f", good[:len(good)-1], good + "x", "\x01\x01\x7fabc", "\x01\x01\x01\xff\x00\x00\x00\x00\x00"} {
		if _, err := decode(bad); err == nil {
			t.Errorf("decode(%q) accepted", bad)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(string(encode(nil, loc("main"))))
	f.Add("\x01\x00")
	f.Fuzz(func(t *testing.T, s string) {
		loc, err := decode(s)
		if err != nil {
			return
		}
		again, err := decode(string(encode(nil, loc)))
		if err != nil || !proto.Equal(again, loc) {
			t.Fatalf("re-encoding changed %q", s)
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
	c.PutAsync(keys, []*symbolizerv1.Location{loc("x"), loc("")})
	c.Flush(ctx)
	if n := client.Exists(ctx, keys[0].redisKey(), keys[1].redisKey()).Val(); n != 2 {
		t.Fatalf("%d of 2 keys written", n)
	}
	c.Close()
	c.Close() // idempotent
}
