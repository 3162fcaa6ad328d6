package gopclntab

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// memory reads the file's allocated sections by virtual address, loading each section once.
type memory struct {
	f     *elf.File
	cache map[*elf.Section][]byte
	// image, when set, is the whole file mapped read-only: sections stored as they are
	// (not compressed) are slices of it, read from the page cache as they are touched.
	image []byte
}

func newMemory(f *elf.File) *memory {
	return &memory{f: f, cache: map[*elf.Section][]byte{}}
}

func (m *memory) section(s *elf.Section) ([]byte, error) {
	if d, ok := m.cache[s]; ok {
		return d, nil
	}
	if s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_ALLOC == 0 {
		return nil, nil
	}
	if m.image != nil && s.Flags&elf.SHF_COMPRESSED == 0 && s.Size <= maxSectionSize {
		if s.Offset > uint64(len(m.image)) || s.Size > uint64(len(m.image))-s.Offset {
			return nil, fmt.Errorf("%w: section %s of %d bytes runs past the end of the file", ErrCorrupt, s.Name, s.Size)
		}
		d := m.image[s.Offset : s.Offset+s.Size : s.Offset+s.Size]
		m.cache[s] = d
		return d, nil
	}
	d, err := readSection(s)
	if err != nil {
		return nil, err
	}
	m.cache[s] = d
	return d, nil
}

// read returns n bytes at virtual address addr, all from one section.
func (m *memory) read(addr, n uint64) ([]byte, error) {
	for _, s := range m.f.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS || addr < s.Addr || addr-s.Addr >= s.Size {
			continue
		}
		d, err := m.section(s)
		if err != nil {
			return nil, err
		}
		off := addr - s.Addr
		if off > uint64(len(d)) || n > uint64(len(d))-off {
			return nil, fmt.Errorf("%w: %d bytes at %#x cross the end of %s", ErrCorrupt, n, addr, s.Name)
		}
		return d[off : off+n], nil
	}
	return nil, fmt.Errorf("%w: address %#x is in no section with contents", ErrCorrupt, addr)
}

// moduleWords holds the moduledata fields the loader needs.
type moduleWords struct {
	text, gofunc uint64
}

// Word indices in runtime.moduledata (every slice takes three words).
const (
	mdFuncnametab = 1
	mdText        = 22
	mdGofunc118   = 38 // Go 1.18 and 1.19
	mdGofunc120   = 40 // Go 1.20 on: covctrs and ecovctrs come before
)

// findModuledata locates runtime.firstmoduledata without a symbol table (recent linkers give it
// its own .go.module section, older ones put it in .noptrdata): its first word points
// at the pclntab header and its second at the function name table inside it. Relocated
// binaries keep those pointers in RELATIVE relocations rather than in place, so both are tried.
func findModuledata(f *elf.File, mem *memory, t *table) (moduleWords, bool) {
	nwords := mdGofunc120 + 1
	gofuncWord := mdGofunc120
	if t.ver < ver120 {
		nwords, gofuncWord = mdGofunc118+1, mdGofunc118
	}
	ps := uint64(t.ptrSize)
	wantNames := t.addr + uint64(len(t.data)-len(t.funcnametab))
	for _, name := range []string{".go.module", ".noptrdata", ".data", ".data.rel.ro"} {
		s := f.Section(name)
		if s == nil {
			continue
		}
		d, err := mem.section(s)
		if err != nil || d == nil {
			continue
		}
		start := (ps - s.Addr%ps) % ps
		for off := start; off+uint64(nwords)*ps <= uint64(len(d)); off += ps {
			if t.uintptr(d[off:]) != t.addr || t.uintptr(d[off+mdFuncnametab*ps:]) != wantNames {
				continue
			}
			return moduleWords{
				text:   t.uintptr(d[off+mdText*ps:]),
				gofunc: t.uintptr(d[off+uint64(gofuncWord)*ps:]),
			}, true
		}
	}
	return findModuledataRelocated(f, t, nwords, gofuncWord)
}

