// Package debuginfo is profsym's symbolization engine: it opens an ELF file (and the separate
// debug file that goes with it, the supplementary file dwz made for that one, or the DWARF
// package of a -gsplit-dwarf build), picks the best sources it has (DWARF, Go pclntab, symbol
// tables, MiniDebugInfo) and builds one index that resolves ELF virtual addresses to frames.
//
// The parsers live in subpackages by concern: elfx (hostile-input ELF reading), buildid,
// addrmap (address normalization), dwarfsym, gopclntab, symtab, minidebuginfo, debugfile
// (separate debug files), demangle, and index (the compact, serializable result).
package debuginfo

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/debugfile"
	"github.com/profsym/profsym/pkg/debuginfo/dwarfsym"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/gopclntab"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/debuginfo/minidebuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/symtab"
)

// Options says where to look for companions of a binary and how far to trust it.
type Options struct {
	// DebugFile is a separate debug file to use instead of searching for one.
	DebugFile string
	// DebugDirs are searched for separate debug files by build ID (.build-id/ab/cdef.debug)
	// and by .gnu_debuglink name.
	DebugDirs []string
	// Limits bound what a hostile file can make the engine allocate; zero means defaults.
	Limits elfx.Limits
	// Workers bounds the goroutines used to parse DWARF; zero means GOMAXPROCS.
	Workers int
	// SupplementaryFile is the supplementary DWARF file (dwz's common file, named by
	// .gnu_debugaltlink or .debug_sup) to use instead of searching for it: callers that keep
	// files by build ID fetch it by Info.Supplementary.ID. It must carry that ID.
	SupplementaryFile string
	// DWARFPackage is the DWARF package (.dwp) of a -gsplit-dwarf build to use instead of
	// the one beside the binary (<binary>.dwp, where llvm-symbolizer looks).
	DWARFPackage string
	// NoSearch reads no companion file but those named above: no debug file found by
	// .gnu_debuglink, no supplementary file at the path its link names, no .dwp beside the
	// binary, no .dwo where the compiler wrote it. A server indexing uploaded files sets it: the
	// names in a file someone uploaded must not make it read its own disk (an absolute
	// DW_AT_comp_dir, a "../" debuglink, a huge file to checksum). Companions it lacks are
	// reported missing, as when a search finds nothing.
	NoSearch bool
}

// Binary is an opened ELF file with its companions. Its index is built once, on first use,
// and is safe for concurrent use afterwards.
type Binary struct {
	path    string
	opts    Options
	file    *os.File
	elf     *elfx.File
	ids     buildid.IDs
	debug   *elfx.File // separate debug file, if any
	dbgFile *os.File
	sup     *elfx.File // supplementary DWARF file, if the DWARF names one and it was found
	supFile *os.File
	supErr  error // why the supplementary file the DWARF names is missing
	// unreadableDWOs counts the skeleton units whose .dwo file was found but not read.
	unreadableDWOs int
	info           Info
	// resolvers are the lazy pclntab readers LazyLookup made, closed with the file.
	resolvers []*gopclntab.Resolver

	once sync.Once
	ix   *index.Index
	err  error
}

