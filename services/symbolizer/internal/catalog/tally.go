package catalog

import (
	"context"
	"strings"
	"time"
)

// Tally sums what the records hold, for quotas: bytes is the size of every record's file plus
// that of every live upload in progress (reserved: it may land), and uploads counts the files
// uploaded at or after since plus the live uploads started then or later. It reads every
// record.
func (m *Catalog) Tally(ctx context.Context, since time.Time) (bytes uint64, uploads int, err error) {
	keys, err := m.s.List(ctx, "records/")
	if err != nil {
		return 0, 0, err
	}
	now := m.opt.Now()
	for _, k := range keys {
		if !strings.HasSuffix(k, "/record.json") {
			continue
		}
		r, err := m.loadRecord(ctx, strings.TrimSuffix(k, "/record.json"))
		if err != nil {
			return 0, 0, err
		}
		if f := r.Current; f != nil {
			bytes += f.Size
			if !f.UploadedAt.Before(since) {
				uploads++
			}
		}
		if p := r.Pending; p != nil && now.Before(p.ExpiresAt) {
			bytes += p.Size
			if !p.ExpiresAt.Add(-m.opt.UploadTTL).Before(since) {
				uploads++
			}
		}
	}
	return bytes, uploads, nil
}
