package resultcache

import (
	"context"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/profsym/profsym/pkg/testsupport"
)

// BenchmarkGetRedis measures a Get of 10,000 random present addresses of one file against a
// real Redis holding 500,000 entries of 8 to 30 bytes spread over 47 MiB of addresses,
// with no in-process layer. Besides ns/op and allocs/op it reports Redis's own time per Get
// (the usec of hmget in INFO commandstats), this process's CPU time per Get, which the
// machine's other load disturbs less than ns/op, and the HMGET calls per Get.
func BenchmarkGetRedis(b *testing.B) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		b.Skip("redis-server not installed")
	}
	const (
		entries = 500_000
		span    = 47 << 20
		batch   = 10_000
		base    = 0x400000
	)
	r := testsupport.StartRedis(b)
	client, err := NewRedisClient(r.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	w := New(Options{Redis: client, WriteTimeout: time.Minute})
	defer w.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	const step = span / entries
	keys := make([]Key, entries)
	vals := make([]string, entries)
	for i := range keys {
		keys[i] = Key{"9f3c1a2b4d5e6f708192a3b4c5d6e7f801234567", "5e2f0a9c", base + uint64(i)*step + rng.Uint64N(step), ""}
		// The symbolizer's values: six varints per frame, one or two frames, 8 to 30 bytes.
		v := make([]byte, 8+rng.IntN(23))
		for k := range v {
			v[k] = byte(rng.IntN(256))
		}
		vals[i] = string(v)
	}
	for i := 0; i < entries; i += 20_000 {
		w.Put(ctx, keys[i:i+20_000], vals[i:i+20_000])
	}
	if w.downUntil.Load() != 0 {
		b.Fatal("filling Redis failed")
	}
	if info, err := client.Info(ctx, "memory").Result(); err == nil {
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory_human:"); ok {
				b.Logf("Redis holds %d entries in %d keys, %s", entries, client.DBSize(ctx).Val(), v)
			}
		}
	}

	batches := make([][]Key, 16)
	for j := range batches {
		batches[j] = make([]Key, batch)
		for i := range batches[j] {
			batches[j][i] = keys[rng.IntN(entries)]
		}
	}
	b.Run("hash-buckets", func(b *testing.B) {
		c := New(Options{Redis: client, Timeout: 10 * time.Second})
		defer c.Close()
		out, found := make([]string, batch), make([]bool, batch)
		c.Get(ctx, batches[0], out, found)
		for i, f := range found {
			if !f {
				b.Fatalf("address %#x not found", batches[0][i].Addr)
			}
		}
		if err := client.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		n := 0
		b.ReportAllocs()
		cpu0 := processCPU(b)
		for b.Loop() {
			c.Get(ctx, batches[n%len(batches)], out, found)
			n++
		}
		b.StopTimer()
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(n), "client-cpu-us/op")
		calls, usec := commandStat(b, client, "hmget")
		b.ReportMetric(float64(usec)/float64(n), "redis-us/op")
		b.ReportMetric(float64(calls)/float64(n), "hmget/op")
		if c.downUntil.Load() != 0 {
			b.Fatal("a Get failed")
		}
	})
}

// commandStat returns the calls and microseconds Redis spent in cmd since the last CONFIG
// RESETSTAT.
func commandStat(b *testing.B, client redis.UniversalClient, cmd string) (calls, usec int64) {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "usec":
				usec = n
			}
		}
	}
	return calls, usec
}

// BenchmarkNewBatch measures laying out the HMGETs of 10,000 keys in ascending address order
// (as the symbolizer asks), in chunks of 1,024, without Redis.
func BenchmarkNewBatch(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	addrs := make([]uint64, 10000)
	for i := range addrs {
		addrs[i] = 0x400000 + r.Uint64N(45<<20)
	}
	slices.Sort(addrs)
	keys := make([]Key, len(addrs))
	for i, a := range addrs {
		keys[i] = Key{"9f3c1a2b4d5e6f708192a3b4c5d6e7f801234567", "0123456789abcdef.5e2f0a9c1234", a, ""}
	}
	idx := make([]int, 1024)
	for i := range idx {
		idx[i] = i
	}
	b.ReportAllocs()
	for b.Loop() {
		for s := 0; s+len(idx) <= len(keys); s += len(idx) {
			newBatch(keys[s:s+len(idx)], idx, nil).release()
		}
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
