// Package periodic runs the symbolizer's write-behind flushes (coverage reports, usage records):
// one flush every interval, and a last one when the context ends, so a clean shutdown loses
// nothing that was recorded.
package periodic

import (
	"context"
	"log/slog"
	"time"
)

// finalFlush bounds the last flush at shutdown, whose context is already done.
const finalFlush = 10 * time.Second

// Flush calls flush every interval until ctx ends, then once more with a fresh deadline. Each
// call gets at most one interval; a failed flush is logged as "write WHAT" and retried at the
// next tick with whatever was recorded meanwhile.
func Flush(ctx context.Context, interval time.Duration, logger *slog.Logger, what string, flush func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalFlush)
			if err := flush(fctx); err != nil {
				logger.Warn("write "+what+" at shutdown", "err", err)
			}
			cancel()
			return
		case <-t.C:
			fctx, cancel := context.WithTimeout(ctx, interval)
			if err := flush(fctx); err != nil {
				logger.Warn("write "+what, "err", err)
			}
			cancel()
		}
	}
}
