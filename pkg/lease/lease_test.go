package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/profsym/profsym/pkg/testsupport"
)

func client(t *testing.T, r *testsupport.Redis) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// abandon stops renewing without deleting the key: what a crashed holder leaves behind.
func (l *Lease) abandon() {
	l.release.Do(func() { close(l.stop); <-l.done })
}

// TestOneHolder: of many replicas asking at once, one holds the key; after it releases,
// another takes it.
func TestOneHolder(t *testing.T) {
	r := testsupport.StartRedis(t)
	ctx := context.Background()
	var got atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		m := New(client(t, r), Options{TTL: 10 * time.Second})
		wg.Go(func() {
			l, err := m.TryAcquire(ctx, "build/x")
			if err != nil {
				t.Error(err)
				return
			}
			if l == nil {
				return
			}
			got.Add(1)
		})
	}
	wg.Wait()
	if got.Load() != 1 {
		t.Fatalf("%d of 16 took the free key, want 1", got.Load())
	}
	m := New(client(t, r), Options{TTL: 10 * time.Second})
	if l, err := m.TryAcquire(ctx, "build/x"); err != nil || l != nil {
		t.Fatalf("TryAcquire of a held key = %v, %v; want nil, nil", l, err)
	}
	if _, err := m.Acquire(ctx, "build/x", 100*time.Millisecond); !errors.Is(err, ErrHeld) {
		t.Fatalf("Acquire of a held key = %v, want ErrHeld", err)
	}
}

// TestReleaseHandsOver: a released key is free at once; Release twice is harmless.
func TestReleaseHandsOver(t *testing.T) {
	r := testsupport.StartRedis(t)
	ctx := context.Background()
	a, b := New(client(t, r), Options{}), New(client(t, r), Options{})
	l, err := a.TryAcquire(ctx, "upload/1")
	if err != nil || l == nil {
		t.Fatalf("TryAcquire = %v, %v", l, err)
	}
	if held, err := b.Held(ctx, "upload/1"); err != nil || !held {
		t.Fatalf("Held = %v, %v; want true", held, err)
	}
	l.Release()
	l.Release()
	l2, err := b.TryAcquire(ctx, "upload/1")
	if err != nil || l2 == nil {
		t.Fatalf("TryAcquire after release = %v, %v", l2, err)
	}
	// The first holder's late release must not free the second's key.
	l.Release()
	if held, _ := a.Held(ctx, "upload/1"); !held {
		t.Fatal("a released lease deleted its successor's key")
	}
	l2.Release()
}

// TestCrashedHolderExpires: a holder that stops renewing loses the key after the TTL, and a
// waiting replica takes it over.
func TestCrashedHolderExpires(t *testing.T) {
	r := testsupport.StartRedis(t)
	ctx := context.Background()
	ttl := 500 * time.Millisecond
	a, b := New(client(t, r), Options{TTL: ttl}), New(client(t, r), Options{TTL: ttl})
	l, err := a.TryAcquire(ctx, "build/y")
	if err != nil || l == nil {
		t.Fatalf("TryAcquire = %v, %v", l, err)
	}
	l.abandon()
	l2, err := b.Acquire(ctx, "build/y", time.Minute)
	if err != nil {
		t.Fatalf("takeover after expiry: %v", err)
	}
	defer l2.Release()
	// The expired holder's release leaves the new holder's key alone.
	if err := drop.Run(ctx, a.c, []string{l.key}, l.token).Err(); err != nil {
		t.Fatal(err)
	}
	if held, _ := b.Held(ctx, "build/y"); !held {
		t.Fatal("the crashed holder's token deleted the new holder's key")
	}
}

// TestRenewalKeepsTheKey: a live holder keeps its key past many TTLs; when its key is taken
// from it (expired in a Redis outage and taken by another), Lost says so.
func TestRenewalKeepsTheKey(t *testing.T) {
	r := testsupport.StartRedis(t)
	ctx := context.Background()
	ttl := 600 * time.Millisecond
	a, b := New(client(t, r), Options{TTL: ttl}), New(client(t, r), Options{TTL: ttl})
	l, err := a.TryAcquire(ctx, "build/z")
	if err != nil || l == nil {
		t.Fatalf("TryAcquire = %v, %v", l, err)
	}
	if _, err := b.Acquire(ctx, "build/z", 5*ttl); !errors.Is(err, ErrHeld) {
		t.Fatalf("Acquire while the holder renews = %v, want ErrHeld", err)
	}
	// Another holder's token in the key: the next renewal finds it is not the holder.
	if err := a.c.Set(ctx, l.key, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(time.Minute):
		t.Fatal("Lost not closed after the key changed hands")
	}
	l.Release()
	if v, _ := a.c.Get(ctx, l.key).Result(); v != "someone-else" {
		t.Fatalf("release of a lost lease changed the key to %q", v)
	}
}

// TestRedisDown: without Redis, TryAcquire fails rather than pretending to hold the key.
func TestRedisDown(t *testing.T) {
	r := testsupport.StartRedis(t)
	m := New(client(t, r), Options{Timeout: 200 * time.Millisecond})
	r.Stop()
	if l, err := m.TryAcquire(context.Background(), "k"); err == nil || l != nil {
		t.Fatalf("TryAcquire without Redis = %v, %v; want an error", l, err)
	}
}