// Info reports what a binary carries and what the engine made of it; `symbolizer debuginfo
// inspect` prints it.
type Info struct {
	Path      string      `json:"path"`
	Size      int64       `json:"size"`
	IDs       buildid.IDs `json:"ids"`
	DebugFile string      `json:"debug_file,omitempty"`
	// DebugFileFoundBy says how the debug file was found: "option", "build-id", "debuglink".
	DebugFileFoundBy string `json:"debug_file_found_by,omitempty"`
	Debuglink        string `json:"debuglink,omitempty"`

	DWARF         bool   `json:"dwarf"`
	DWARFVersion  int    `json:"dwarf_version,omitempty"`
	Compression   string `json:"debug_compression"` // none, zlib, zstd, zlib-gnu (.zdebug)
	DebugBytes    int64  `json:"debug_section_bytes"`
	GoPclntab     bool   `json:"go_pclntab"`
	Symtab        bool   `json:"symtab"`
	Dynsym        bool   `json:"dynsym"`
	MiniDebugInfo bool   `json:"minidebuginfo"`
	// Runnable: the file holds its code, so its program headers place mapped addresses; a
	// separate debug file does not (see elfx.File.Runnable).
	Runnable bool `json:"runnable"`

	// Sources lists the sources that fed the index, best first; filled by Index.
	Sources []string `json:"sources,omitempty"`
	// Fidelity of the built index; filled by Index.
	Fidelity   string        `json:"fidelity,omitempty"`
	IndexStats *index.Stats  `json:"index_stats,omitempty"`
	BuildTime  time.Duration `json:"index_build_ns,omitempty"`
	// DWARFError says why the DWARF this file has could not be read; filled by Index. The
	// index then comes from the other sources.
	DWARFError string `json:"dwarf_error,omitempty"`
	// Warnings are problems with a source that was skipped (a corrupt section, say); the index
	// was built from what remained.
	Warnings []string `json:"warnings,omitempty"`
	// Supplementary describes the supplementary DWARF file the DWARF refers to, if any.
	Supplementary *SupplementaryInfo `json:"supplementary,omitempty"`
	// DWARFPackage is the .dwp the functions of a -gsplit-dwarf build were read from.
	DWARFPackage string `json:"dwarf_package,omitempty"`
	// SkeletonUnits counts the skeleton units of a -gsplit-dwarf build (their functions are
	// in .dwo files or a .dwp), and SkeletonsWithoutPackage those whose functions were not
	// found; filled by Index. A store keeps the package apart and needs to know both.
	SkeletonUnits           int `json:"skeleton_units,omitempty"`
	SkeletonsWithoutPackage int `json:"skeletons_without_package,omitempty"`
}

// SupplementaryInfo is the supplementary DWARF file of a binary or its debug file (made by
// dwz -m, as Debian's and Fedora's debug packages ship them).
type SupplementaryInfo struct {
	debugfile.SupLink
	// Path and FoundBy ("option", "link-path", "build-id") say where it was found; Missing
	// is true when it was not, and the DWARF was then not read (DWARFError says so).
	Path    string `json:"path,omitempty"`
	FoundBy string `json:"found_by,omitempty"`
	Missing bool   `json:"missing,omitempty"`
}

// ErrSupplementaryMissing is wrapped by the DWARF error (Info.DWARFError, the warnings, and
// Index's error when no other source answered) of a binary whose DWARF refers to a
// supplementary file that was neither given (Options.SupplementaryFile) nor found. The
// message names the file's ID, by which a store finds it.
var ErrSupplementaryMissing = errors.New("supplementary DWARF file missing")

// ErrNotELF is wrapped when the file is not an ELF object at all.
var ErrNotELF = errors.New("not an ELF file")

// Open opens path, computes its IDs and finds its separate debug file. It does not parse debug
// information yet: that happens once, in Index.
func Open(path string, opts Options) (*Binary, error) {
	if opts.Limits == (elfx.Limits{}) {
		opts.Limits = elfx.DefaultLimits()
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open binary: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	b := &Binary{path: path, opts: opts, file: f}
	b.elf, err = elfx.Open(f, st.Size(), opts.Limits)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w: %w", path, ErrNotELF, err)
	}
	b.ids, err = buildid.Compute(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: build IDs: %w", path, err)
	}
	b.info = Info{Path: path, Size: st.Size(), IDs: b.ids, Runnable: b.elf.Runnable()}
	b.describe(b.elf)

	if err := b.findDebugFile(); err != nil {
		return nil, errors.Join(err, b.Close())
	}
	if err := b.findSupplementary(); err != nil {
		return nil, errors.Join(err, b.Close())
	}
	return b, nil
}

// dwarfFile is the file whose DWARF the index reads: the separate debug file, else the
// binary; nil when neither has DWARF.
func (b *Binary) dwarfFile() (*elfx.File, string) {
	if b.debug != nil && b.debug.HasDWARF() {
		return b.debug, b.info.DebugFile
	}
	if b.elf.HasDWARF() {
		return b.elf, b.path
	}
	return nil, ""
}

