// Package elfx reads ELF files that may be hostile: truncated, with lying sizes and offsets,
// absurd section counts or compressed sections that claim terabytes. It builds on debug/elf
// but checks its own limits first, reads section bytes itself (bounded by the file size) and
// turns any panic inside debug/elf into an error.
package elfx

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"

	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
)

// Limits bound what reading one ELF file may cost.
type Limits struct {
	// MaxSections is the largest section count accepted.
	MaxSections int
	// MaxSectionSize is the largest on-disk section size that is read.
	MaxSectionSize int64
	// MaxDecompressedSize is the largest size a compressed section may decompress to.
	MaxDecompressedSize int64
}

// DefaultLimits returns limits that every real binary seen so far fits in: 100,000 sections
// (large C++ binaries with -ffunction-sections reach tens of thousands), 4 GiB per section and
// 4 GiB per decompressed section.
func DefaultLimits() Limits {
	return Limits{MaxSections: 100_000, MaxSectionSize: 4 << 30, MaxDecompressedSize: 4 << 30}
}

// OrDefault returns l with every zero or negative field replaced by its default, so that
// Limits{} means DefaultLimits().
func (l Limits) OrDefault() Limits {
	d := DefaultLimits()
	if l.MaxSections <= 0 {
		l.MaxSections = d.MaxSections
	}
	if l.MaxSectionSize <= 0 {
		l.MaxSectionSize = d.MaxSectionSize
	}
	if l.MaxDecompressedSize <= 0 {
		l.MaxDecompressedSize = d.MaxDecompressedSize
	}
	return l
}

// Sentinel errors; match them with errors.Is.
var (
	ErrNotELF       = errors.New("not an ELF file")
	ErrLimit        = errors.New("limit exceeded")
	ErrTruncated    = errors.New("extends past end of file")
	ErrNoSection    = errors.New("no such section")
	ErrNoData       = errors.New("section has no file data (SHT_NOBITS)")
	ErrCompression  = errors.New("bad compressed section")
	ErrPanic        = errors.New("debug/elf panicked")
	errSizeMismatch = errors.New("decompressed size differs from header")
)

// ErrDuplicateSection is wrapped by DWARFSectionsJoinedOf's errors about two sections of a
// name that must be unique.
var ErrDuplicateSection = errors.New("duplicate section")

// zstdMaxWindow caps the zstd window (history) a section's frame may ask for; the decoder
// allocates it up front. Compressors use at most 8 MiB at their default levels and 128 MiB
// with --ultra or --long.
const zstdMaxWindow = 128 << 20

// zlibMaxRatio bounds how far deflate can expand (about 1032:1): a zlib section claiming more
// than that relative to its compressed bytes is corrupt, and is rejected before allocating.
const zlibMaxRatio = 1032

// File is a parsed ELF file together with the reader it came from.
type File struct {
	f    *elf.File
	r    io.ReaderAt
	file io.ReaderAt // the reader given to Open: an *os.File can be mapped (mapped.go)
	size int64
	lim  Limits

	// A relocatable object's module layout (reloc.go): whether it was applied, or why not.
	laidOut   bool
	layoutErr error
	// Its relocation sections by target, and its symbols, read once when first needed.
	relocOnce sync.Once
	relocs    map[uint32][]*elf.Section
	symOnce   sync.Once
	syms      []elf.Symbol
	symErr    error
}

// Open parses the ELF file of size bytes read through r. Nothing is read beyond size. Zero
// fields of lim take their defaults (Limits.OrDefault). The sections of a relocatable object
// (ET_REL) of x86-64 or AArch64 get the addresses of the kernel's module layout (see
// ModuleLayout) in the returned File's headers.
func Open(r io.ReaderAt, size int64, lim Limits) (*File, error) {
	lim = lim.OrDefault()
	if size < 0 {
		return nil, fmt.Errorf("open ELF: negative size %d", size)
	}
	if err := precheck(r, size, lim); err != nil {
		return nil, err
	}
	sr := io.NewSectionReader(r, 0, size)
	var ef *elf.File
	err := safe("parse ELF headers", func() error {
		var err error
		ef, err = elf.NewFile(sr)
		return err
	})
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("open ELF: headers point %w (size %d): %w", ErrTruncated, size, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open ELF: %w", err)
	}
	if len(ef.Sections) > lim.MaxSections {
		return nil, fmt.Errorf("open ELF: %d sections, more than the limit %d: %w", len(ef.Sections), lim.MaxSections, ErrLimit)
	}
	f := &File{f: ef, r: sr, file: r, size: size, lim: lim}
	f.layout()
	return f, nil
}

