package dwp

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/profsym/profsym/pkg/debuginfo/dwarfsym"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
)

// ErrNoSplitUnits is returned by PackExecutable for a file without skeleton units.
var ErrNoSplitUnits = errors.New("no split DWARF skeleton units")

// maxSkeletons bounds the .dwo files one executable may make PackExecutable open.
const maxSkeletons = 1 << 16

// A Skeleton is one skeleton unit of an executable and what became of its .dwo file.
type Skeleton struct {
	dwarfsym.SplitUnit
	// Path is the .dwo file read for it: DW_AT_dwo_name joined to DW_AT_comp_dir when
	// relative, else (when that file does not exist) the file of its base name beside the
	// executable, where a build moved with its objects leaves it.
	Path string
	// Err says why the unit is not in the package (the file is missing, of another build,
	// malformed); nil when it is.
	Err error
}

// Result is what PackExecutable did.
type Result struct {
	Skeletons []Skeleton
	Stats
}

// Missing returns the skeletons whose split units are not in the package.
func (r Result) Missing() []Skeleton {
	var out []Skeleton
	for _, s := range r.Skeletons {
		if s.Err != nil {
			out = append(out, s)
		}
	}
	return out
}

// PackExecutable writes to w the package of the .dwo files the skeleton units of the
// executable (or debug file) at exe name. Only a .dwo whose split unit has the skeleton's
// DWO ID is taken; a skeleton whose file is missing or of another build is left out of the
// package and told in its Skeleton.Err. It fails when there is nothing to pack (no skeleton,
// or no .dwo found) and then writes nothing.
func PackExecutable(exe string, w io.Writer) (Result, error) {
	units, err := Skeletons(exe)
	if err != nil {
		return Result{}, err
	}
	res := Result{Skeletons: make([]Skeleton, len(units))}
	b := NewBuilder()
	for i, u := range units {
		s := &res.Skeletons[i]
		s.SplitUnit = u
		s.Path, s.Err = dwoPath(exe, u)
		if s.Err != nil {
			continue
		}
		o, err := readObjectFile(s.Path)
		switch {
		case err != nil:
			s.Err = err
		case o.DWOID != u.DWOID:
			s.Err = fmt.Errorf("%s holds DWO ID %#x, the skeleton unit names %#x: a .dwo of another build", s.Path, o.DWOID, u.DWOID)
		default:
			if _, err := b.Add(o); err != nil {
				s.Err = err
			}
		}
	}
	if b.Units() == 0 {
		return res, fmt.Errorf("%s: none of the .dwo files of its %d skeleton units was found: first %w", exe, len(units), res.Skeletons[0].Err)
	}
	res.Stats, err = b.Write(w)
	return res, err
}

// Skeletons returns the skeleton units of the executable (or debug file) at exe.
func Skeletons(exe string) ([]dwarfsym.SplitUnit, error) {
	f, closer, err := elfx.OpenPath(exe, elfx.Limits{})
	if err != nil {
		return nil, err
	}
	// Only read: a failing close loses nothing.
	defer func() { _ = closer.Close() }()
	if f.ELF().Type == elf.ET_REL {
		// Its DWARF is not relocated, so the names its skeleton units give are not read
		// right; the linked executable has them.
		return nil, fmt.Errorf("%s: a relocatable object: its skeleton units are read from the executable it is linked into", exe)
	}
	if !mayHaveSkeletons(f) {
		return nil, fmt.Errorf("%s: %w", exe, ErrNoSplitUnits)
	}
	secs, err := f.DWARFSectionsOf("info", "abbrev", "str", "line_str", "str_offsets", "addr")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", exe, err)
	}
	units, err := dwarfsym.SplitUnits(secs, f.ELF().ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", exe, err)
	}
	if len(units) == 0 {
		return nil, fmt.Errorf("%s: %w", exe, ErrNoSplitUnits)
	}
	if len(units) > maxSkeletons {
		return nil, fmt.Errorf("%s: %d skeleton units, at most %d .dwo files are packed", exe, len(units), maxSkeletons)
	}
	return units, nil
}

// dwoPath returns the .dwo file of skeleton unit u of exe: where the compiler wrote it,
// else beside exe.
func dwoPath(exe string, u dwarfsym.SplitUnit) (string, error) {
	if u.DWOName == "" {
		return "", fmt.Errorf("skeleton unit of DWO ID %#x names no .dwo file", u.DWOID)
	}
	p := u.DWOName
	if !filepath.IsAbs(p) {
		p = filepath.Join(u.CompDir, p)
	}
	_, err := os.Stat(p)
	if err == nil {
		return p, nil
	}
	beside := filepath.Join(filepath.Dir(exe), filepath.Base(u.DWOName))
	if _, err2 := os.Stat(beside); err2 == nil {
		return beside, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return p, fmt.Errorf("%s: not found (nor beside the executable)", p)
	}
	return p, err
}

func readObjectFile(path string) (*Object, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	// Only read: a failing close loses nothing.
	defer func() { _ = fh.Close() }()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return ReadObject(path, fh, st.Size())
}

// mayHaveSkeletons tells from the first unit header of .debug_info, without reading the
// section, that f has no skeleton units, so that a client looking at every file it uploads
// does not load the DWARF of large builds that are not split. Compilers split every unit of
// a build or none. A DWARF 5 header says its unit type; a GNU DWARF 4 skeleton is known by
// its root's attributes only, but its build has a .debug_addr, which DWARF 4 has not
// otherwise.
func mayHaveSkeletons(f *elfx.File) bool {
	s := f.Section(".debug_info")
	if s == nil || s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 {
		// Absent (or only in .zdebug_info), or compressed: read it all to know.
		return s == nil && f.Section(".zdebug_info") != nil || s != nil && s.Type != elf.SHT_NOBITS
	}
	var hdr [16]byte
	if s.Size < uint64(len(hdr)) {
		return false
	}
	if _, err := f.ReaderAt().ReadAt(hdr[:], int64(s.Offset)); err != nil {
		return false
	}
	order := f.ELF().ByteOrder
	at := 4
	if order.Uint32(hdr[:]) == 0xffffffff {
		at = 12
	}
	if order.Uint16(hdr[at:]) >= 5 {
		return hdr[at+2] == 0x04 // DW_UT_skeleton
	}
	return f.Section(".debug_addr") != nil
}
