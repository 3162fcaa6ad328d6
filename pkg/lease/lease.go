// Package lease is a lock shared by the replicas of a service: a key in Redis (single node,
// Sentinel or Cluster), or for replicas without Redis an object in their S3 bucket written
// with conditional requests, that one holder owns until it releases it or stops renewing it. A
// holder that crashes stops renewing, its key expires after the TTL, and another takes over.
//
// A lease is advisory: it makes one replica do a costly job (build an index, accept an
// upload) while the others wait, and it is never the only thing that keeps data right. When
// Redis cannot be reached, Acquire fails and callers carry on without it, as each replica
// did alone before.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrHeld is returned by Acquire when another holder kept the key for the whole wait.
var ErrHeld = errors.New("lease held by another holder")

// Options configures a Manager.
type Options struct {
	// Prefix is put before every key (default "profsym:lease:"). In Redis Cluster each key
	// lives in its own slot; a lease touches one key per command.
	Prefix string
	// TTL is how long a key outlives its holder's last renewal (default 15s). The holder
	// renews at a third of it.
	TTL time.Duration
	// Timeout bounds one Redis call (default 1s).
	Timeout time.Duration
	Logger  *slog.Logger
}

// backend is where leases live: each operation is atomic there.
type backend interface {
	// take makes token the key's holder for ttl unless a live holder has it (false).
	take(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// renew extends the key for ttl while token holds it (false: it was lost).
	renew(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// drop ends the key while token holds it.
	drop(ctx context.Context, key, token string) error
	// held reports whether a live holder has the key.
	held(ctx context.Context, key string) (bool, error)
}

// Manager hands out leases over one backend.
type Manager struct {
	b   backend
	opt Options
}

// New returns a Manager of leases in Redis.
func New(c redis.UniversalClient, opt Options) *Manager {
	if opt.Prefix == "" {
		opt.Prefix = "profsym:lease:"
	}
	return newManager(redisBackend{c}, opt)
}

func newManager(b backend, opt Options) *Manager {
	if opt.TTL <= 0 {
		opt.TTL = 15 * time.Second
	}
	if opt.Timeout <= 0 {
		opt.Timeout = time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	return &Manager{b: b, opt: opt}
}

// TTL is the leases' time to live after the last renewal.
func (m *Manager) TTL() time.Duration { return m.opt.TTL }

// Lease is a held key. Its holder renews it in the background until Release.
type Lease struct {
	m     *Manager
	key   string
	token string

	stop     chan struct{}
	done     chan struct{}
	lost     chan struct{}
	lostOnce sync.Once
	release  sync.Once
}

// renew extends the key only while it still holds this holder's token, so a holder that
// lost its key (it expired and another took it) never extends the other's.
var renew = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`)

// drop deletes the key only while it holds this holder's token.
var drop = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0`)

// TryAcquire takes the key if no one holds it. It returns nil and no error when another
// holds it, and an error when Redis did not answer.
func (m *Manager) TryAcquire(ctx context.Context, key string) (*Lease, error) {
	var rnd [16]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("lease token: %w", err)
	}
	token := hex.EncodeToString(rnd[:])
	full := m.opt.Prefix + key
	cctx, cancel := context.WithTimeout(ctx, m.opt.Timeout)
	defer cancel()
	ok, err := m.b.take(cctx, full, token, m.opt.TTL)
	if err != nil {
		return nil, fmt.Errorf("take lease %s: %w", full, err)
	}
	if !ok {
		return nil, nil
	}
	l := &Lease{m: m, key: full, token: token, stop: make(chan struct{}), done: make(chan struct{}), lost: make(chan struct{})}
	go l.keepAlive()
	return l, nil
}

// Acquire takes the key, waiting up to wait while another holds it (ErrHeld after that).
func (m *Manager) Acquire(ctx context.Context, key string, wait time.Duration) (*Lease, error) {
	deadline := time.Now().Add(wait)
	pause := 20 * time.Millisecond
	for {
		l, err := m.TryAcquire(ctx, key)
		if err != nil || l != nil {
			return l, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("%s: %w", key, ErrHeld)
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(pause*2, 500*time.Millisecond)
	}
}

// Held reports whether anyone holds the key.
func (m *Manager) Held(ctx context.Context, key string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, m.opt.Timeout)
	defer cancel()
	held, err := m.b.held(cctx, m.opt.Prefix+key)
	if err != nil {
		return false, fmt.Errorf("look up lease %s: %w", m.opt.Prefix+key, err)
	}
	return held, nil
}

func (l *Lease) keepAlive() {
	defer close(l.done)
	every := l.m.opt.TTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.m.opt.Timeout)
		ok, err := l.m.b.renew(ctx, l.key, l.token, l.m.opt.TTL)
		cancel()
		switch {
		case err != nil:
			// The backend is away: the key may still be ours; the next renewal may reach it.
			l.m.opt.Logger.Warn("renew lease", "key", l.key, "err", err)
		case !ok:
			l.m.opt.Logger.Warn("lease lost: it expired before it was renewed", "key", l.key)
			l.lostOnce.Do(func() { close(l.lost) })
			return
		}
	}
}

// Lost is closed when the holder learns that its key expired and may be held by another.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Release stops renewing and deletes the key if it is still this holder's. It is safe to
// call more than once.
func (l *Lease) Release() {
	l.release.Do(func() {
		close(l.stop)
		<-l.done
		ctx, cancel := context.WithTimeout(context.Background(), l.m.opt.Timeout)
		defer cancel()
		if err := l.m.b.drop(ctx, l.key, l.token); err != nil {
			// It expires by itself after the TTL.
			l.m.opt.Logger.Warn("release lease", "key", l.key, "err", err)
		}
	})
}

// redisBackend keeps a lease as a key holding its holder's token, with the TTL as its expiry.
type redisBackend struct{ c redis.UniversalClient }

func (b redisBackend) take(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	err := b.c.SetArgs(ctx, key, token, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}

func (b redisBackend) renew(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	n, err := renew.Run(ctx, b.c, []string{key}, token, ttl.Milliseconds()).Int()
	return n == 1, err
}

func (b redisBackend) drop(ctx context.Context, key, token string) error {
	return drop.Run(ctx, b.c, []string{key}, token).Err()
}

func (b redisBackend) held(ctx context.Context, key string) (bool, error) {
	n, err := b.c.Exists(ctx, key).Result()
	return n > 0, err
}
