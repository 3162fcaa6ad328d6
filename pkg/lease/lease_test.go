package lease

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"

	"github.com/profsym/profsym/pkg/testsupport"
)

// kind is a backend under test: real Redis, or real MinIO for the S3 leases.
type kind struct {
	name string
	// start starts the server and returns how to make a Manager over it (each its own
	// client, as replicas have), how to hand a key to another holder behind the Manager's
	// back, and how to stop the server.
	start func(t *testing.T) (newManager func(Options) *Manager, steal func(key string), stop func())
}

var kinds = []kind{
	{"redis", func(t *testing.T) (func(Options) *Manager, func(string), func()) {
		r := testsupport.StartRedis(t)
		newManager := func(o Options) *Manager {
			c := redis.NewClient(&redis.Options{Addr: r.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return New(c, o)
		}
		c := redis.NewClient(&redis.Options{Addr: r.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		steal := func(key string) {
			if err := c.Set(context.Background(), key, "someone-else", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		return newManager, steal, r.Stop
	}},
	{"s3", func(t *testing.T) (func(Options) *Manager, func(string), func()) {
		m := testsupport.StartMinIO(t)
		c := m.NewBucket(t, "leases")
		newManager := func(o Options) *Manager { return NewS3(m.Client(t), "leases", o) }
		steal := func(key string) {
			body := []byte("someone-else " + strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10))
			if _, err := c.PutObject(context.Background(), "leases", key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return newManager, steal, m.Stop
	}},
}

// abandon stops renewing without deleting the key: what a crashed holder leaves behind.
func (l *Lease) abandon() {
	l.release.Do(func() { close(l.stop); <-l.done })
}

// TestOneHolder: of many replicas asking at once, one holds the key; after it releases,
// another takes it.
func TestOneHolder(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			newManager, _, _ := k.start(t)
			ctx := context.Background()
			var got atomic.Int32
			var wg sync.WaitGroup
			for range 16 {
				m := newManager(Options{TTL: 10 * time.Second})
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
			m := newManager(Options{TTL: 10 * time.Second})
			if l, err := m.TryAcquire(ctx, "build/x"); err != nil || l != nil {
				t.Fatalf("TryAcquire of a held key = %v, %v; want nil, nil", l, err)
			}
			if _, err := m.Acquire(ctx, "build/x", 100*time.Millisecond); !errors.Is(err, ErrHeld) {
				t.Fatalf("Acquire of a held key = %v, want ErrHeld", err)
			}
		})
	}
}

// TestReleaseHandsOver: a released key is free at once; Release twice is harmless.
func TestReleaseHandsOver(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			newManager, _, _ := k.start(t)
			ctx := context.Background()
			a, b := newManager(Options{}), newManager(Options{})
			l, err := a.TryAcquire(ctx, "upload/1")
			if err != nil || l == nil {
				t.Fatalf("TryAcquire = %v, %v", l, err)
			}
			if held, err := b.Held(ctx, "upload/1"); err != nil || !held {
				t.Fatalf("Held = %v, %v; want true", held, err)
			}
			l.Release()
			l.Release()
			if held, err := b.Held(ctx, "upload/1"); err != nil || held {
				t.Fatalf("Held after release = %v, %v; want false", held, err)
			}
			l2, err := b.TryAcquire(ctx, "upload/1")
			if err != nil || l2 == nil {
				t.Fatalf("TryAcquire after release = %v, %v", l2, err)
			}
			// The first holder's late release must not free the second's key.
			l.Release()
			if held, _ := a.Held(ctx, "upload/1"); !held {
				t.Fatal("a released lease freed its successor's key")
			}
			l2.Release()
		})
	}
}

// TestCrashedHolderExpires: a holder that stops renewing loses the key after the TTL, and a
// waiting replica takes it over.
func TestCrashedHolderExpires(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			newManager, _, _ := k.start(t)
			ctx := context.Background()
			ttl := 500 * time.Millisecond
			a, b := newManager(Options{TTL: ttl}), newManager(Options{TTL: ttl})
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
			if err := a.b.drop(ctx, l.key, l.token); err != nil {
				t.Fatal(err)
			}
			if held, _ := b.Held(ctx, "build/y"); !held {
				t.Fatal("the crashed holder's token freed the new holder's key")
			}
		})
	}
}

// TestRenewalKeepsTheKey: a live holder keeps its key past many TTLs; when its key is taken
// from it (expired in an outage and taken by another), Lost says so.
func TestRenewalKeepsTheKey(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			newManager, steal, _ := k.start(t)
			ctx := context.Background()
			ttl := 600 * time.Millisecond
			a, b := newManager(Options{TTL: ttl}), newManager(Options{TTL: ttl})
			l, err := a.TryAcquire(ctx, "build/z")
			if err != nil || l == nil {
				t.Fatalf("TryAcquire = %v, %v", l, err)
			}
			if _, err := b.Acquire(ctx, "build/z", 5*ttl); !errors.Is(err, ErrHeld) {
				t.Fatalf("Acquire while the holder renews = %v, want ErrHeld", err)
			}
			// Another holder in the key: the next renewal finds it is not the holder.
			steal(l.key)
			select {
			case <-l.Lost():
			case <-time.After(time.Minute):
				t.Fatal("Lost not closed after the key changed hands")
			}
			l.Release()
			if held, _ := b.Held(ctx, "build/z"); !held {
				t.Fatal("release of a lost lease freed the other holder's key")
			}
		})
	}
}

// TestBackendDown: without the backend, TryAcquire fails rather than pretending to hold the key.
func TestBackendDown(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			newManager, _, stop := k.start(t)
			m := newManager(Options{Timeout: 500 * time.Millisecond})
			stop()
			if l, err := m.TryAcquire(context.Background(), "k"); err == nil || l != nil {
				t.Fatalf("TryAcquire without the backend = %v, %v; want an error", l, err)
			}
		})
	}
}

// TestContendedKey: replicas taking and releasing one key over and over, at once: never two
// holders at a time, and no error from a lease read while another replica writes it.
func TestContendedKey(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			newManager, _, _ := k.start(t)
			ctx := context.Background()
			var holders, most, takes atomic.Int32
			var wg sync.WaitGroup
			stop := time.Now().Add(2 * time.Second)
			for range 6 {
				m := newManager(Options{TTL: 10 * time.Second})
				wg.Go(func() {
					for time.Now().Before(stop) {
						l, err := m.TryAcquire(ctx, "hot")
						if err != nil {
							t.Error(err)
							return
						}
						if l == nil {
							continue
						}
						takes.Add(1)
						n := holders.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						time.Sleep(5 * time.Millisecond)
						holders.Add(-1)
						l.Release()
					}
				})
			}
			wg.Wait()
			t.Logf("%d takes in 2 s by 6 replicas", takes.Load())
			if most.Load() != 1 || takes.Load() < 2 {
				t.Fatalf("at most %d holders at a time over %d takes; want 1, and the key handed over", most.Load(), takes.Load())
			}
		})
	}
}
