package catalog

import (
	"bytes"
	"context"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// IndexObject is where the file's serialized index is stored.
func (f *File) IndexObject() string { return f.IndexObjectOf("") }

// IndexObjectOf is where the index built with the companions variant names (see
// Companions.Variant) is stored.
func (f *File) IndexObjectOf(variant string) string { return f.Object + variant + ".index" }

// StringsObject is where the string table of the file's index is stored on its own: a
// replica reads results cached as string IDs with it, without loading the whole index.
func (f *File) StringsObject() string { return f.StringsObjectOf("") }

// StringsObjectOf is StringsObject for the index of a companions variant.
func (f *File) StringsObjectOf(variant string) string { return f.Object + variant + ".strings" }

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
