package server

import (
	"context"
	"errors"
	"time"

	"github.com/profsym/profsym/pkg/degraded"
	"github.com/profsym/profsym/pkg/lease"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/retention"
	"github.com/profsym/profsym/services/symbolizer/internal/symbolizeapi"
	"github.com/profsym/profsym/services/symbolizer/internal/tenant"
)

// leaseLocks coordinates replicas through leases in Redis: record changes (catalog.Locker)
// and index builds (symbolizeapi.BuildLocker). While Redis does not answer, each replica goes
// on alone, as it would without Redis, and the tracker says so in the logs.
type leaseLocks struct {
	m       *lease.Manager
	tracker *degraded.Tracker
}

func newLeaseLocks(m *lease.Manager, tracker *degraded.Tracker) *leaseLocks {
	return &leaseLocks{m: m, tracker: tracker}
}

// catalog returns tenant t's record locker, nil when there are no leases. Each locker takes
// its keys in its tenant's part of the leases (tenant.Key), so one tenant's upload or build
// never holds up, nor shows in, another's.
func (l *leaseLocks) catalog(t string) catalog.Locker {
	if l == nil {
		return nil
	}
	return recordLocks{l, t}
}

// builds returns tenant t's build locker, nil when there are no leases.
func (l *leaseLocks) builds(t string) symbolizeapi.BuildLocker {
	if l == nil {
		return nil
	}
	return buildLocks{l, t}
}

// sweeps returns tenant t's retention sweep locker, nil when there are no leases.
func (l *leaseLocks) sweeps(t string) retention.Locker {
	if l == nil {
		return nil
	}
	return sweepLocks{l, t}
}

type sweepLocks struct {
	*leaseLocks
	tenant string
}

func (s sweepLocks) TryLock(ctx context.Context, key string) (func(), <-chan struct{}, bool, error) {
	ls, err := s.m.TryAcquire(ctx, tenant.Key(s.tenant, key))
	if err != nil || ls == nil {
		return nil, nil, false, err
	}
	return ls.Release, ls.Lost(), true, nil
}

type recordLocks struct {
	*leaseLocks
	tenant string
}

func (r recordLocks) Lock(ctx context.Context, key string, wait time.Duration) (func(), error) {
	start := time.Now()
	ls, err := r.m.Acquire(ctx, tenant.Key(r.tenant, key), wait)
	switch {
	case errors.Is(err, lease.ErrHeld):
		r.tracker.OKStarted(start)
		return nil, catalog.ErrLocked
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		r.tracker.Fail(err)
		return func() {}, nil
	}
	r.tracker.OKStarted(start)
	return ls.Release, nil
}

type buildLocks struct {
	*leaseLocks
	tenant string
}

func (b buildLocks) TryLock(ctx context.Context, key string) (func(), bool, error) {
	start := time.Now()
	ls, err := b.m.TryAcquire(ctx, tenant.Key(b.tenant, key))
	if err != nil {
		b.tracker.Fail(err)
		return nil, false, err
	}
	b.tracker.OKStarted(start)
	if ls == nil {
		return nil, false, nil
	}
	return ls.Release, true, nil
}
