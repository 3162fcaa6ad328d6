package queue_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/profsym/profsym/services/gateway/internal/queue"
)

func TestGroupAllOrNone(t *testing.T) {
	block := make(chan struct{})
	send := func(ctx context.Context, _ queue.Item) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil
	}
	small := queue.New(queue.Config{Name: "small", MaxBytes: 100}, send)
	big := queue.New(queue.Config{Name: "big", MaxBytes: 1000}, send)
	g := queue.NewGroup(small, big)
	if err := g.Offer(queue.Item{Bytes: 500}); err != nil {
		t.Fatalf("an empty queue takes any single item: %v", err)
	}
	if err := g.Offer(queue.Item{Bytes: 10}); !errors.Is(err, queue.ErrFull) {
		t.Fatalf("offer to a full queue: %v, want ErrFull", err)
	}
	if small.Bytes() != 500 || big.Bytes() != 500 {
		t.Fatalf("a refused item was queued somewhere: small %d, big %d", small.Bytes(), big.Bytes())
	}
	close(block)
	deadline := time.Now().Add(5 * time.Second)
	for small.Bytes() != 0 || big.Bytes() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("queues never drained")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	g.Close(ctx)
	if err := g.Offer(queue.Item{Bytes: 1}); !errors.Is(err, queue.ErrFull) {
		t.Fatalf("offer after close: %v", err)
	}
}

func TestRetriesAndOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		failures    int
		permanent   bool
		wantSent    int64
		wantFailed  int64
		wantDropped bool
	}{
		{name: "first try", wantSent: 1},
		{name: "transient failures then success", failures: 3, wantSent: 1, wantFailed: 3},
		{name: "permanent", failures: 1, permanent: true, wantFailed: 1, wantDropped: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls, sent, failed atomic.Int64
			var dropped atomic.Bool
			done := make(chan struct{})
			var once sync.Once
			q := queue.New(queue.Config{Name: "q", MaxBytes: 10, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
				Hooks: queue.Hooks{
					Sent: func(queue.Item) { sent.Add(1); once.Do(func() { close(done) }) },
					Failed: func(_ queue.Item, _ error, permanent bool) {
						failed.Add(1)
						if permanent {
							dropped.Store(true)
							once.Do(func() { close(done) })
						}
					},
				}},
				func(context.Context, queue.Item) error {
					if int(calls.Add(1)) <= tc.failures {
						if tc.permanent {
							return queue.Permanent(errors.New("rejected"))
						}
						return errors.New("unreachable")
					}
					return nil
				})
			if !q.Push(queue.Item{Bytes: 1, Samples: 3}) {
				t.Fatal("push refused")
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("item neither sent nor dropped")
			}
			q.Close(context.Background())
			if sent.Load() != tc.wantSent || failed.Load() != tc.wantFailed || dropped.Load() != tc.wantDropped {
				t.Fatalf("sent %d failed %d dropped %v; want %d %d %v", sent.Load(), failed.Load(), dropped.Load(), tc.wantSent, tc.wantFailed, tc.wantDropped)
			}
		})
	}
}

func TestCloseReportsLost(t *testing.T) {
	var lost atomic.Int64
	q := queue.New(queue.Config{Name: "q", MaxBytes: 100, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		Hooks: queue.Hooks{Lost: func(it queue.Item) { lost.Add(int64(it.Samples)) }}},
		func(context.Context, queue.Item) error { return errors.New("down") })
	for range 3 {
		q.Push(queue.Item{Bytes: 1, Samples: 5})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	q.Close(ctx)
	if lost.Load() != 15 {
		t.Fatalf("%d samples reported lost, want 15", lost.Load())
	}
}
