package tenant

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrQuota is wrapped when an upload would take a tenant past its quota.
var ErrQuota = errors.New("over quota")

// Limiter admits a tenant's uploads within its quota. It counts from the store (Tally) at
// most every MaxAge and adds what it admitted since, so replicas sharing a store agree on
// the count within MaxAge of each other's uploads.
type Limiter struct {
	Tenant string
	// Quota returns the tenant's quota now (the tokens file is reloaded with SIGHUP).
	Quota func() Quota
	// Tally returns the bytes the tenant's records hold and the uploads started since.
	Tally  func(ctx context.Context, since time.Time) (bytes uint64, uploads int, err error)
	Now    func() time.Time
	MaxAge time.Duration

	mu      sync.Mutex
	at      time.Time // when the counts were tallied; zero: never
	day     time.Time // the UTC day the upload count is of
	bytes   uint64
	uploads int
}

// Admit reserves an upload of size bytes, or says which bound it would pass.
func (l *Limiter) Admit(ctx context.Context, size uint64) error {
	q := l.Quota()
	if q.Bytes == 0 && q.UploadsPerDay == 0 {
		return nil
	}
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	maxAge := l.MaxAge
	if maxAge <= 0 {
		maxAge = 10 * time.Second
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := now().UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	if l.at.IsZero() || t.Sub(l.at) >= maxAge || !day.Equal(l.day) {
		b, n, err := l.Tally(ctx, day)
		if err != nil {
			return fmt.Errorf("tenant %s: count stored bytes and uploads: %w", l.Tenant, err)
		}
		l.at, l.day, l.bytes, l.uploads = t, day, b, n
	}
	if q.UploadsPerDay > 0 && l.uploads >= q.UploadsPerDay {
		return fmt.Errorf("tenant %s: %w: %d uploads started today (UTC) of %d a day", l.Tenant, ErrQuota, l.uploads, q.UploadsPerDay)
	}
	if q.Bytes > 0 && l.bytes+size > q.Bytes {
		return fmt.Errorf("tenant %s: %w: %d bytes stored and %d more would pass its %d bytes", l.Tenant, ErrQuota, l.bytes, size, q.Bytes)
	}
	l.uploads++
	l.bytes += size
	return nil
}
