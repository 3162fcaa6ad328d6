package debuginfod

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

func newMeta(t *testing.T) *catalog.Catalog {
	s, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return catalog.New(s, catalog.Options{MaxSize: 1 << 20, TempDir: t.TempDir()})
}

func TestNegativeCacheBreakerAndCap(t *testing.T) {
	var hits, inflight, peak atomic.Int32
	var mode atomic.Value
	mode.Store("404")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if r.Method != http.MethodGet || strings.ToLower(r.URL.Path) != r.URL.Path {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		time.Sleep(20 * time.Millisecond)
		if mode.Load() == "404" {
			http.NotFound(w, r)
			return
		}
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer srv.Close()
	var mu sync.Mutex
	counts := map[string]int{}
	c := NewClient(newMeta(t), ClientOptions{URLs: []string{srv.URL}, NegativeTTL: time.Hour, MaxParallel: 2,
		BreakerFailures: 3, BreakerOpen: time.Hour, Count: func(_, r string) { mu.Lock(); counts[r]++; mu.Unlock() }})
	ctx := context.Background()

	// Upper-case input is asked for in lower case; a miss is remembered.
	if _, err := c.Fetch(ctx, "xyz"); err == nil {
		t.Fatal("a non-hex build ID was accepted")
	}
	found, err := c.Fetch(ctx, "ABCD")
	if found || err != nil {
		t.Fatalf("fetch = %v %v", found, err)
	}
	before := hits.Load()
	if found, err := c.Fetch(ctx, "abcd"); found || err != nil || hits.Load() != before {
		t.Fatalf("negative cache: %v %v, %d new requests", found, err, hits.Load()-before)
	}

	// Concurrency cap across different build IDs.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			id := strings.Repeat(string("0123456789"[i]), 2) + "00"
			if found, err := c.Fetch(ctx, id); found || err != nil {
				t.Errorf("fetch %s = %v %v, want a miss", id, found, err)
			}
		}(i)
	}
	wg.Wait()
	if p := peak.Load(); p > 2 {
		t.Fatalf("%d concurrent upstream requests, cap is 2", p)
	}

	// Failures open the circuit: no more requests reach the upstream.
	mode.Store("500")
	for i := 0; i < 3; i++ {
		if _, err := c.Fetch(ctx, "ee0"+string("123"[i])); err == nil {
			t.Fatal("server error not reported")
		}
	}
	before = hits.Load()
	if _, err := c.Fetch(ctx, "ff00"); err == nil || hits.Load() != before {
		t.Fatalf("open circuit: %v, %d new requests", err, hits.Load()-before)
	}
	if counts["open_circuit"] == 0 || counts["error"] < 3 || counts["not_found"] == 0 {
		t.Fatalf("counts = %v", counts)
	}
}

func TestParseURLs(t *testing.T) {
	got := ParseURLs("http://a/ http://b", "  http://c  ")
	if strings.Join(got, ",") != "http://a,http://b,http://c" {
		t.Fatalf("got %v", got)
	}
}