// findSupplementary opens the supplementary file the DWARF names, if it names one. A file
// that is not found is no error here: the DWARF is then skipped with an error naming the
// file's ID (supErr), and the other sources still answer.
func (b *Binary) findSupplementary() error {
	f, path := b.dwarfFile()
	if f == nil {
		return nil
	}
	link, ok, err := debugfile.ReadSupLink(f)
	if err != nil {
		b.supErr = fmt.Errorf("%s: %w", path, err)
		return nil
	}
	if !ok {
		return nil
	}
	si := &SupplementaryInfo{SupLink: link}
	b.info.Supplementary = si
	supPath, how := b.opts.SupplementaryFile, "option"
	if supPath == "" && b.opts.NoSearch {
		si.Missing = true
		b.supErr = fmt.Errorf("%w: DWARF of %s: %s names ID %s, not given, and files are not searched for", ErrSupplementaryMissing, path, link.Section, link.ID)
		return nil
	}
	if supPath == "" {
		supPath, how, err = debugfile.FindSupplementary(link, path, b.opts.DebugDirs)
		if err != nil {
			si.Missing = true
			b.supErr = fmt.Errorf("%w: DWARF of %s: %w", ErrSupplementaryMissing, path, err)
			return nil
		}
	}
	sf, err := os.Open(supPath)
	if err != nil {
		return fmt.Errorf("open supplementary file: %w", err)
	}
	st, err := sf.Stat()
	if err != nil {
		sf.Close()
		return fmt.Errorf("stat %s: %w", supPath, err)
	}
	sup, err := elfx.Open(sf, st.Size(), b.opts.Limits)
	if err != nil {
		sf.Close()
		return fmt.Errorf("supplementary file %s: %w: %w", supPath, ErrNotELF, err)
	}
	id, err := debugfile.SupplementaryID(sup)
	if err != nil {
		sf.Close()
		return fmt.Errorf("supplementary file %s: %w", supPath, err)
	}
	if id != link.ID {
		sf.Close()
		return fmt.Errorf("supplementary file %s has ID %q, %s names %s", supPath, id, path, link.ID)
	}
	b.sup, b.supFile = sup, sf
	si.Path, si.FoundBy = supPath, how
	return nil
}

func (b *Binary) findDebugFile() error {
	dbgPath, how := b.opts.DebugFile, "option"
	if dbgPath == "" && !b.elf.HasDWARF() && !b.opts.NoSearch {
		p, h, err := debugfile.Find(b.elf, b.ids, b.path, b.opts.DebugDirs)
		// Most binaries have no separate debug file: only a failed search is a problem.
		if err != nil && !errors.Is(err, debugfile.ErrNotFound) {
			b.info.Warnings = append(b.info.Warnings, fmt.Sprintf("search debug file: %v", err))
		}
		dbgPath, how = p, h
	}
	if dbgPath == "" {
		return nil
	}
	df, err := os.Open(dbgPath)
	if err != nil {
		return fmt.Errorf("open debug file: %w", err)
	}
	st, err := df.Stat()
	if err != nil {
		df.Close()
		return fmt.Errorf("stat %s: %w", dbgPath, err)
	}
	dbg, err := elfx.Open(df, st.Size(), b.opts.Limits)
	if err != nil {
		df.Close()
		return fmt.Errorf("debug file %s: %w: %w", dbgPath, ErrNotELF, err)
	}
	if b.ids.GNU != "" {
		dids, err := buildid.Compute(df, st.Size())
		if err == nil && dids.GNU != "" && dids.GNU != b.ids.GNU {
			df.Close()
			return fmt.Errorf("debug file %s has build ID %s, binary %s has %s", dbgPath, dids.GNU, b.path, b.ids.GNU)
		}
	}
	b.debug, b.dbgFile = dbg, df
	b.info.DebugFile, b.info.DebugFileFoundBy = dbgPath, how
	b.describe(dbg)
	return nil
}

// describe records what one ELF file (the binary or its debug file) carries.
func (b *Binary) describe(f *elfx.File) {
	ef := f.ELF()
	for _, s := range ef.Sections {
		switch {
		case s.Name == ".symtab" && s.Type == elf.SHT_SYMTAB:
			b.info.Symtab = true
		case s.Name == ".dynsym":
			b.info.Dynsym = true
		case s.Name == ".gopclntab":
			b.info.GoPclntab = true
		case s.Name == ".gnu_debugdata":
			b.info.MiniDebugInfo = true
		case s.Name == ".gnu_debuglink":
			if data, err := f.SectionData(s.Name); err == nil {
				if i := strings.IndexByte(string(data), 0); i > 0 {
					b.info.Debuglink = string(data[:i])
				}
			}
		case strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_"):
			if s.Type == elf.SHT_NOBITS {
				continue
			}
			b.info.DebugBytes += int64(s.Size)
			if c := compressionOf(f, s); c != "none" || b.info.Compression == "" {
				b.info.Compression = c
			}
			if s.Name == ".debug_info" || s.Name == ".zdebug_info" {
				b.info.DWARF = true
			}
		}
	}
	if b.info.Compression == "" {
		b.info.Compression = "none"
	}
}

