package catalog

import (
	"context"
	"errors"
	"strings"
)

// Sweep deletes upload bytes nobody can finish any more: those of expired or ended uploads,
// and objects a client PUT after its upload was finished by another client. It returns how
// many objects it removed.
func (m *Catalog) Sweep(ctx context.Context) (int, error) {
	now := m.opt.Now()
	removed := 0
	live := map[string]bool{}
	idx, err := m.s.List(ctx, "uploads-index/")
	if err != nil {
		return 0, err
	}
	for _, k := range idx {
		id := strings.TrimPrefix(k, "uploads-index/")
		var a alias
		if err := m.readJSON(ctx, k, &a); err != nil {
			continue
		}
		r, err := m.loadRecord(ctx, a.Record)
		if err != nil {
			return removed, err
		}
		if p := r.Pending; p != nil && p.ID == id && now.Before(p.ExpiresAt) {
			live[id] = true
			continue
		}
		if err := errors.Join(m.s.Delete(ctx, "uploads/"+id), m.s.Delete(ctx, k)); err != nil {
			return removed, err
		}
		removed++
	}
	objs, err := m.s.List(ctx, "uploads/")
	if err != nil {
		return removed, err
	}
	for _, k := range objs {
		id := strings.TrimPrefix(k, "uploads/")
		if live[id] {
			continue
		}
		// Initiated after the index was listed: still live.
		if _, err := m.PendingUpload(ctx, id); err == nil {
			continue
		}
		if err := m.s.Delete(ctx, k); err != nil {
			return removed, err
		}
		removed++
	}
	return removed, nil
}
