package indexcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLRUBoundedByBytes(t *testing.T) {
	c := New(100)
	c.Add("a", &Entry{Bytes: 40})
	c.Add("b", &Entry{Bytes: 40})
	c.Get("a") // a is now most recent
	c.Add("c", &Entry{Bytes: 40})
	if c.Get("b") != nil {
		t.Fatal("b should have been evicted")
	}
	if c.Get("a") == nil || c.Get("c") == nil {
		t.Fatal("a and c should be kept")
	}
	c.Add("huge", &Entry{Bytes: 1000})
	if c.Get("huge") != nil {
		t.Fatal("an entry larger than the cache was kept")
	}
	if used, n := c.Used(); used != 80 || n != 2 {
		t.Fatalf("used = %d, %d entries", used, n)
	}
	c.Remove("a")
	if used, _ := c.Used(); used != 40 {
		t.Fatalf("used after remove = %d", used)
	}
}

func TestConcurrentLoadsShareOneBuild(t *testing.T) {
	c := New(1 << 20)
	var builds atomic.Int32
	release := make(chan struct{})
	load := func(ctx context.Context) (*Entry, error) {
		builds.Add(1)
		<-release
		return &Entry{Bytes: 10}, nil
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := c.GetOrLoad(context.Background(), "k", load); err != nil {
				t.Error(err)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Fatalf("%d builds, want 1", n)
	}
	if _, hit, _ := c.GetOrLoad(context.Background(), "k", load); !hit {
		t.Fatal("second call missed")
	}
}

func TestLoadErrorNotCached(t *testing.T) {
	c := New(1 << 20)
	boom := errors.New("boom")
	if _, _, err := c.GetOrLoad(context.Background(), "k", func(context.Context) (*Entry, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	e, hit, err := c.GetOrLoad(context.Background(), "k", func(context.Context) (*Entry, error) { return &Entry{Bytes: 1}, nil })
	if err != nil || hit || e == nil {
		t.Fatalf("retry: %v %v %v", e, hit, err)
	}
}

func TestCallerCancelDoesNotCancelLoad(t *testing.T) {
	c := New(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The caller's own cancel releases it with context.Canceled; the load goes on.
		_, _, err := c.GetOrLoad(ctx, "k", func(lctx context.Context) (*Entry, error) {
			cancel()
			time.Sleep(20 * time.Millisecond)
			if lctx.Err() != nil {
				t.Error("load context was cancelled with its caller")
			}
			return &Entry{Bytes: 1}, nil
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("GetOrLoad: %v", err)
		}
	}()
	<-done
	// The load finishes after its caller has gone: wait for its result, as long as a loaded
	// machine may take, rather than a fixed time.
	for deadline := time.Now().Add(10 * time.Second); c.Get("k") == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("load result was not kept within 10 s")
		}
	}
}

// TestSupersede: an index kept drops its string table from the cache of tables; an index too
// large to keep, or loaded through GetOrLoad, is treated alike by what it keeps.
func TestSupersede(t *testing.T) {
	ix, strs := New(100), New(100)
	ix.Supersede(strs)
	for _, k := range []string{"a", "b", "huge", "loaded"} {
		strs.Add(k, &Entry{Bytes: 10})
	}
	ix.Add("a", &Entry{Bytes: 40})
	ix.Add("huge", &Entry{Bytes: 1000}) // not kept: its table stays useful
	if _, err := func() (*Entry, error) {
		e, _, err := ix.GetOrLoad(context.Background(), "loaded", func(context.Context) (*Entry, error) { return &Entry{Bytes: 40}, nil })
		return e, err
	}(); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]bool{"a": false, "b": true, "huge": true, "loaded": false} {
		if got := strs.Get(k) != nil; got != want {
			t.Errorf("string table of %q kept: %v, want %v", k, got, want)
		}
	}
	if used, n := strs.Used(); used != 20 || n != 2 {
		t.Errorf("string tables: %d bytes in %d entries, want 20 in 2", used, n)
	}
}