func compressionOf(f *elfx.File, s *elf.Section) string {
	if strings.HasPrefix(s.Name, ".zdebug_") {
		return "zlib-gnu"
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 {
		return "none"
	}
	// ch_type is the first word of the compression header in both ELF classes.
	var hdr [4]byte
	if s.Offset > uint64(f.Size()) {
		return "unknown"
	}
	if _, err := f.ReaderAt().ReadAt(hdr[:], int64(s.Offset)); err != nil {
		return "unknown"
	}
	switch elf.CompressionType(byteOrder(f.ELF()).Uint32(hdr[:])) {
	case elf.COMPRESS_ZLIB:
		return "zlib"
	case elf.COMPRESS_ZSTD:
		return "zstd"
	}
	return "unknown"
}

// IDs returns every ID the binary has.
func (b *Binary) IDs() buildid.IDs { return b.ids }

// Path returns the path the binary was opened from.
func (b *Binary) Path() string { return b.path }

// Info reports what the binary carries; after Index it also says what the index holds.
func (b *Binary) Info() Info {
	info := b.info
	info.Sources = append([]string(nil), b.info.Sources...)
	info.Warnings = append([]string(nil), b.info.Warnings...)
	return info
}

// Close releases the files. An index already built stays usable; a LazyLookup does not.
func (b *Binary) Close() error {
	var errs []error
	for _, r := range b.resolvers {
		errs = append(errs, r.Close())
	}
	b.resolvers = nil
	if b.supFile != nil {
		errs = append(errs, b.supFile.Close())
		b.supFile = nil
	}
	if b.dbgFile != nil {
		errs = append(errs, b.dbgFile.Close())
		b.dbgFile = nil
	}
	if b.file != nil {
		errs = append(errs, b.file.Close())
		b.file = nil
	}
	return errors.Join(errs...)
}

// Index builds (once) and returns the binary's index.
func (b *Binary) Index() (*index.Index, error) {
	b.once.Do(func() {
		start := time.Now()
		b.ix, b.err = b.build()
		b.info.BuildTime = time.Since(start)
		if b.ix != nil {
			st := b.ix.Stats()
			b.info.IndexStats = &st
			b.info.Fidelity = b.ix.Fidelity().String()
		}
	})
	return b.ix, b.err
}

// errGoDWARFLines ends a build whose Go DWARF line table failed halfway: its rows cannot be
// taken back out of the Builder, so the build starts again with pclntab's lines.
var errGoDWARFLines = errors.New("go DWARF line table unusable")

// build feeds every usable source into one Builder. Go binaries are read from pclntab, which
// carries functions, lines and the inline tree even when stripped and is much cheaper to decode
// than Go's DWARF (their lines from the DWARF line table when they have one, and their package
// initializers from DWARF: see goDWARFLines); other binaries from DWARF. Symbol tables fill
// the gaps either leaves.
func (b *Binary) build() (*index.Index, error) {
	ix, err := b.buildFrom(true)
	if errors.Is(err, errGoDWARFLines) {
		return b.buildFrom(false)
	}
	return ix, err
}

func (b *Binary) buildFrom(goDWARFLines bool) (*index.Index, error) {
	b.info.Sources = nil
	bld := index.NewBuilder()
	var hardErr error
	warn := func(source string, err error) {
		b.info.Warnings = append(b.info.Warnings, fmt.Sprintf("%s: %v", source, err))
		if hardErr == nil {
			hardErr = fmt.Errorf("%s: %w", source, err)
		}
	}

	// Each symbol table is read once: it names outermost frames, gives Go functions their
	// symbol files and fills the gaps of debug information.
	syms := symbolTables{}

	usedDebug := false
	if gopclntab.Present(b.elf.ELF()) {
		first := index.NodeID(bld.NumNodes())
		load, source := gopclntab.Load, "gopclntab "
		if goDWARFLines {
			// pclntab's functions are parsed while the DWARF line rows are read (mostly
			// decompression, on one core), and added after them, as a sequential load would.
			var prep *gopclntab.Prepared
			var prepErr error
			prepared := make(chan struct{})
			go func() {
				defer close(prepared)
				prep, prepErr = gopclntab.PrepareFunctions(b.elf.ELF())
			}()
			added, initializers, err := b.goDWARFLines(bld)
			<-prepared
			if err != nil {
				b.info.Warnings = append(b.info.Warnings, fmt.Sprintf("dwarf lines: %v (lines from gopclntab)", err))
				return nil, fmt.Errorf("%w: %w", errGoDWARFLines, err)
			}
			if added {
				source = "dwarf lines, gopclntab functions "
				load = func(*elf.File, *index.Builder) (gopclntab.Stats, error) {
					if prepErr != nil {
						return gopclntab.Stats{}, prepErr
					}
					// Only what DWARF gave is interned so far: its line table's file names
					// and the strings of the functions read from it (package initializers,
					// cgo's C units).
					prep.SpellFilesAs(bld.Strings())
					prep.Leave(initializers)
					return prep.Commit(bld), nil
				}
			}
		}
		if st, err := load(b.elf.ELF(), bld); err != nil {
			warn("gopclntab", err)
		} else {
			b.info.Sources = append(b.info.Sources, source+st.Version)
			usedDebug = true
			if fns, _, err := syms.functions(b.outerNameSource()); err == nil && len(fns) > 0 {
				bld.SetSymbolFiles(first, func(addr uint64) string { return symtab.FileAt(fns, addr) })
			}
		}
	}
	if !usedDebug {
		for _, f := range []*elfx.File{b.debug, b.elf} {
			if f == nil || !f.HasDWARF() {
				continue
			}
			// Mapped, not read: see elfx.File.DWARFSectionsMappedOf. Nothing Load adds to the
			// builder refers to them (strings are copied), so they are released as soon as it
			// returns, before the index's tables are made.
			secs, release, err := f.DWARFSectionsMappedOf(dwarfsym.SectionNames...)
			if err != nil {
				warn("dwarf", err)
				b.info.DWARFError = err.Error()
				continue
			}
			opts := dwarfsym.Options{Workers: b.opts.Workers, CodeAtZero: f.LaidOut()}
			if df, _ := b.dwarfFile(); f == df {
				if b.supErr != nil {
					_ = release() // only read from
					warn("dwarf", b.supErr)
					b.info.DWARFError = b.supErr.Error()
					continue
				}
				if b.sup != nil {
					if opts.Supplementary, err = b.sup.DWARFSectionsOf(dwarfsym.SectionNames...); err != nil {
						_ = release()
						err = fmt.Errorf("supplementary file: %w", err)
						warn("dwarf", err)
						b.info.DWARFError = err.Error()
						continue
					}
				}
			}
			st, err := b.loadDWARF(f, secs, bld, opts)
			if rerr := release(); err == nil && rerr != nil {
				err = fmt.Errorf("unmap sections: %w", rerr)
			}
			if err != nil {
				warn("dwarf", err)
				b.info.DWARFError = err.Error()
				continue
			}
			b.info.SkeletonsWithoutPackage = st.SkeletonsWithoutPackage
			if n := st.SkeletonsWithoutPackage; n > 0 {
				why := fmt.Sprintf("neither the DWARF package %s.dwp nor their .dwo files were found", b.path)
				if u := b.unreadableDWOs; u > 0 {
					why = fmt.Sprintf("no DWARF package %s.dwp; the .dwo files of %d of them were found but not read, "+
						"see the dwo warnings; the others' were not found", b.path, min(u, n))
				}
				b.info.Warnings = append(b.info.Warnings, fmt.Sprintf(
					"split DWARF: %d skeleton units whose functions were not read (%s): functions from the symbol table, "+
						"no inlined frames", n, why))
			}
			b.info.DWARFError = ""
			b.info.DWARFVersion = st.Version
			b.info.Sources = append(b.info.Sources, fmt.Sprintf("dwarf v%d", st.Version))
			if err := addOuterNames(syms, b.outerNameSource(), bld); err != nil {
				warn("symtab outer names", err)
			}
			break
		}
	}

	for _, f := range []*elfx.File{b.debug, b.elf} {
		if f == nil {
			continue
		}
		fns, st, err := syms.functions(f.ELF())
		if err != nil {
			warn("symtab", err)
			continue
		}
		symtab.Add(bld, fns)
		if st.Symbols > 0 {
			b.info.Sources = append(b.info.Sources, st.Source)
		}
	}
	if b.info.MiniDebugInfo {
		inner, err := minidebuginfo.Extract(b.elf, b.opts.Limits)
		switch {
		case err != nil:
			warn("minidebuginfo", err)
		case inner != nil:
			if st, err := symtab.Load(inner.ELF(), bld); err != nil {
				warn("minidebuginfo symtab", err)
			} else if st.Symbols > 0 {
				b.info.Sources = append(b.info.Sources, "minidebuginfo "+st.Source)
			}
		}
	}

	ix, err := bld.Build()
	if err != nil {
		return nil, fmt.Errorf("build index of %s: %w", b.path, err)
	}
	// A source that failed is survivable when another one answered; when none did, the caller
	// must learn why rather than get an empty index.
	if ix.Fidelity() == index.FidelityNone && hardErr != nil {
		return nil, fmt.Errorf("%s: no usable debug information: %w", b.path, hardErr)
	}
	return ix, nil
}

// loadDWARF loads the DWARF sections secs of f, some of which may be mapped from the file
// (elfx.File.DWARFSectionsMappedOf): a read of them that faults, because the file shrank
// while it was mapped, is the DWARF's error rather than the process's crash. Load's workers
// set the same for themselves.
func (b *Binary) loadDWARF(f *elfx.File, secs map[string][]byte, bld *index.Builder, opts dwarfsym.Options) (st dwarfsym.Stats, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			fault, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("reading the DWARF of a file that changed while it was read: fault at %#x: %v", fault.Addr(), r)
		}
	}()
	if opts.Package, err = b.dwarfPackage(f, secs); err != nil {
		// The skeleton units still give their line tables.
		b.info.Warnings = append(b.info.Warnings, fmt.Sprintf("dwarf package: %v", err))
	}
	return dwarfsym.Load(secs, byteOrder(f.ELF()), bld, opts)
}

