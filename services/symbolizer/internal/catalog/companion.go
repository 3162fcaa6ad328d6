package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// Companion files are stored like any other upload but are no binaries: a supplementary
// DWARF file (dwz's common file) is a record of its own under the ID links name it by, and
// a DWARF package (.dwp), which has no ID of its own, is a record beside the binary's,
// under the executable's GNU build ID (packageKey), so it never competes with the binary's
// debug file for the ID.
//
// An index read with companions depends on them: it is stored and cached under a variant
// of the file's key that names the companions it was built with (Companions.Variant), so an
// index built while a companion was missing is never taken for one built with it. Once the
// companion arrives the variant changes, and the next symbolization builds the full index.

// packageKey is where the DWARF package of the binary with GNU build ID id is recorded.
func packageKey(id ID) string { return "records/dwp/" + id.pathPart() }

func validGNU(id string) bool {
	return ValidateID(debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, id) == nil
}

// isCompanion reports whether files of type t are companions rather than binaries.
func isCompanion(t debuginfov1.DebuginfoType) bool {
	return t == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY || t == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DWARF_PACKAGE
}

// IsCompanion reports whether the file is a supplementary file or a DWARF package, which
// symbolize nothing alone.
func (f *File) IsCompanion() bool { return isCompanion(f.Type) }

// keyFor returns the record an upload of type typ under id belongs to: a DWARF package's
// own, else the record the ID resolves to.
func (m *Catalog) keyFor(ctx context.Context, id ID, typ debuginfov1.DebuginfoType) (string, error) {
	if typ == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DWARF_PACKAGE {
		if id.Type != debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU {
			return "", fmt.Errorf("a DWARF package is stored under the GNU build ID of its executable, not a %s ID", typeName(id.Type))
		}
		return packageKey(id), nil
	}
	key, _, err := m.recordKeyFor(ctx, id)
	return key, err
}

// Companions is what a stored file's DWARF needs beside it, as the store holds it now.
type Companions struct {
	// SupplementaryID is the ID of the supplementary file the DWARF names ("" for none);
	// Supplementary its stored file, nil while missing.
	SupplementaryID string
	Supplementary   *File
	// PackageID is the GNU build ID a DWARF package would be stored under; NeedsPackage is
	// set when the DWARF has skeleton units; Package is the stored package, nil when none.
	PackageID    string
	NeedsPackage bool
	Package      *File
}

// Needed reports whether the file needs any companion.
func (c Companions) Needed() bool { return c.SupplementaryID != "" || c.NeedsPackage }

// Missing reports whether a companion the file needs is not stored.
func (c Companions) Missing() bool {
	return c.SupplementaryID != "" && c.Supplementary == nil || c.NeedsPackage && c.Package == nil
}

// Variant names the companions an index of the file was (or is to be) built with: "" when
// the file needs none, so indexes of other files keep their keys.
func (c Companions) Variant() string {
	var b strings.Builder
	if c.SupplementaryID != "" {
		if c.Supplementary != nil {
			b.WriteString(".sup-" + prefix16(c.Supplementary.SHA256))
		} else {
			b.WriteString(".nosup")
		}
	}
	if c.NeedsPackage {
		if c.Package != nil {
			b.WriteString(".dwp-" + prefix16(c.Package.SHA256))
		} else {
			b.WriteString(".nodwp")
		}
	}
	return b.String()
}

// prefix16 is the first 16 digits of a SHA-256 as records hold it (64 digits); a shorter one,
// which only a damaged record has, is used whole rather than cut out of bounds.
func prefix16(sha string) string { return sha[:min(16, len(sha))] }

// Proto lists the companions for the API.
func (c Companions) Proto() []*debuginfov1.Companion {
	var out []*debuginfov1.Companion
	state := func(ok bool) debuginfov1.CompanionState {
		if ok {
			return debuginfov1.CompanionState_COMPANION_STATE_AVAILABLE
		}
		return debuginfov1.CompanionState_COMPANION_STATE_MISSING
	}
	if c.SupplementaryID != "" {
		out = append(out, &debuginfov1.Companion{Kind: debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY,
			Id: c.SupplementaryID, State: state(c.Supplementary != nil)})
	}
	if c.NeedsPackage {
		out = append(out, &debuginfov1.Companion{Kind: debuginfov1.CompanionKind_COMPANION_KIND_DWARF_PACKAGE,
			Id: c.PackageID, State: state(c.Package != nil)})
	}
	return out
}

