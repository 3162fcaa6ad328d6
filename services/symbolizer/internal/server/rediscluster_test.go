package server

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/pkg/testsupport"
)

// TestRedisClusterFailover: two replicas on Redis Cluster (three masters with a replica each,
// made by redis-cli --cluster create) answer a steady load while a master is killed. Every
// answer stays right, no request fails, the outage is logged as a degraded mode that ends,
// and after the failover the replicas read results from Redis and coordinate through it again.
func TestRedisClusterFailover(t *testing.T) {
	cluster := testsupport.StartRedisCluster(t, 3, 1)
	store := t.TempDir()
	// An index cache too small for any index: every answer goes through Redis.
	args := []string{"--store-dir", store, "--redis-url", cluster.URL(), "--redis-timeout", "200ms",
		"--result-cache-entries", "0", "--index-cache-bytes", "1", "--lease-ttl", "2s"}
	r0, log0 := startLogged(t, args...)
	r1, log1 := startLogged(t, args...)
	reps := []*running{r0, r1}

	bins := []binary{compile(t, "-g", "-O2"), compile(t, "-g", "-O1"), compile(t, "-g", "-O0")}
	want := make([][][]symbolizecodec.Frame, len(bins))
	for i, b := range bins {
		if res := upload(t, reps[0].url, b.path); res[0].Outcome != "uploaded" {
			t.Fatalf("upload = %+v", res[0])
		}
		want[i] = engineFrames(t, b.path, b.addrs)
	}
	hits := func() float64 {
		var n float64
		for _, r := range reps {
			n += testutil.ToFloat64(r.srv.Metrics.CacheLookups.WithLabelValues("redis", "hit"))
		}
		return n
	}

	var (
		answered, wrong, failed atomic.Int64
		stop                    = make(chan struct{})
		wg                      sync.WaitGroup
	)
	for w := range 6 {
		wg.Go(func() {
			r := reps[w%2]
			client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				b := (w + i) % len(bins)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				resp, err := client.Symbolize(ctx, connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{
					{GnuBuildId: bins[b].ids.GNU, Addresses: bins[b].addrs}}}))
				cancel()
				if err != nil {
					failed.Add(1)
					t.Errorf("symbolize: %v", err)
					continue
				}
				m := resp.Msg.Modules[0]
				got, derr := symbolizecodec.Decode(m, len(bins[b].addrs))
				if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK || derr != nil || !sameFrames(got, want[b]) {
					wrong.Add(1)
					t.Errorf("wrong answer for binary %d: %v %s %v", b, m.Status, m.Message, derr)
				}
				answered.Add(1)
			}
		})
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !cond(); {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("%s: not within 2 minutes", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Steady: answers come from Redis.
	waitUntil("results read from Redis", func() bool { return hits() > 0 && answered.Load() > 30 })
	before := answered.Load()
	masters := cluster.Masters()
	killed := time.Now()
	cluster.Kill(masters[0])
	if err := cluster.WaitHealthy(2 * time.Minute); err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	promoted := time.Since(killed)
	waitUntil("the outage logged and its end", func() bool {
		l := log0.String() + log1.String()
		return strings.Contains(l, "redis degraded") && strings.Contains(l, "redis recovered")
	})
	// After the failover: results read from Redis again.
	hitsAfter := hits()
	waitUntil("results read from Redis after the failover", func() bool { return hits() > hitsAfter+100 })
	close(stop)
	wg.Wait()
	t.Logf("%d answers (%d during and after the failover), %d wrong, %d failed; replica promoted %v after the kill",
		answered.Load(), answered.Load()-before, wrong.Load(), failed.Load(), promoted.Round(time.Millisecond))
	if wrong.Load() != 0 || failed.Load() != 0 {
		t.Fatalf("%d wrong and %d failed answers", wrong.Load(), failed.Load())
	}
	if answered.Load() == before {
		t.Fatal("nothing answered during the failover")
	}
}

// sameFrames compares decoded answers.
func sameFrames(got, want [][]symbolizecodec.Frame) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			return false
		}
		for j := range got[i] {
			if got[i][j] != want[i][j] {
				return false
			}
		}
	}
	return true
}