// OpenPath opens and parses the ELF file at path. The returned Closer closes the file; the
// File must not be used after that.
func OpenPath(path string, lim Limits) (*File, io.Closer, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		fh.Close()
		return nil, nil, fmt.Errorf("open ELF %s: not a regular file", path)
	}
	f, err := Open(fh, st.Size(), lim)
	if err != nil {
		fh.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, fh, nil
}

// precheck validates the parts of the ELF header that decide how much debug/elf will allocate
// and read, against the limits and the file size.
func precheck(r io.ReaderAt, size int64, lim Limits) error {
	var hdr [64]byte
	n, err := r.ReadAt(hdr[:], 0)
	if n < 16 {
		if err == nil || err == io.EOF {
			return fmt.Errorf("open ELF: %d-byte file: %w", size, ErrNotELF)
		}
		return fmt.Errorf("open ELF: read header: %w", err)
	}
	if !bytes.Equal(hdr[:4], []byte(elf.ELFMAG)) {
		return fmt.Errorf("open ELF: bad magic %q: %w", hdr[:4], ErrNotELF)
	}
	var bo binary.ByteOrder
	switch elf.Data(hdr[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		bo = binary.BigEndian
	default:
		return fmt.Errorf("open ELF: unknown data encoding %d: %w", hdr[elf.EI_DATA], ErrNotELF)
	}
	var shoff, phoff uint64
	var shentsize, shnum, phentsize, phnum uint64
	switch elf.Class(hdr[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		if n < 64 {
			return fmt.Errorf("open ELF: header: %d of 64 bytes: %w", n, ErrTruncated)
		}
		phoff = bo.Uint64(hdr[32:])
		shoff = bo.Uint64(hdr[40:])
		phentsize = uint64(bo.Uint16(hdr[54:]))
		phnum = uint64(bo.Uint16(hdr[56:]))
		shentsize = uint64(bo.Uint16(hdr[58:]))
		shnum = uint64(bo.Uint16(hdr[60:]))
	case elf.ELFCLASS32:
		if n < 52 {
			return fmt.Errorf("open ELF: header: %d of 52 bytes: %w", n, ErrTruncated)
		}
		phoff = uint64(bo.Uint32(hdr[28:]))
		shoff = uint64(bo.Uint32(hdr[32:]))
		phentsize = uint64(bo.Uint16(hdr[42:]))
		phnum = uint64(bo.Uint16(hdr[44:]))
		shentsize = uint64(bo.Uint16(hdr[46:]))
		shnum = uint64(bo.Uint16(hdr[48:]))
	default:
		return fmt.Errorf("open ELF: unknown class %d: %w", hdr[elf.EI_CLASS], ErrNotELF)
	}
	usize := uint64(size)
	if shoff != 0 && shnum == 0 && shentsize != 0 {
		// More than SHN_LORESERVE sections: the count lives in sh_size of section 0.
		if shoff > usize || usize-shoff < shentsize {
			return fmt.Errorf("open ELF: section header 0 at offset %#x: %w (size %d)", shoff, ErrTruncated, size)
		}
		var sh [64]byte
		if shentsize < 40 || shentsize > 64 {
			return fmt.Errorf("open ELF: section header size %d: %w", shentsize, ErrNotELF)
		}
		if _, err := r.ReadAt(sh[:shentsize], int64(shoff)); err != nil {
			return fmt.Errorf("open ELF: read section header 0: %w", err)
		}
		if elf.Class(hdr[elf.EI_CLASS]) == elf.ELFCLASS64 {
			shnum = bo.Uint64(sh[32:])
		} else {
			shnum = uint64(bo.Uint32(sh[20:]))
		}
	}
	if shnum > uint64(lim.MaxSections) {
		return fmt.Errorf("open ELF: %d sections, more than the limit %d: %w", shnum, lim.MaxSections, ErrLimit)
	}
	if shnum > 0 {
		if shentsize == 0 || shoff > usize || (usize-shoff)/shentsize < shnum {
			return fmt.Errorf("open ELF: section header table (%d x %d bytes at %#x): %w (size %d)", shnum, shentsize, shoff, ErrTruncated, size)
		}
	}
	if phnum > 0 && phnum != 0xffff {
		if phentsize == 0 || phoff > usize || (usize-phoff)/phentsize < phnum {
			return fmt.Errorf("open ELF: program header table (%d x %d bytes at %#x): %w (size %d)", phnum, phentsize, phoff, ErrTruncated, size)
		}
	}
	return nil
}

// safe runs fn and turns a panic into an error that names what was being done.
func safe(what string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: %w: %v", what, ErrPanic, p)
		}
	}()
	return fn()
}

