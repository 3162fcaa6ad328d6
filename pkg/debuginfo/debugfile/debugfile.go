// Package debugfile finds the separate debug file of a binary, the way GDB and the
// distributions lay them out: by GNU build ID under <dir>/.build-id/, then by the
// .gnu_debuglink name and CRC next to the binary, in its .debug/ subdirectory and under each
// global debug directory.
package debugfile

import (
	"debug/elf"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/profsym/profsym/pkg/binaryid"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
)

// How a debug file was found.
const (
	HowBuildID   = "build-id"
	HowDebugLink = "debuglink"
)

// SystemDir is where distributions install separate debug files (Debian's -dbg and dbgsym
// packages, Fedora's debuginfo): the directory GDB, elfutils and llvm-symbolizer search when
// given none.
const SystemDir = "/usr/lib/debug"

// ErrNotFound: no candidate exists or none matched.
var ErrNotFound = errors.New("no separate debug file found")

// Debuglink is the content of a .gnu_debuglink section.
type Debuglink struct {
	Name string
	CRC  uint32
}

// ReadDebuglink returns the .gnu_debuglink of f; ok is false when there is none or it is
// malformed (no NUL-terminated name, a name with a path separator, no room for the CRC).
func ReadDebuglink(f *elfx.File) (Debuglink, bool) {
	s := f.Section(".gnu_debuglink")
	if s == nil || s.Type == elf.SHT_NOBITS || s.FileSize > 4096 {
		return Debuglink{}, false
	}
	data, err := f.RawSectionData(s)
	if err != nil {
		return Debuglink{}, false
	}
	nul := -1
	for i, c := range data {
		if c == 0 {
			nul = i
			break
		}
	}
	if nul <= 0 {
		return Debuglink{}, false
	}
	name := string(data[:nul])
	crcOff := (nul + 1 + 3) &^ 3
	if crcOff+4 > len(data) {
		return Debuglink{}, false
	}
	if strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return Debuglink{}, false
	}
	return Debuglink{Name: name, CRC: f.ELF().ByteOrder.Uint32(data[crcOff:])}, true
}

// BuildIDPath is where the debug file of build ID id lies below dir in the build-ID layout
// GDB, elfutils and the distributions' packages use: dir/.build-id/ab/cdef.debug. id is at
// least three hex digits.
func BuildIDPath(dir, id string) string {
	return filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug")
}

// Find returns the path of the separate debug file of the binary f (read from binaryPath,
// with IDs ids) and how it was found (HowBuildID or HowDebugLink).
//
// Order: for each dir, <dir>/.build-id/xx/rest.debug, accepted only if it carries the same
// GNU build ID; then the .gnu_debuglink name in the binary's directory, its .debug/
// subdirectory and <dir>/<binary's absolute directory>/ for each dir, accepted only if its
// CRC-32 (IEEE, as GNU tools compute it) matches. A candidate that is the binary itself is
// skipped. Returns ErrNotFound when nothing matched.
func Find(f *elfx.File, ids buildid.IDs, binaryPath string, dirs []string) (path string, how string, err error) {
	if id := ids.GNU; binaryid.ValidHex(id) && len(id) > 2 {
		for _, d := range dirs {
			p := BuildIDPath(d, id)
			if sameBuildID(p, id) {
				return p, HowBuildID, nil
			}
		}
	}
	link, ok := ReadDebuglink(f)
	if !ok {
		return "", "", ErrNotFound
	}
	var cands []string
	var absDir string
	if binaryPath != "" {
		dir := filepath.Dir(binaryPath)
		cands = append(cands, filepath.Join(dir, link.Name), filepath.Join(dir, ".debug", link.Name))
		if a, err := filepath.Abs(dir); err == nil {
			absDir = a
		}
	}
	if absDir != "" {
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, absDir, link.Name))
		}
	}
	self, _ := os.Stat(binaryPath)
	for _, c := range cands {
		st, err := os.Stat(c)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		if self != nil && os.SameFile(self, st) {
			continue
		}
		crc, err := fileCRC(c)
		if err == nil && crc == link.CRC {
			return c, HowDebugLink, nil
		}
	}
	return "", "", fmt.Errorf("debuglink %q (crc %08x), %d candidates: %w", link.Name, link.CRC, len(cands), ErrNotFound)
}

// sameBuildID reports whether the regular file at p is an ELF file with GNU build ID id.
func sameBuildID(p, id string) bool {
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	f, c, err := elfx.OpenPath(p, elfx.DefaultLimits())
	if err != nil {
		return false
	}
	// A read-only file: a failing Close loses nothing and cannot change the answer.
	defer func() { _ = c.Close() }()
	gnu, _ := buildid.FromELF(f)
	return gnu == id
}

// CRC computes the .gnu_debuglink CRC-32 of the file at path.
func CRC(path string) (uint32, error) { return fileCRC(path) }

func fileCRC(path string) (uint32, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, fh); err != nil {
		return 0, fmt.Errorf("crc %s: %w", path, err)
	}
	return h.Sum32(), nil
}
