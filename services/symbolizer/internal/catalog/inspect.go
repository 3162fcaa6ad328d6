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
}

// ErrNotELF marks a file that is not an ELF file or is too damaged to read as one.
var ErrNotELF = errors.New("not a readable ELF file")

// Inspect reads the file at path: IDs, quality, PT_LOAD segments, and its index.
func Inspect(path string, lim elfx.Limits) (*Inspection, error) {
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
	b, err := debuginfo.Open(path, debuginfo.Options{Limits: lim})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotELF, err)
	}
	defer func() { _ = b.Close() }()
	ins.Index, ins.IndexErr = b.Index()
	info := b.Info()
	ins.Quality = Quality{
		DWARF: info.DWARF, DWARFVersion: info.DWARFVersion, GoPclntab: info.GoPclntab,
		Symtab: info.Symtab, Dynsym: info.Dynsym, MiniDebugInfo: info.MiniDebugInfo,
		Debuglink: info.Debuglink != "", DWARFError: info.DWARFError,
	}
	if info.DWARF && ins.Index != nil && ins.Index.Fidelity() == index.FidelityFullInlines {
		ins.Quality.Inlines = true
	}
	switch {
	case info.DebugBytes == 0:
		ins.Quality.Compression = debuginfov1.SectionCompression_SECTION_COMPRESSION_UNSPECIFIED
	case info.Compression == "zstd":
		ins.Quality.Compression = debuginfov1.SectionCompression_SECTION_COMPRESSION_ZSTD
	case info.Compression == "zlib" || info.Compression == "zlib-gnu":
		ins.Quality.Compression = debuginfov1.SectionCompression_SECTION_COMPRESSION_ZLIB
	default:
		ins.Quality.Compression = debuginfov1.SectionCompression_SECTION_COMPRESSION_NONE
	}
	return ins, nil
}
