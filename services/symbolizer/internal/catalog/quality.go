package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// A file whose DWARF needs companions has the quality of what was read with it: a dwz'ed debug
// file read without its supplementary file has no DWARF functions or inline frames, a
// -gsplit-dwarf executable without its package has lines only. The quality a record keeps is
// that of the companions stored when the file was verified (File.QualityVariant); once a
// companion arrives, the file's quality is that of the new companions variant.
//
// That quality is derived when the record is read, from the companions stored at that moment,
// not written into the records that link to a companion when it is stored: a supplementary file
// names no file that links to it (finding them would mean reading every record), a record
// rewritten by the replica that stored the companion can race with a replica rewriting it for
// an upload of its own (records are not compare-and-swapped; the object store offers no
// lock), and an upload that verifies its binary while the companion is being stored would miss
// it either way. Derived on read, the answer follows the store whatever the order of the uploads
// and whichever replica is asked. Its cost is one index build per file and companions variant,
// the same the next symbolization of the file needs: it is stored beside the index of that
// variant (QualityObjectOf), written by whoever builds that index first (a reader here, or
// Symbolize), so every replica reads it once computed, and it goes with the file's other
// objects when the file is replaced or deleted.

// QualityObjectOf is where the quality of the file read with the companions variant names is
// stored, beside that variant's index and, like it, under the index format version (the
// reading that finds it is the index builder's; another release's may find another).
func (f *File) QualityObjectOf(variant string) string {
	return f.Object + variant + formatTag + ".quality"
}

// storedQuality is a quality object.
type storedQuality struct {
	Version int     `json:"version,omitempty"` // as Record.Version
	Quality Quality `json:"quality"`
}

// StoreQuality stores q, found reading f with the companions variant names. A failure is
// logged, not returned: the quality can always be computed again from the files.
func (m *Catalog) StoreQuality(ctx context.Context, f *File, variant string, q Quality) {
	if err := m.writeJSON(ctx, f.QualityObjectOf(variant), storedQuality{Version: recordVersion, Quality: q}); err != nil {
		m.opt.Logger.Warn("store quality", "object", f.QualityObjectOf(variant), "err", err)
	}
}

// QualityWith returns f's quality read with the companions c (as Companions returns them):
// the record's own when it was verified with the same companions, else the one stored for
// their variant, else computed now by reading f with them (and stored, with the index built
// on the way).
func (m *Catalog) QualityWith(ctx context.Context, f *File, c Companions) (Quality, error) {
	variant := c.Variant()
	if !c.Needed() || variant == f.QualityVariant {
		return f.Quality, nil
	}
	key := f.QualityObjectOf(variant)
	q, err := m.readQuality(ctx, key)
	if err == nil {
		return q, nil
	}
	if !errors.Is(err, store.ErrNotExist) {
		return Quality{}, err
	}
	// Readers of one replica asking at once compute it once.
	defer m.locked(key)()
	if q, err := m.readQuality(ctx, key); err == nil {
		return q, nil
	}
	ins, err := m.inspectWith(ctx, f, c)
	var unreadable *unreadableError
	switch {
	case errors.As(err, &unreadable):
		// Not the store's fault, and not going away: the record's quality is the best known,
		// and failing would fail every List page holding the record. Symbolization reports
		// the file when it builds the index.
		m.opt.Logger.Warn("stored file unreadable with its companions; reporting its quality as verified", "object", f.Object, "companions", variant, "err", err)
		return f.Quality, nil
	case err != nil:
		return Quality{}, fmt.Errorf("read %s with its companions: %w", f.BuildID, err)
	}
	if ins.Index != nil {
		m.StoreIndex(ctx, f, variant, ins.Index)
	}
	m.StoreQuality(ctx, f, variant, ins.Quality)
	return ins.Quality, nil
}

// readQuality reads a quality object; one that does not decode counts as absent
// (store.ErrNotExist), so it is computed again and overwritten.
func (m *Catalog) readQuality(ctx context.Context, key string) (Quality, error) {
	var sq storedQuality
	err := m.readJSON(ctx, key, &sq)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if err == nil {
		err = checkVersion(key, sq.Version)
	}
	if errors.As(err, &syn) || errors.As(err, &typ) || errors.Is(err, ErrNewerFormat) {
		m.opt.Logger.Warn("stored quality unusable; computing it again", "object", key, "err", err)
		return Quality{}, fmt.Errorf("%s: %w", key, store.ErrNotExist)
	}
	return sq.Quality, err
}

// unreadableError is an inspection that failed on the files' content, not on the store.
type unreadableError struct{ err error }

func (e *unreadableError) Error() string { return e.err.Error() }
func (e *unreadableError) Unwrap() error { return e.err }

// inspectWith reads the stored file f with the stored companions c. Failures to fetch either
// are returned as they are; a failure to read them is an *unreadableError.
func (m *Catalog) inspectWith(ctx context.Context, f *File, c Companions) (*Inspection, error) {
	path, cleanup, err := store.LocalCopy(ctx, m.s, f.Object, m.opt.TempDir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	opts, done, err := c.Fetch(ctx, m.s, m.opt.TempDir)
	if err != nil {
		return nil, err
	}
	defer done()
	// c was found from f's own links, which are the ones Inspect reads again.
	ins, err := Inspect(path, m.opt.Limits, func(string, string) (Companions, debuginfo.Options, func(), error) {
		return c, opts, func() {}, nil
	})
	if err != nil {
		return nil, &unreadableError{HidePath(err, path, f.Object)}
	}
	return ins, nil
}