// dwarfPackage opens the DWARF package of f's skeleton units: Options.DWARFPackage, else
// <binary>.dwp, else <debug file>.dwp, else the .dwo files the skeletons name (where the
// compiler wrote them, or beside the binary), as llvm-symbolizer looks for them. Nil without
// error when f has no skeleton units or none of these exists.
func (b *Binary) dwarfPackage(f *elfx.File, secs map[string][]byte) (*dwarfsym.Package, error) {
	if !dwarfsym.HasSplitUnits(secs, byteOrder(f.ELF())) {
		return nil, nil
	}
	if units, err := dwarfsym.SplitUnits(secs, byteOrder(f.ELF())); err == nil {
		b.info.SkeletonUnits = len(units)
	}
	if b.opts.DWARFPackage == "" && b.opts.NoSearch {
		return nil, nil
	}
	cands := []string{b.opts.DWARFPackage}
	if b.opts.DWARFPackage == "" {
		cands = []string{b.path + ".dwp"}
		if b.info.DebugFile != "" {
			cands = append(cands, b.info.DebugFile+".dwp")
		}
	}
	for _, p := range cands {
		if _, err := os.Stat(p); err != nil {
			if b.opts.DWARFPackage != "" {
				return nil, fmt.Errorf("open DWARF package: %w", err)
			}
			continue
		}
		pf, closer, err := elfx.OpenPath(p, b.opts.Limits)
		if err != nil {
			return nil, fmt.Errorf("DWARF package %s: %w", p, err)
		}
		secs, err := pf.DWARFSectionsOf(dwarfsym.PackageSectionNames...)
		order := byteOrder(pf.ELF())
		// The sections are read into memory; the file is no longer needed.
		if cerr := closer.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("DWARF package %s: %w", p, err)
		}
		pkg, err := dwarfsym.NewPackage(secs, order)
		if err != nil {
			return nil, fmt.Errorf("DWARF package %s: %w", p, err)
		}
		b.info.DWARFPackage = p
		return pkg, nil
	}
	if b.opts.DWARFPackage != "" {
		return nil, nil
	}
	return b.dwoFiles(f, secs)
}

