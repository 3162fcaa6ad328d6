package debuginfo

import (
	"errors"
	"fmt"

	"github.com/profsym/profsym/pkg/debuginfo/debugfile"
	"github.com/profsym/profsym/pkg/debuginfo/dwarfsym"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
)

// Companion files are read by the engine beside a binary but are no binaries themselves: a
// store that keeps files by ID has to tell them apart when they arrive, since neither
// symbolizes anything alone.

// SupplementaryFileID reports whether the ELF file at path is a supplementary DWARF file and
// the ID links name it by (debugfile.SupplementaryID). It is one when its .debug_sup says so
// (DWARF 5), or when it links to no supplementary file itself and its .debug_info holds
// only partial units (the common file of dwz -m, which has no marker of its own).
func SupplementaryFileID(path string, lim elfx.Limits) (id string, ok bool, err error) {
	if lim == (elfx.Limits{}) {
		lim = elfx.DefaultLimits()
	}
	f, closer, err := elfx.OpenPath(path, lim)
	if err != nil {
		return "", false, fmt.Errorf("%s: %w: %w", path, ErrNotELF, err)
	}
	// Only read: a failing close loses nothing.
	defer func() { _ = closer.Close() }()
	if s := f.Section(debugfile.SectionSup); s != nil {
		data, err := f.RawSectionData(s)
		if err != nil {
			return "", false, fmt.Errorf("%s: %s: %w", path, debugfile.SectionSup, err)
		}
		if isSup, link, err := debugfile.ParseDebugSup(data); err == nil && isSup {
			return link.ID, true, nil
		}
	}
	if !f.HasDWARF() {
		return "", false, nil
	}
	if f.Runnable() {
		// dwz -m's common file holds DWARF only; a file with code is a binary (or a library),
		// whose DWARF need not be read to know it: for a large Go binary that read
		// decompressed 41 MB of sections on every upload's verification, only to throw them
		// away before the index build read them again.
		return "", false, nil
	}
	if _, links, err := debugfile.ReadSupLink(f); err != nil || links {
		// A file that links to a supplementary file is not one (dwz makes no chains).
		return "", false, nil
	}
	secs, err := f.DWARFSectionsOf("info", "abbrev", "str", "str_offsets", "line_str", "addr")
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", path, err)
	}
	partial, err := dwarfsym.OnlyPartialUnits(secs, byteOrder(f.ELF()))
	if err != nil || !partial {
		return "", false, err
	}
	id, err = debugfile.SupplementaryID(f)
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", path, err)
	}
	if id == "" {
		return "", false, errors.New("supplementary DWARF file without a build ID: nothing can name it")
	}
	return id, true, nil
}

// DWARFPackageUnits reports whether the ELF file at path is a DWARF package (.dwp: a
// .debug_cu_index) and, if it is, how many split units it holds; an error means it claims
// to be one and does not read as one.
func DWARFPackageUnits(path string, lim elfx.Limits) (units int, ok bool, err error) {
	if lim == (elfx.Limits{}) {
		lim = elfx.DefaultLimits()
	}
	f, closer, err := elfx.OpenPath(path, lim)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w: %w", path, ErrNotELF, err)
	}
	defer func() { _ = closer.Close() }()
	if f.Section(".debug_cu_index") == nil {
		return 0, false, nil
	}
	secs, err := f.DWARFSectionsOf(dwarfsym.PackageSectionNames...)
	if err != nil {
		return 0, true, fmt.Errorf("DWARF package %s: %w", path, err)
	}
	pkg, err := dwarfsym.NewPackage(secs, byteOrder(f.ELF()))
	if err != nil {
		return 0, true, fmt.Errorf("DWARF package %s: %w", path, err)
	}
	return pkg.Units(), true, nil
}