// ELF returns the underlying debug/elf file. Its Section.Data and Open do not apply the limits
// of this package: read section bytes through SectionData.
func (f *File) ELF() *elf.File { return f.f }

// Size is the file size given to Open.
func (f *File) Size() int64 { return f.size }

// Limits returns the limits the file was opened with.
func (f *File) Limits() Limits { return f.lim }

// ReaderAt returns the reader of the whole file, bounded to Size bytes.
func (f *File) ReaderAt() io.ReaderAt { return f.r }

// Section returns the first section called name, or nil.
func (f *File) Section(name string) *elf.Section {
	for _, s := range f.f.Sections {
		if s != nil && s.Name == name {
			return s
		}
	}
	return nil
}

// SectionData returns the contents of the first section called name, decompressed if it is
// SHF_COMPRESSED (zlib or zstd) or a legacy .zdebug_* section.
func (f *File) SectionData(name string) ([]byte, error) {
	s := f.Section(name)
	if s == nil {
		return nil, fmt.Errorf("section %s: %w", name, ErrNoSection)
	}
	return f.SectionDataOf(s)
}

// SectionDataOf is SectionData for a section of this file (names need not be unique).
func (f *File) SectionDataOf(s *elf.Section) ([]byte, error) {
	raw, err := f.RawSectionData(s)
	if err != nil {
		return nil, err
	}
	switch {
	case s.Flags&elf.SHF_COMPRESSED != 0:
		return f.decompressGABI(s.Name, raw)
	case strings.HasPrefix(s.Name, ".zdebug_"):
		return f.decompressLegacy(s.Name, raw)
	}
	return raw, nil
}

// RawSectionData returns the bytes of s as they stand in the file, without decompressing.
func (f *File) RawSectionData(s *elf.Section) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("section %s: %w", s.Name, ErrNoData)
	}
	if s.Type == elf.SHT_NULL {
		return nil, fmt.Errorf("section %q: SHT_NULL: %w", s.Name, ErrNoData)
	}
	return f.readAt(s.Name, s.Offset, s.FileSize)
}

func (f *File) readAt(what string, off, n uint64) ([]byte, error) {
	if n > uint64(f.lim.MaxSectionSize) {
		return nil, fmt.Errorf("section %s: size %d over the limit %d: %w", what, n, f.lim.MaxSectionSize, ErrLimit)
	}
	if off > uint64(f.size) || uint64(f.size)-off < n {
		return nil, fmt.Errorf("section %s: %d bytes at offset %#x: %w (size %d)", what, n, off, ErrTruncated, f.size)
	}
	buf := make([]byte, n)
	if n == 0 {
		return buf, nil
	}
	if _, err := f.r.ReadAt(buf, int64(off)); err != nil {
		return nil, fmt.Errorf("section %s: read %d bytes at %#x: %w", what, n, off, err)
	}
	return buf, nil
}

// ProgData returns the file bytes of program header p (e.g. a PT_NOTE segment).
func (f *File) ProgData(p *elf.Prog) ([]byte, error) {
	return f.readAt(fmt.Sprintf("segment %s at %#x", p.Type, p.Off), p.Off, p.Filesz)
}

// decompressGABI decodes an SHF_COMPRESSED section: an Elf32_Chdr/Elf64_Chdr then the stream.
func (f *File) decompressGABI(name string, raw []byte) ([]byte, error) {
	var typ elf.CompressionType
	var size uint64
	var hdrLen int
	bo := f.f.ByteOrder
	switch f.f.Class {
	case elf.ELFCLASS64:
		hdrLen = 24
		if len(raw) < hdrLen {
			return nil, fmt.Errorf("section %s: compression header: %d of %d bytes: %w", name, len(raw), hdrLen, ErrCompression)
		}
		typ = elf.CompressionType(bo.Uint32(raw[0:]))
		size = bo.Uint64(raw[8:])
	default:
		hdrLen = 12
		if len(raw) < hdrLen {
			return nil, fmt.Errorf("section %s: compression header: %d of %d bytes: %w", name, len(raw), hdrLen, ErrCompression)
		}
		typ = elf.CompressionType(bo.Uint32(raw[0:]))
		size = uint64(bo.Uint32(raw[4:]))
	}
	switch typ {
	case elf.COMPRESS_ZLIB, elf.COMPRESS_ZSTD:
	default:
		return nil, fmt.Errorf("section %s: unknown compression type %d: %w", name, uint32(typ), ErrCompression)
	}
	return f.decompress(name, typ, raw[hdrLen:], size)
}