// Describe says what is missing, for messages; "" when nothing is.
func (c Companions) Describe() string {
	var parts []string
	if c.SupplementaryID != "" && c.Supplementary == nil {
		parts = append(parts, fmt.Sprintf("the supplementary DWARF file %s (dwz) the DWARF refers to is not stored, so the DWARF was not read and the answers come from the symbol tables", c.SupplementaryID))
	}
	if c.NeedsPackage && c.Package == nil {
		id := c.PackageID
		if id == "" {
			id = "(the executable has no GNU build ID to store it under)"
		}
		parts = append(parts, fmt.Sprintf("the DWARF package (.dwp) of build ID %s is not stored, so the skeleton units give lines without functions or inline frames from DWARF", id))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + ": upload it (symbolizer upload FILE) and ask again"
}

// Companions looks up what f's DWARF needs in the store.
func (m *Catalog) Companions(ctx context.Context, f *File) (Companions, error) {
	if f.IsCompanion() {
		return Companions{}, nil
	}
	return m.companions(ctx, f.Supplementary, f.IDs.GNU, f.SkeletonUnits > 0)
}

func (m *Catalog) companions(ctx context.Context, supID, gnu string, needsPackage bool) (Companions, error) {
	c := Companions{SupplementaryID: supID, PackageID: gnu, NeedsPackage: needsPackage}
	if supID != "" {
		sup, err := m.StoredSupplementary(ctx, supID)
		if err != nil {
			return c, err
		}
		c.Supplementary = sup
	}
	if gnu != "" && needsPackage {
		pkg, err := m.StoredPackage(ctx, gnu)
		if err != nil {
			return c, err
		}
		c.Package = pkg
	}
	return c, nil
}

// StoredSupplementary returns the available supplementary file stored under id, or nil.
func (m *Catalog) StoredSupplementary(ctx context.Context, id string) (*File, error) {
	if !validGNU(id) {
		// Not an ID anything can be stored under: as missing as can be.
		return nil, nil
	}
	r, err := m.Resolve(ctx, ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: id})
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The ID links name must be the file's own supplementary ID, which the engine checks: a
	// file reached by another of its IDs (a build ID beside a different .debug_sup checksum)
	// would fail the index build, and the failure would be charged to the linking file.
	if f := r.Current; f.Type == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY && f.State == debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE && f.SupplementaryOf == id {
		return f, nil
	}
	return nil, nil
}

// StoredPackage returns the available DWARF package stored for the binary with GNU build
// ID gnu, or nil.
func (m *Catalog) StoredPackage(ctx context.Context, gnu string) (*File, error) {
	if !validGNU(gnu) {
		return nil, nil
	}
	r, err := m.loadRecord(ctx, packageKey(ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: gnu}))
	if err != nil {
		return nil, err
	}
	if f := r.Current; f != nil && f.State == debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE {
		return f, nil
	}
	return nil, nil
}

// Fetch makes local copies of the stored companions and returns the engine options that
// name them, with a cleanup that removes the copies. The options search for nothing else
// (NoSearch): a stored file's companions come from the store, never from a path it names.
func (c Companions) Fetch(ctx context.Context, s store.Store, tempDir string) (debuginfo.Options, func(), error) {
	opts := debuginfo.Options{NoSearch: true}
	var cleanups []func()
	cleanup := func() {
		for _, f := range cleanups {
			f()
		}
	}
	if c.SupplementaryID != "" && c.Supplementary != nil {
		p, done, err := store.LocalCopy(ctx, s, c.Supplementary.Object, tempDir)
		if err != nil {
			return opts, cleanup, fmt.Errorf("fetch supplementary file %s: %w", c.SupplementaryID, err)
		}
		cleanups = append(cleanups, done)
		opts.SupplementaryFile = p
	}
	if c.Package != nil {
		p, done, err := store.LocalCopy(ctx, s, c.Package.Object, tempDir)
		if err != nil {
			cleanup()
			return opts, func() {}, fmt.Errorf("fetch DWARF package of %s: %w", c.PackageID, err)
		}
		cleanups = append(cleanups, done)
		opts.DWARFPackage = p
	}
	return opts, cleanup, nil
}

// Describe renders r for the API with the state of the companions its file needs.
func (m *Catalog) Describe(ctx context.Context, r *Record) (*debuginfov1.Debuginfo, error) {
	d := r.Proto()
	if d == nil || r.Current == nil {
		return d, nil
	}
	if err := m.describeCompanions(ctx, r.Current, d); err != nil {
		return nil, err
	}
	if m.opt.Annotate != nil {
		m.opt.Annotate(ctx, r, d)
	}
	return d, nil
}

// describeCompanions sets the companions of f in d, and f's quality with them.
func (m *Catalog) describeCompanions(ctx context.Context, f *File, d *debuginfov1.Debuginfo) error {
	c, err := m.Companions(ctx, f)
	if err != nil {
		return err
	}
	d.Companions = c.Proto()
	if f.State != debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE {
		// An invalid file is not read again: its record says why it is unusable.
		return nil
	}
	q, err := m.QualityWith(ctx, f, c)
	if err != nil {
		return err
	}
	d.Quality = q.Proto()
	return nil
}
