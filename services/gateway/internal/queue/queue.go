// Package queue holds accepted profiles for one exporter, bounded in bytes, and sends them with
// retries and backoff. A full queue is the gateway's backpressure signal: the receivers answer
// UNAVAILABLE / 503 rather than drop data.
package queue

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/degraded"
)

// Item is one accepted request, read-only once queued (several exporters share it).
type Item struct {
	Profiles pprofile.Profiles
	// Bytes is the request's encoded size, counted against the queue bound.
	Bytes int64
	// Samples is the request's sample count, for accounting.
	Samples int
}

// PermanentError marks a send error that retrying cannot fix (the downstream rejected the
// data as malformed, say). The item is dropped, logged and counted.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a PermanentError.
func Permanent(err error) error { return &PermanentError{Err: err} }

// Sender sends one item; it is retried until it succeeds, returns a PermanentError, or the
// queue shuts down.
type Sender func(ctx context.Context, it Item) error

// Hooks report what happened; any may be nil.
type Hooks struct {
	Sent   func(it Item)
	Failed func(it Item, err error, permanent bool)
	Lost   func(it Item)
}

// Config configures a Queue.
type Config struct {
	Name     string
	MaxBytes int64
	Workers  int
	// MinBackoff and MaxBackoff bound the delay between attempts (defaults 100ms, 5s).
	MinBackoff, MaxBackoff time.Duration
	Hooks                  Hooks
}

// Queue is a bounded FIFO with sending workers.
type Queue struct {
	cfg    Config
	send   Sender
	mu     sync.Mutex
	cond   *sync.Cond
	items  []Item
	bytes  int64 // queued plus in flight
	done   bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// health tells a downstream outage in the log once when it starts, each minute while it
	// lasts and when it ends, instead of once per retry.
	health *degraded.Tracker
}

// New starts a queue with its workers.
func New(cfg Config, send Sender) *Queue {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	q := &Queue{cfg: cfg, send: send,
		health: degraded.New("downstream "+cfg.Name, "acknowledged requests wait in the queue and are retried with backoff", time.Minute, slog.Default())}
	q.cond = sync.NewCond(&q.mu)
	q.ctx, q.cancel = context.WithCancel(context.Background())
	for range cfg.Workers {
		q.wg.Add(1)
		go q.worker()
	}
	return q
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.cfg.Name }

// Bytes returns the bytes queued or in flight.
func (q *Queue) Bytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// Fits reports whether n more bytes fit. An empty queue takes any single item, so a request
// larger than the bound is not refused forever.
func (q *Queue) Fits(n int64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.done && (q.bytes == 0 || q.bytes+n <= q.cfg.MaxBytes)
}

// Push adds it unconditionally; callers check Fits first (Group does both under one lock).
func (q *Queue) Push(it Item) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.done {
		return false
	}
	q.items = append(q.items, it)
	q.bytes += it.Bytes
	q.cond.Signal()
	return true
}

func (q *Queue) worker() {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		for len(q.items) == 0 && !q.done {
			q.cond.Wait()
		}
		if len(q.items) == 0 {
			q.mu.Unlock()
			return
		}
		it := q.items[0]
		q.items[0] = Item{}
		q.items = q.items[1:]
		q.mu.Unlock()

		q.deliver(it)

		q.mu.Lock()
		q.bytes -= it.Bytes
		q.mu.Unlock()
	}
}

func (q *Queue) deliver(it Item) {
	delay := q.cfg.MinBackoff
	for {
		err := q.send(q.ctx, it)
		if err == nil {
			q.health.OK()
			if q.cfg.Hooks.Sent != nil {
				q.cfg.Hooks.Sent(it)
			}
			return
		}
		var perm *PermanentError
		permanent := errors.As(err, &perm)
		if q.cfg.Hooks.Failed != nil {
			q.cfg.Hooks.Failed(it, err, permanent)
		}
		if permanent {
			slog.Error("export rejected by downstream; request dropped", "exporter", q.cfg.Name, "samples", it.Samples, "err", err)
			return
		}
		q.health.Fail(err)
		slog.Debug("export failed; retrying", "exporter", q.cfg.Name, "delay", delay, "err", err)
		select {
		case <-q.ctx.Done():
			if q.cfg.Hooks.Lost != nil {
				q.cfg.Hooks.Lost(it)
			}
			slog.Error("shutdown before export succeeded; request lost", "exporter", q.cfg.Name, "samples", it.Samples)
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, q.cfg.MaxBackoff)
	}
}

// Close stops accepting items and lets the workers drain the queue until ctx ends; then it
// cancels the sends in flight and reports what was left as lost.
func (q *Queue) Close(ctx context.Context) {
	q.mu.Lock()
	q.done = true
	q.cond.Broadcast()
	q.mu.Unlock()
	drained := make(chan struct{})
	go func() { q.wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-ctx.Done():
		q.cancel()
		<-drained
	}
	q.cancel()
	q.mu.Lock()
	left := q.items
	q.items = nil
	q.mu.Unlock()
	for _, it := range left {
		if q.cfg.Hooks.Lost != nil {
			q.cfg.Hooks.Lost(it)
		}
		slog.Error("shutdown before export; request lost", "exporter", q.cfg.Name, "samples", it.Samples)
	}
}

// Group fans accepted items out to several queues, all or none.
type Group struct {
	mu     sync.Mutex
	queues []*Queue
}

// NewGroup returns a group over queues.
func NewGroup(queues ...*Queue) *Group { return &Group{queues: queues} }

// Queues returns the group's queues.
func (g *Group) Queues() []*Queue { return g.queues }

// ErrFull is returned by Offer when some queue has no room; the sender should retry later.
var ErrFull = errors.New("export queue full")

// Offer queues it on every queue, or on none when one of them is full or closed.
func (g *Group) Offer(it Item) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range g.queues {
		if !q.Fits(it.Bytes) {
			return ErrFull
		}
	}
	// Workers only ever shrink a queue, so what fit a moment ago still fits under g.mu.
	for _, q := range g.queues {
		if !q.Push(it) {
			return ErrFull
		}
	}
	return nil
}

// Close closes every queue, sharing ctx's deadline.
func (g *Group) Close(ctx context.Context) {
	var wg sync.WaitGroup
	for _, q := range g.queues {
		wg.Add(1)
		go func() { defer wg.Done(); q.Close(ctx) }()
	}
	wg.Wait()
}
