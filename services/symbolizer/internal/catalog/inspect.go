package catalog

import (
	"errors"
	"fmt"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// Quality mirrors debuginfov1.Quality in the record.
type Quality struct {
	DWARF         bool                           `json:"dwarf"`
	DWARFVersion  int                            `json:"dwarf_version,omitempty"`
	Inlines       bool                           `json:"inlines"`
	GoPclntab     bool                           `json:"gopclntab"`
	Symtab        bool                           `json:"symtab"`
	Dynsym        bool                           `json:"dynsym"`
	MiniDebugInfo bool                           `json:"minidebuginfo"`
	Debuglink     bool                           `json:"debuglink"`
	Compression   debuginfov1.SectionCompression `json:"compression"`
	// DWARFError says why the file's DWARF could not be read (see debuginfo.Info).
	DWARFError string `json:"dwarf_error,omitempty"`
}

// Proto converts the quality to its API form.
func (q Quality) Proto() *debuginfov1.Quality {
	return &debuginfov1.Quality{
		HasDwarf: q.DWARF, DwarfVersion: uint32(q.DWARFVersion), HasInlineInfo: q.Inlines,
		HasGopclntab: q.GoPclntab, HasSymtab: q.Symtab, HasDynsym: q.Dynsym,
		HasMinidebuginfo: q.MiniDebugInfo, HasDebuglink: q.Debuglink, DebugCompression: q.Compression,
		DwarfError: q.DWARFError,
	}
}

// Inspection is what the server learns from reading a file.
type Inspection struct {
	IDs      buildid.IDs
	Quality  Quality
	Loads    []addrmap.Load
	Runnable bool
	// Index is the file's symbolization index; nil with IndexErr when it could not be built.
	Index    *index.Index
	IndexErr error
	// Companions the index was built with, and what the DWARF needs (see File).
	Companions    Companions
	Supplementary string
	SkeletonUnits int
	// SupplementaryOf is set when the file is itself a supplementary file: the ID links name
	// it by. Such a file gets no index.
	SupplementaryOf string
}

// CompanionsFunc looks up the companions of a file about to be indexed: the supplementary
// file named supID ("" for none) and the DWARF package of GNU build ID gnu. It returns them
// with the engine options naming local copies, and a cleanup.
type CompanionsFunc func(supID, gnu string) (Companions, debuginfo.Options, func(), error)

// ErrNotELF marks a file that is not an ELF file or is too damaged to read as one.
var ErrNotELF = errors.New("not a readable ELF file")

// Inspect reads the file at path: IDs, quality, PT_LOAD segments, and its index, built with
// the companions comp finds (nil: none).
func Inspect(path string, lim elfx.Limits, comp CompanionsFunc) (*Inspection, error) {
	ef, closer, err := elfx.OpenPath(path, lim)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotELF, err)
	}
	// Both only read the file: a failing close loses nothing.
	defer func() { _ = closer.Close() }()
	ins := &Inspection{Loads: ef.Loads(), Runnable: ef.Runnable()}
	ins.IDs, err = buildid.Compute(ef.ReaderAt(), ef.Size())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotELF, err)
	}
	// DWARF that does not read is no supplementary file; the index build below says what
	// is wrong with it, as for any other file.
	supOf, isSup, err := debuginfo.SupplementaryFileID(path, lim)
	if err != nil {
		isSup = false
	}
	// Companions come from the store only: never a path the uploaded file names.
	opts := debuginfo.Options{Limits: lim, NoSearch: true}
	if comp != nil && !isSup {
		// The link is read without the DWARF: Open is cheap, Index is not.
		b, err := debuginfo.Open(path, opts)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotELF, err)
		}
		supID := ""
		if s := b.Info().Supplementary; s != nil {
			supID = s.ID
		}
		_ = b.Close()
		c, o, cleanup, err := comp(supID, ins.IDs.GNU)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		ins.Companions = c
		opts.SupplementaryFile, opts.DWARFPackage = o.SupplementaryFile, o.DWARFPackage
	}
	b, err := debuginfo.Open(path, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotELF, err)
	}
	defer func() { _ = b.Close() }()
	if isSup {
		// A supplementary file describes no code: there is nothing to index.
		ins.SupplementaryOf = supOf
		if ins.IDs.GNU == "" {
			// dwz -5 writes no build ID note: the .debug_sup checksum is the only name.
			ins.IDs.GNU = supOf
		}
	} else {
		ins.Index, ins.IndexErr = b.Index()
	}
	info := b.Info()
	ins.Quality = QualityOf(info, ins.Index)
	if s := info.Supplementary; s != nil {
		ins.Supplementary = s.ID
		ins.Companions.SupplementaryID = s.ID
	}
	ins.SkeletonUnits = info.SkeletonUnits
	ins.Companions.NeedsPackage = info.SkeletonUnits > 0
	if !ins.Companions.NeedsPackage {
		ins.Companions.Package = nil
	}
	return ins, nil
}

// QualityOf is what a file read as info says, with ix the index built from it (nil when none
// was). With companions, both depend on which were read beside the file: a file's quality is
// that of one companions variant (see File.QualityVariant).
func QualityOf(info debuginfo.Info, ix *index.Index) Quality {
	q := Quality{
		DWARF: info.DWARF, DWARFVersion: info.DWARFVersion, GoPclntab: info.GoPclntab,
		Symtab: info.Symtab, Dynsym: info.Dynsym, MiniDebugInfo: info.MiniDebugInfo,
		Debuglink: info.Debuglink != "", DWARFError: info.DWARFError,
	}
	if s := info.Supplementary; s != nil && s.Missing {
		// A missing companion is no fault of the file's DWARF: the record's companions
		// say it is missing, and the index is rebuilt once it is stored.
		q.DWARFError = ""
	}
	if info.DWARF && ix != nil && ix.Fidelity() == index.FidelityFullInlines {
		q.Inlines = true
	}
	switch {
	case info.DebugBytes == 0:
		q.Compression = debuginfov1.SectionCompression_SECTION_COMPRESSION_UNSPECIFIED
	case info.Compression == "zstd":
		q.Compression = debuginfov1.SectionCompression_SECTION_COMPRESSION_ZSTD
	case info.Compression == "zlib" || info.Compression == "zlib-gnu":
		q.Compression = debuginfov1.SectionCompression_SECTION_COMPRESSION_ZLIB
	default:
		q.Compression = debuginfov1.SectionCompression_SECTION_COMPRESSION_NONE
	}
	return q
}
