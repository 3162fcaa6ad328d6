package debugupload

import (
	"context"
	"io"
	"sync"
	"time"
)

// bucket is a token bucket over bytes: tokens accrue at rate per second up to burst.
type bucket struct {
	mu    sync.Mutex
	rate  float64
	burst float64
	have  float64
	at    time.Time
	now   func() time.Time
}

func newBucket(rate float64, burst int64) *bucket {
	burst = max(burst, 1)
	return &bucket{rate: rate, burst: float64(burst), have: float64(burst), at: time.Now(), now: time.Now}
}

// reserve takes n tokens (n at most burst) and returns how long to wait before using them.
func (b *bucket) reserve(n int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.have = min(b.burst, b.have+now.Sub(b.at).Seconds()*b.rate)
	b.at = now
	b.have -= float64(n)
	if b.have >= 0 {
		return 0
	}
	return time.Duration(-b.have / b.rate * float64(time.Second))
}

// wait blocks until n tokens are available or ctx ends.
func (b *bucket) wait(ctx context.Context, n int) error {
	d := b.reserve(n)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// limitedReader paces reads through a bucket.
type limitedReader struct {
	ctx context.Context
	r   io.Reader
	b   *bucket
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if max := max(int(l.b.burst), 1); len(p) > max {
		p = p[:max]
	}
	n, err := l.r.Read(p)
	if n > 0 {
		if werr := l.b.wait(l.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}
