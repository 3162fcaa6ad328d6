package catalog

import (
	"bytes"
	"context"
	"strconv"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// formatTag names the index format version in the keys of what is derived from a file by the
// index builder: its index, string table and quality per companions variant. Releases of
// another format keep theirs under other keys, so replicas of two releases sharing one store
// (a rolling upgrade, a rollback) each read their own and never rebuild the other's in turn.
var formatTag = ".v" + strconv.Itoa(index.FormatVersion)

// IndexObject is where the file's serialized index is stored.
func (f *File) IndexObject() string { return f.IndexObjectOf("") }

// IndexObjectOf is where the index built with the companions variant names (see
// Companions.Variant) is stored.
func (f *File) IndexObjectOf(variant string) string {
	return f.Object + variant + formatTag + ".index"
}

// LegacyIndexObjectOf is where releases before per-format keys stored the index of a
// companions variant, whatever its format version: an index there may be read when its header
// says it is of this build's format (index.Unmarshal checks), never written.
func (f *File) LegacyIndexObjectOf(variant string) string { return f.Object + variant + ".index" }

// StringsObject is where the string table of the file's index is stored on its own: a
// replica reads results cached as string IDs with it, without loading the whole index.
func (f *File) StringsObject() string { return f.StringsObjectOf("") }

// StringsObjectOf is StringsObject for the index of a companions variant. A string table's
// header does not say which index format it came from, so, unlike the index, the table of a
// release before per-format keys (at Object+variant+".strings") is never read.
func (f *File) StringsObjectOf(variant string) string {
	return f.Object + variant + formatTag + ".strings"
}

// StoreIndex stores ix, built from f with the companions variant names, and its string table. A failure is logged, not
// returned: the index can always be built again from the file.
func (m *Catalog) StoreIndex(ctx context.Context, f *File, variant string, ix *index.Index) {
	blob, err := ix.MarshalBinary()
	if err == nil {
		err = m.s.Put(ctx, f.IndexObjectOf(variant), bytes.NewReader(blob), int64(len(blob)))
	}
	if err != nil {
		m.opt.Logger.Warn("store index", "object", f.IndexObjectOf(variant), "err", err)
	}
	m.StoreStrings(ctx, f, variant, ix)
}

// StoreStrings stores the string table of ix, built from f; a failure is logged.
func (m *Catalog) StoreStrings(ctx context.Context, f *File, variant string, ix *index.Index) {
	blob := ix.MarshalStrings()
	if err := m.s.Put(ctx, f.StringsObjectOf(variant), bytes.NewReader(blob), int64(len(blob))); err != nil {
		m.opt.Logger.Warn("store string table", "object", f.StringsObjectOf(variant), "err", err)
	}
}

// AdoptIndex copies the index of f read from its legacy key (it decoded as this build's
// format) to its per-format key, and stores its string table there: the next reader finds
// both at once. A failure is logged; the legacy index stays where it is for the releases that
// read it there.
func (m *Catalog) AdoptIndex(ctx context.Context, f *File, variant string, ix *index.Index) {
	if err := m.s.Copy(ctx, f.LegacyIndexObjectOf(variant), f.IndexObjectOf(variant)); err != nil {
		m.opt.Logger.Warn("copy index to its format's key", "object", f.IndexObjectOf(variant), "err", err)
	}
	m.StoreStrings(ctx, f, variant, ix)
}