// findModuledataRelocated finds moduledata through R_*_RELATIVE relocations, whose addends
// hold the pointers of a position-independent executable.
func findModuledataRelocated(f *elf.File, t *table, nwords, gofuncWord int) (moduleWords, bool) {
	if f.Class != elf.ELFCLASS64 || t.ptrSize != 8 {
		return moduleWords{}, false
	}
	var relative uint32
	switch f.Machine {
	case elf.EM_X86_64:
		relative = uint32(elf.R_X86_64_RELATIVE)
	case elf.EM_AARCH64:
		relative = uint32(elf.R_AARCH64_RELATIVE)
	case elf.EM_PPC64:
		relative = uint32(elf.R_PPC64_RELATIVE)
	case elf.EM_RISCV:
		relative = uint32(elf.R_RISCV_RELATIVE)
	case elf.EM_S390:
		relative = uint32(elf.R_390_RELATIVE)
	case elf.EM_LOONGARCH:
		relative = uint32(elf.R_LARCH_RELATIVE)
	default:
		return moduleWords{}, false
	}
	addends := map[uint64]uint64{}
	var md uint64
	found := false
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA {
			continue
		}
		d, err := readSection(s)
		if err != nil {
			continue
		}
		for i := 0; i+24 <= len(d); i += 24 {
			off := f.ByteOrder.Uint64(d[i:])
			info := f.ByteOrder.Uint64(d[i+8:])
			add := f.ByteOrder.Uint64(d[i+16:])
			if uint32(info) != relative {
				continue
			}
			addends[off] = add
			if add == t.addr && !found {
				md, found = off, true
			}
		}
	}
	if !found {
		return moduleWords{}, false
	}
	names, ok := addends[md+mdFuncnametab*8]
	if !ok || names != t.addr+uint64(len(t.data)-len(t.funcnametab)) {
		return moduleWords{}, false
	}
	text, ok1 := addends[md+mdText*8]
	gofunc, ok2 := addends[md+uint64(gofuncWord)*8]
	if !ok1 || !ok2 {
		return moduleWords{}, false
	}
	return moduleWords{text: text, gofunc: gofunc}, true
}

// goVersion reads the Go release from .go.buildinfo ("go1.14.2" gives 1, 14), for the
// pclntab format that served Go 1.2 to 1.15 without saying which release wrote it.
func goVersion(f *elf.File, mem *memory) (major, minor int, ok bool) {
	s := f.Section(".go.buildinfo")
	if s == nil {
		return 0, 0, false
	}
	d, err := mem.section(s)
	if err != nil || len(d) < 32 || !bytes.HasPrefix(d, []byte("\xff Go buildinf:")) {
		return 0, 0, false
	}
	ptrSize, flags := int(d[14]), d[15]
	var vers string
	if flags&2 != 0 {
		n, w := binary.Uvarint(d[32:])
		if w <= 0 || n > 64 || uint64(len(d)-32-w) < n {
			return 0, 0, false
		}
		vers = string(d[32+w : 32+w+int(n)])
	} else {
		if ptrSize != 4 && ptrSize != 8 {
			return 0, 0, false
		}
		var bo binary.ByteOrder = binary.LittleEndian
		if flags&1 != 0 {
			bo = binary.BigEndian
		}
		ptr := func(b []byte) uint64 {
			if ptrSize == 8 {
				return bo.Uint64(b)
			}
			return uint64(bo.Uint32(b))
		}
		hdr, err := mem.read(ptr(d[16:]), uint64(2*ptrSize))
		if err != nil {
			return 0, 0, false
		}
		n := ptr(hdr[ptrSize:])
		if n > 64 {
			return 0, 0, false
		}
		b, err := mem.read(ptr(hdr), n)
		if err != nil {
			return 0, 0, false
		}
		vers = string(b)
	}
	rest, found := strings.CutPrefix(vers, "go")
	if !found {
		return 0, 0, false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minorStr := parts[1]
	for i, c := range minorStr {
		if c < '0' || c > '9' {
			minorStr = minorStr[:i]
			break
		}
	}
	minor, err2 := strconv.Atoi(minorStr)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// readSection reads a section whole. Its size is checked against the file first, so a header
// that lies about the size costs an error, not an allocation of the claimed size.
func readSection(s *elf.Section) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if s.Size > maxSectionSize {
		return nil, fmt.Errorf("%w: section %s claims %d bytes", ErrCorrupt, s.Name, s.Size)
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		d, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("read section %s: %w", s.Name, err)
		}
		return d, nil
	}
	if s.Size == 0 {
		return []byte{}, nil
	}
	var last [1]byte
	if _, err := s.ReadAt(last[:], int64(s.Size-1)); err != nil {
		return nil, fmt.Errorf("%w: section %s of %d bytes runs past the end of the file", ErrCorrupt, s.Name, s.Size)
	}
	d := make([]byte, s.Size)
	if _, err := s.ReadAt(d, 0); err != nil {
		return nil, fmt.Errorf("read section %s: %w", s.Name, err)
	}
	return d, nil
}