// decompressLegacy decodes a GNU .zdebug_* section: "ZLIB", a big-endian 64-bit size, zlib.
func (f *File) decompressLegacy(name string, raw []byte) ([]byte, error) {
	if len(raw) < 12 || string(raw[:4]) != "ZLIB" {
		return nil, fmt.Errorf("section %s: missing ZLIB header: %w", name, ErrCompression)
	}
	return f.decompress(name, elf.COMPRESS_ZLIB, raw[12:], binary.BigEndian.Uint64(raw[4:12]))
}

func (f *File) decompress(name string, typ elf.CompressionType, comp []byte, size uint64) ([]byte, error) {
	if size > uint64(f.lim.MaxDecompressedSize) {
		return nil, fmt.Errorf("section %s: decompressed size %d over the limit %d: %w", name, size, f.lim.MaxDecompressedSize, ErrLimit)
	}
	if typ == elf.COMPRESS_ZLIB && size/zlibMaxRatio > uint64(len(comp))+1 {
		return nil, fmt.Errorf("section %s: %d compressed bytes cannot hold %d bytes: %w", name, len(comp), size, ErrCompression)
	}
	var rd io.Reader
	switch typ {
	case elf.COMPRESS_ZLIB:
		zr, err := zlib.NewReader(bytes.NewReader(comp))
		if err != nil {
			return nil, fmt.Errorf("section %s: zlib: %w", name, err)
		}
		// zlib's Close only repeats a decoding error, which io.Copy below already returns.
		defer func() { _ = zr.Close() }()
		rd = zr
	case elf.COMPRESS_ZSTD:
		// No window needs to be larger than the output it produces.
		mem := min(max(size, 1<<20), zstdMaxWindow)
		zr, err := zstd.NewReader(bytes.NewReader(comp),
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(mem),
			zstd.WithDecoderMaxWindow(mem))
		if err != nil {
			return nil, fmt.Errorf("section %s: zstd: %w", name, err)
		}
		defer zr.Close()
		rd = zr
	}
	// The claimed size is trusted only up to what the stream really produces: the buffer
	// starts small and doubles with the output, up to the claimed size, so a lying header
	// costs no memory. It is filled to exactly the claimed size: bytes.Buffer, which this used
	// to read into, doubles its array whenever fewer than 512 bytes are free, so nearly every
	// section ended in an array twice its size, all of it kept for as long as the section.
	initial := size
	if c := uint64(len(comp))*4 + 4096; initial > c {
		initial = c
	}
	out := make([]byte, 0, initial)
	for uint64(len(out)) < size {
		if len(out) == cap(out) {
			out = slices.Grow(out, int(min(uint64(cap(out)), size-uint64(len(out)))))
		}
		m, err := io.ReadFull(rd, out[len(out):min(uint64(cap(out)), size)])
		out = out[:len(out)+m]
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("section %s: %s stream gave %d bytes, header says %d: %w", name, typ, len(out), size, errors.Join(ErrCompression, errSizeMismatch))
		}
		if err != nil {
			return nil, fmt.Errorf("section %s: decompress %s: %w: %w", name, typ, ErrCompression, err)
		}
	}
	// The stream must end here; reading on also checks its trailer (zstd's checksum).
	var probe [1]byte
	switch m, err := io.ReadFull(rd, probe[:]); {
	case m > 0:
		return nil, fmt.Errorf("section %s: %s stream gave more than the %d bytes the header says: %w", name, typ, size, errors.Join(ErrCompression, errSizeMismatch))
	case err != io.EOF:
		return nil, fmt.Errorf("section %s: decompress %s: %w: %w", name, typ, ErrCompression, err)
	}
	return out, nil
}