// maxDWOFiles bounds the .dwo files one binary may make the engine open.
const maxDWOFiles = 1 << 16

// dwoFiles makes a Package of the .dwo files f's skeleton units name; units whose file is
// missing stay without functions (Load counts them), and so do those whose file cannot be
// read, with a warning that names it.
func (b *Binary) dwoFiles(f *elfx.File, secs map[string][]byte) (*dwarfsym.Package, error) {
	units, err := dwarfsym.SplitUnits(secs, byteOrder(f.ELF()))
	if err != nil || len(units) == 0 {
		return nil, err
	}
	if len(units) > maxDWOFiles {
		return nil, fmt.Errorf("%d split units, at most %d .dwo files are read", len(units), maxDWOFiles)
	}
	var objs []map[string][]byte
	var dirs []string
	read := map[uint64]string{} // DWO IDs read, and from where
	b.unreadableDWOs = 0
	for _, u := range units {
		if p, ok := read[u.DWOID]; ok {
			// Two skeleton units of one DWO ID: one split unit serves both (llvm-dwp refuses
			// such a build; the engine reads what it can).
			b.info.Warnings = append(b.info.Warnings, fmt.Sprintf("split DWARF: two skeleton units have DWO ID %#x; both read from %s", u.DWOID, p))
			continue
		}
		cands := []string{u.DWOName, filepath.Join(filepath.Dir(b.path), filepath.Base(u.DWOName))}
		if !filepath.IsAbs(u.DWOName) {
			cands[0] = filepath.Join(u.CompDir, u.DWOName)
		}
		found, unreadable := false, false
		for _, p := range cands {
			if _, err := os.Stat(p); err != nil {
				continue
			}
			s, id, err := readDWO(p, b.opts.Limits, byteOrder(f.ELF()))
			if err == nil && id != u.DWOID {
				err = fmt.Errorf("holds DWO ID %#x where its skeleton unit names %#x: a .dwo file of another build", id, u.DWOID)
			}
			if err != nil {
				// The other place may hold the right one.
				b.info.Warnings = append(b.info.Warnings, fmt.Sprintf("dwo %s: %v", p, err))
				unreadable = true
				continue
			}
			objs = append(objs, s)
			dirs = append(dirs, filepath.Dir(p))
			read[id] = p
			found = true
			break
		}
		if !found && unreadable {
			b.unreadableDWOs++
		}
	}
	if len(objs) == 0 {
		return nil, nil
	}
	pkg, err := dwarfsym.NewPackageFromObjects(objs, byteOrder(f.ELF()))
	if err != nil {
		return nil, err
	}
	b.info.DWARFPackage = fmt.Sprintf("%d .dwo files in %s", len(objs), strings.Join(uniq(dirs), ", "))
	return pkg, nil
}

