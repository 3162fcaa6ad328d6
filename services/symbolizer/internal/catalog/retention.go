package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