// DWARFSectionNames are the DWARF sections DWARFSections returns, by key (the section name
// without ".debug_"). Location lists other than DWARF 5's are not needed to symbolize.
var DWARFSectionNames = []string{
	"info", "abbrev", "line", "str", "line_str", "str_offsets", "addr",
	"rnglists", "ranges", "aranges", "loclists", "types",
}

// DWARFSections returns the DWARF sections present, decompressed, keyed by name without the
// ".debug_" prefix (see DWARFSectionNames). .debug_X wins over .zdebug_X. SHT_NOBITS
// sections (left by strip --only-keep-debug in the stripped binary) count as absent. The
// sections of a relocatable object come with their relocations applied (reloc.go); each call
// returns buffers of its own.
func (f *File) DWARFSections() (map[string][]byte, error) {
	return f.DWARFSectionsOf(DWARFSectionNames...)
}

// DWARFLineSectionNames are the sections that the line tables and the units naming them need,
// without the function ranges and location lists.
var DWARFLineSectionNames = []string{"info", "abbrev", "line", "str", "line_str", "str_offsets", "addr"}

// DWARFSectionsOf is DWARFSections for the named sections only: each one read is decompressed
// whole, and a reader of line tables has no use for the largest (location lists, ranges).
func (f *File) DWARFSectionsOf(keys ...string) (map[string][]byte, error) {
	out := make(map[string][]byte)
	for _, key := range keys {
		s := f.dwarfSection(key)
		if s == nil {
			continue
		}
		b, err := f.dwarfSectionData(s)
		if err != nil {
			return nil, fmt.Errorf("DWARF: %w", err)
		}
		out[key] = b
	}
	return out, nil
}

// dwarfSection is the DWARF section key (a name without ".debug_"): .debug_X, else
// .zdebug_X, nil when neither holds data.
func (f *File) dwarfSection(key string) *elf.Section {
	s := f.Section(".debug_" + key)
	if s == nil || s.Type == elf.SHT_NOBITS {
		s = f.Section(".zdebug_" + key)
	}
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil
	}
	return s
}

// dwarfSectionData is SectionDataOf with the section's relocations applied when the file is a
// relocatable object (see relocate).
func (f *File) dwarfSectionData(s *elf.Section) ([]byte, error) {
	b, err := f.SectionDataOf(s)
	if err != nil {
		return nil, err
	}
	if err := f.relocate(s, b); err != nil {
		return nil, err
	}
	return b, nil
}

// DWARFSectionsJoinedOf is DWARFSectionsOf for files that may hold several sections of one
// name, as split DWARF objects (.dwo) do: gcc writes each type unit in a .debug_info.dwo
// (DWARF 5) or .debug_types.dwo (DWARF 4) section of its own. The sections of a key in joined
// are concatenated in file order, each decompressed, as a DWARF package holds them; two
// sections of any other key (a .zdebug_ one counts as its .debug_ namesake) are an error,
// since which one the units' offsets point into is unknown. A joined section may be no larger
// than a single one (MaxSectionSize).
func (f *File) DWARFSectionsJoinedOf(keys []string, joined ...string) (map[string][]byte, error) {
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	join := make(map[string]bool, len(joined))
	for _, k := range joined {
		join[k] = true
	}
	parts := make(map[string][][]byte)
	sizes := make(map[string]int64)
	var order []string
	for _, s := range f.f.Sections {
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		key, ok := strings.CutPrefix(s.Name, ".debug_")
		if !ok {
			key, ok = strings.CutPrefix(s.Name, ".zdebug_")
		}
		if !ok || !want[key] {
			continue
		}
		_, dup := parts[key]
		if dup && !join[key] {
			return nil, fmt.Errorf("DWARF: %w: two .debug_%s sections, and which one the units' offsets point into is unknown", ErrDuplicateSection, key)
		}
		b, err := f.dwarfSectionData(s)
		if err != nil {
			return nil, fmt.Errorf("DWARF: %w", err)
		}
		if sizes[key] += int64(len(b)); sizes[key] > f.lim.MaxSectionSize {
			return nil, fmt.Errorf("DWARF: .debug_%s sections of more than %d bytes together: %w", key, f.lim.MaxSectionSize, ErrLimit)
		}
		if !dup {
			order = append(order, key)
		}
		parts[key] = append(parts[key], b)
	}
	out := make(map[string][]byte, len(order))
	for _, key := range order {
		if p := parts[key]; len(p) == 1 {
			out[key] = p[0]
		} else {
			out[key] = bytes.Join(p, nil)
		}
	}
	return out, nil
}