// readDWO reads the sections of the split DWARF object at path that the engine uses, all of
// its .debug_info.dwo sections joined (gcc writes each type unit in one of its own), and
// checks that it holds one split compilation unit.
func readDWO(path string, lim elfx.Limits, order binary.ByteOrder) (map[string][]byte, uint64, error) {
	df, closer, err := elfx.OpenPath(path, lim)
	if err != nil {
		return nil, 0, err
	}
	s, err := df.DWARFSectionsJoinedOf(dwarfsym.PackageSectionNames, dwarfsym.DWOJoinedSections...)
	if cerr := closer.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, err
	}
	id, err := dwarfsym.DWOUnitID(s, order)
	if err != nil {
		return nil, 0, err
	}
	return s, id, nil
}

func uniq(ss []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// goDWARFLines adds the DWARF line table of a Go binary that carries DWARF, and reports whether
// it did. pclntab answers <autogenerated>:1 for code the DWARF line table gives its source line
// (package initializers), and llvm-symbolizer reads DWARF; functions and inline trees of Go
// code still come from pclntab, which is as complete and cheaper to decode than Go's DWARF,
// but for package initializers (see dwarfsym.Options.GoFunctions), whose entries it returns
// for pclntab to leave out. The functions of units in other languages (cgo's C and C++) come
// from DWARF: pclntab does not describe them, and without DWARF their inlined calls would be
// missing frames.
func (b *Binary) goDWARFLines(bld *index.Builder) (added bool, initializers []uint64, _ error) {
	for _, f := range []*elfx.File{b.debug, b.elf} {
		if f == nil || !f.HasDWARF() {
			continue
		}
		// The range lists too: the functions of cgo's C units (OtherLanguagesFunctions) have
		// them. Decompressing MinIO's costs about 10 ms.
		secs, err := f.DWARFSectionsOf(slices.Concat(elfx.DWARFLineSectionNames, []string{"ranges", "rnglists"})...)
		if err != nil {
			return false, nil, err
		}
		if len(secs["line"]) == 0 {
			return false, nil, nil
		}
		st, err := dwarfsym.Load(secs, byteOrder(f.ELF()), bld, dwarfsym.Options{
			Workers: b.opts.Workers, LinesOnly: true, OtherLanguagesFunctions: true, GoFunctions: isPackageInitializer})
		if err != nil {
			return false, nil, err
		}
		return true, st.GoFunctionEntries, nil
	}
	return false, nil, nil
}

// isPackageInitializer reports whether a Go function is a package's initializer: the one the
// compiler writes (p.init), one of the package's own init functions (p.init.0) or a map
// variable's outlined initialization (p.map.init.0); not a method named init (p.T.init). The
// package is the name up to the first dot after the last slash: the linker writes a dot of
// an import path's last element as %2e.
func isPackageInitializer(name string) bool {
	rest := name[strings.LastIndexByte(name, '/')+1:]
	dot := strings.IndexByte(rest, '.')
	if dot < 0 {
		return false
	}
	rest = strings.TrimPrefix(rest[dot+1:], "map.")
	if rest == "init" {
		return true
	}
	n, ok := strings.CutPrefix(rest, "init.")
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

// addOuterNames gives the outermost frame of DWARF answers the name of the ELF symbol covering
// the address, as llvm-symbolizer does: gcc writes no linkage name for internal-linkage C++
// functions, so the symbol is the only place their qualified name lives, and it marks cold and
// cloned parts (".cold", ".constprop.0"). Go binaries keep pclntab's names, which are the
// runtime's own.
func addOuterNames(syms symbolTables, f *elf.File, bld *index.Builder) error {
	fns, _, err := syms.functions(f)
	if err != nil {
		return err
	}
	for _, fn := range fns {
		n := bld.AddNode(index.Node{
			Name:         bld.String(fn.Name),
			LinkageName:  bld.String(fn.LinkageName),
			CallFile:     bld.String(fn.File), // its SymbolFile
			StartAddress: fn.Lo,
			Parent:       index.NoParent,
		})
		bld.AddOuterName(fn.Lo, fn.Hi, n)
	}
	return nil
}

// symbolTables holds what symtab.Functions returned for each file of one build.
type symbolTables map[*elf.File]symbolTable

type symbolTable struct {
	fns []symtab.Function
	st  symtab.Stats
	err error
}

func (t symbolTables) functions(f *elf.File) ([]symtab.Function, symtab.Stats, error) {
	r, ok := t[f]
	if !ok {
		r.fns, r.st, r.err = symtab.Functions(f)
		t[f] = r
	}
	return r.fns, r.st, r.err
}

// outerNameSource picks the symbol table that names outermost frames: the binary's .symtab,
// else the separate debug file's (a stripped binary keeps its full table there), else the
// binary itself, whose .dynsym names at least the exported functions. llvm-symbolizer reads only
// the binary's table, so on a stripped binary it falls back to bare DWARF names; the debug
// file's table gives the same qualified names as on the unstripped binary.
func (b *Binary) outerNameSource() *elf.File {
	for _, f := range []*elfx.File{b.elf, b.debug} {
		if f == nil {
			continue
		}
		if s := f.ELF().Section(".symtab"); s != nil && s.Type == elf.SHT_SYMTAB && s.Size > 0 {
			return f.ELF()
		}
	}
	return b.elf.ELF()
}

func byteOrder(f *elf.File) binary.ByteOrder {
	if f.ByteOrder != nil {
		return f.ByteOrder
	}
	return binary.LittleEndian
}

// OpenIndex is Open followed by Index and Close, for callers that only want the index.
func OpenIndex(path string, opts Options) (_ *index.Index, _ Info, err error) {
	b, err := Open(path, opts)
	if err != nil {
		return nil, Info{}, err
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	ix, err := b.Index()
	return ix, b.Info(), err
}

var _ io.Closer = (*Binary)(nil)
