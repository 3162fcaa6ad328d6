package elfx

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strings"
)

// minMappedSection is the smallest section DWARFSectionsMappedOf maps rather than reads: a
// mapping costs a system call and at least a page, more than reading a small section.
var minMappedSection uint64 = 1 << 20 // a variable for the tests

// DWARFSectionsMappedOf is DWARFSectionsOf with the sections stored uncompressed in the file
// mapped read-only from it rather than read into memory of the process: the others
// (compressed, small, or of a relocatable object, whose relocations are applied to a copy)
// are read as DWARFSectionsOf reads them. release unmaps the mapped ones; nothing may read
// the returned slices after it, nor keep a string or slice of them that was not copied.
//
// Why: reading a section copies it out of the page cache into fresh anonymous memory, page
// by page (a fault and a cleared page per 4 KiB), and keeps it in the Go heap, whose
// collector then lets the heap grow by GOGC percent of it. bench/bigdwarf's 1.2 GB of
// uncompressed DWARF cost 280,000 such faults; mapped, the kernel maps the cached pages as
// they are read, 16 per fault, and release gives them back as soon as they are decoded.
//
// A file that shrinks while it is mapped makes reading past its new end fault: callers read
// the sections with debug.SetPanicOnFault set, and turn the fault into an error.
func (f *File) DWARFSectionsMappedOf(keys ...string) (secs map[string][]byte, release func() error, err error) {
	secs, maps, err := f.mapDWARFSections(keys)
	if err != nil {
		return nil, nil, err
	}
	return secs, func() error {
		// No slice of the map is left to point at memory no longer mapped.
		clear(secs)
		var errs []error
		for _, m := range maps {
			errs = append(errs, unmap(m))
		}
		maps = nil
		return errors.Join(errs...)
	}, nil
}

// mapDWARFSections is DWARFSectionsMappedOf, with the mappings to unmap.
func (f *File) mapDWARFSections(keys []string) (map[string][]byte, [][]byte, error) {
	var maps [][]byte
	secs := make(map[string][]byte)
	for _, key := range keys {
		s := f.dwarfSection(key)
		if s == nil {
			continue
		}
		b, m, err := f.mapSection(s)
		if err == nil && m == nil {
			b, err = f.dwarfSectionData(s)
		}
		if err != nil {
			for _, m := range maps {
				_ = unmap(m) // only read from
			}
			return nil, nil, fmt.Errorf("DWARF: %w", err)
		}
		if m != nil {
			maps = append(maps, m)
		}
		secs[key] = b
	}
	return secs, maps, nil
}

// mapSection maps section s when it can be used as it stands in the file: data is the
// section, mapping what to unmap. Both are nil when the section is to be read instead.
func (f *File) mapSection(s *elf.Section) (data, mapping []byte, err error) {
	osf, ok := f.file.(*os.File)
	if !ok || s.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(s.Name, ".zdebug_") ||
		f.f.Type == elf.ET_REL || s.FileSize < minMappedSection || s.Type == elf.SHT_NULL {
		return nil, nil, nil
	}
	off, n := s.Offset, s.FileSize
	if n > uint64(f.lim.MaxSectionSize) {
		return nil, nil, fmt.Errorf("section %s: size %d over the limit %d: %w", s.Name, n, f.lim.MaxSectionSize, ErrLimit)
	}
	if off > uint64(f.size) || uint64(f.size)-off < n {
		return nil, nil, fmt.Errorf("section %s: %d bytes at offset %#x: %w (size %d)", s.Name, n, off, ErrTruncated, f.size)
	}
	page := uint64(os.Getpagesize())
	start := off &^ (page - 1)
	m, err := mapRange(osf, int64(start), int(off+n-start))
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("section %s: %w", s.Name, err)
	}
	return m[off-start:], m, nil
}