// DWARF builds a debug/dwarf reader over DWARFSections, so every byte it sees went through
// the limits of this package; a panic inside debug/dwarf.New becomes an error. The sections
// of a relocatable object are relocated against its module layout, as DWARFSections says.
func (f *File) DWARF() (*dwarf.Data, error) {
	secs, err := f.DWARFSections()
	if err != nil {
		return nil, err
	}
	if len(secs["info"]) == 0 {
		return nil, fmt.Errorf("DWARF: section .debug_info: %w", ErrNoSection)
	}
	var d *dwarf.Data
	err = safe("DWARF: parse .debug_info/.debug_abbrev", func() error {
		var err error
		d, err = dwarf.New(secs["abbrev"], secs["aranges"], nil, secs["info"], secs["line"], nil, secs["ranges"], secs["str"])
		if err != nil {
			return err
		}
		for _, k := range []string{"addr", "line_str", "str_offsets", "rnglists", "loclists"} {
			if b, ok := secs[k]; ok {
				if err := d.AddSection(".debug_"+k, b); err != nil {
					return fmt.Errorf("section .debug_%s: %w", k, err)
				}
			}
		}
		if b, ok := secs["types"]; ok {
			if err := d.AddTypes("types", b); err != nil {
				return fmt.Errorf("section .debug_types: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("DWARF: %w", err)
	}
	return d, nil
}

// HasDWARF reports whether the file carries a .debug_info (or .zdebug_info) with contents.
func (f *File) HasDWARF() bool {
	for _, n := range []string{".debug_info", ".zdebug_info"} {
		if s := f.Section(n); s != nil && s.Type != elf.SHT_NOBITS && s.FileSize > 0 {
			return true
		}
	}
	return false
}

// Loads returns the PT_LOAD program headers; for a laid-out relocatable object, which has
// none, its executable sections as loads (see relocatableLoads).
func (f *File) Loads() []addrmap.Load {
	if f.laidOut {
		return f.relocatableLoads()
	}
	return addrmap.LoadsOf(f.f)
}

// Runnable reports whether the file's executable sections hold bytes. objcopy
// --only-keep-debug turns them into NOBITS and rewrites the program headers' file offsets, so
// a separate debug file is not runnable and its Loads do not place mapped addresses.
func (f *File) Runnable() bool {
	for _, s := range f.f.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Size > 0 && s.Type != elf.SHT_NOBITS {
			return true
		}
	}
	return false
}

// Symbols returns the .symtab symbols (debug/elf semantics: without the null symbol 0), with
// the section size checked against the limits first. elf.ErrNoSymbols when there is none.
func (f *File) Symbols() ([]elf.Symbol, error) {
	return f.symbols(elf.SHT_SYMTAB, ".symtab", f.f.Symbols)
}

// DynamicSymbols is Symbols for .dynsym.
func (f *File) DynamicSymbols() ([]elf.Symbol, error) {
	return f.symbols(elf.SHT_DYNSYM, ".dynsym", f.f.DynamicSymbols)
}

func (f *File) symbols(typ elf.SectionType, name string, read func() ([]elf.Symbol, error)) ([]elf.Symbol, error) {
	for _, s := range f.f.Sections {
		if s == nil || s.Type != typ {
			continue
		}
		if s.FileSize > uint64(f.lim.MaxSectionSize) {
			return nil, fmt.Errorf("section %s: size %d over the limit %d: %w", name, s.FileSize, f.lim.MaxSectionSize, ErrLimit)
		}
		if s.Offset > uint64(f.size) || uint64(f.size)-s.Offset < s.FileSize {
			return nil, fmt.Errorf("section %s: %d bytes at offset %#x: %w (size %d)", name, s.FileSize, s.Offset, ErrTruncated, f.size)
		}
		if int(s.Link) < len(f.f.Sections) {
			if l := f.f.Sections[s.Link]; l != nil && l.FileSize > uint64(f.lim.MaxSectionSize) {
				return nil, fmt.Errorf("section %s: string table %s size %d over the limit: %w", name, l.Name, l.FileSize, ErrLimit)
			}
		}
		break
	}
	var syms []elf.Symbol
	err := safe("section "+name+" symbols", func() error {
		var err error
		syms, err = read()
		return err
	})
	if err != nil {
		return nil, err
	}
	return syms, nil
}
