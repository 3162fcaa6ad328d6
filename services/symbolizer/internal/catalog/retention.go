package catalog

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// Records returns every record that holds a file (available or invalid), by key: what
// retention decides about. Records holding only an upload in progress are left out.
func (m *Catalog) Records(ctx context.Context) ([]*Record, error) {
	keys, err := m.s.List(ctx, "records/")
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, k := range keys {
		if !strings.HasSuffix(k, "/record.json") {
			continue
		}
		r, err := m.loadRecord(ctx, strings.TrimSuffix(k, "/record.json"))
		if err != nil {
			return nil, err
		}
		if r.Current != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// DeleteIf deletes the record at key, with its files, aliases and DWARF package, if still
// says yes of the record as it stands under the record's lock (shared with the other
// replicas): a record that changed since the caller looked (an upload started or finished)
// is the caller's to judge again. deleted is false when still said no, when the record is
// gone, or when another replica held its lock for the whole wait (it is changing the
// record: an upload, which wins).
func (m *Catalog) DeleteIf(ctx context.Context, key string, still func(*Record) bool) (deleted bool, err error) {
	if !strings.HasPrefix(key, "records/") {
		return false, fmt.Errorf("%q is not a record key", key)
	}
	unlock, err := m.lockedShared(ctx, key, m.opt.InitiateWait)
	if errors.Is(err, ErrLocked) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unlock()
	r, err := m.loadRecord(ctx, key)
	if err != nil {
		return false, err
	}
	if r.Current == nil || !still(r) {
		return false, nil
	}
	if err := m.deleteLocked(ctx, r); err != nil {
		return false, err
	}
	return true, nil
}

// SweepOrphans deletes the objects under records/ whose record is gone: an index or string
// table that a lookup, which read the record before it was deleted, stored after. Each record
// directory is looked at again under the record's lock, which an upload takes before it
// writes anything there, so an upload starting meanwhile keeps its objects. dryRun counts
// without deleting. It returns the objects deleted (or that would be).
func (m *Catalog) SweepOrphans(ctx context.Context, dryRun bool) (int, error) {
	keys, err := m.s.List(ctx, "records/")
	if err != nil {
		return 0, err
	}
	objs := map[string][]string{}
	live := map[string]bool{}
	for _, k := range keys {
		dir, base := path.Split(k)
		dir = strings.TrimSuffix(dir, "/")
		if base == "record.json" {
			live[dir] = true
		} else {
			objs[dir] = append(objs[dir], k)
		}
	}
	n := 0
	for dir, ks := range objs {
		if live[dir] {
			continue
		}
		if dryRun {
			n += len(ks)
			continue
		}
		deleted, err := m.deleteOrphans(ctx, dir, ks)
		n += deleted
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (m *Catalog) deleteOrphans(ctx context.Context, dir string, keys []string) (int, error) {
	unlock, err := m.lockedShared(ctx, dir, m.opt.InitiateWait)
	if errors.Is(err, ErrLocked) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unlock()
	if _, err := m.s.Size(ctx, dir+"/record.json"); err == nil {
		return 0, nil // an upload made the record again
	} else if !errors.Is(err, store.ErrNotExist) {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		if err := m.s.Delete(ctx, k); err != nil {
			return n, err
		}
		m.opt.Logger.Info("deleted an object whose record is gone", "object", k)
		n++
	}
	return n, nil
}
