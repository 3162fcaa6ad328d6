package debugfile

import (
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
)

// Sections that name a supplementary file.
const (
	SectionAltLink = ".gnu_debugaltlink" // dwz -m, DWARF 2-5 with GNU forms
	SectionSup     = ".debug_sup"        // DWARF 5, dwz -5 -m
)

// HowSupplementaryPath: the supplementary file was found at the path its link names
// (absolute, or relative to the directory of the file that links it).
const HowSupplementaryPath = "link-path"

// ErrSupplementaryNotFound is wrapped by FindSupplementary when no candidate matched.
var ErrSupplementaryNotFound = errors.New("supplementary file not found")

// A SupLink is what a debug file says of its supplementary file: a name (usually a path, as
// dwz -M wrote it) and the ID that identifies the file, in lower-case hex: its GNU build ID for
// .gnu_debugaltlink, the checksum of its own .debug_sup for .debug_sup (dwz puts a build ID
// there too).
type SupLink struct {
	Section string `json:"section"`
	Name    string `json:"name"`
	ID      string `json:"id"`
}

// maxSupLink bounds the sections read: a name and an ID, a few hundred bytes in practice.
const maxSupLink = 1 << 16

// ReadSupLink returns the supplementary link of f. ok is false when f has none; an error means
// the section is there and malformed.
func ReadSupLink(f *elfx.File) (link SupLink, ok bool, err error) {
	for _, name := range []string{SectionAltLink, SectionSup} {
		s := f.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		if s.FileSize > maxSupLink {
			return SupLink{}, false, fmt.Errorf("%s: %d bytes, at most %d", name, s.FileSize, maxSupLink)
		}
		data, err := f.RawSectionData(s)
		if err != nil {
			return SupLink{}, false, fmt.Errorf("%s: %w", name, err)
		}
		if name == SectionAltLink {
			link, err = ParseAltLink(data)
		} else {
			var isSup bool
			isSup, link, err = ParseDebugSup(data)
			if err == nil && isSup {
				// The supplementary file itself: it names no other file.
				continue
			}
		}
		if err != nil {
			return SupLink{}, false, fmt.Errorf("%s: %w", name, err)
		}
		return link, true, nil
	}
	return SupLink{}, false, nil
}

// ParseAltLink decodes a .gnu_debugaltlink section: a NUL-terminated file name, then the
// supplementary file's build ID (the rest of the section).
func ParseAltLink(data []byte) (SupLink, error) {
	nul := indexNUL(data)
	if nul <= 0 {
		return SupLink{}, errors.New("no NUL-terminated file name")
	}
	id := data[nul+1:]
	if len(id) == 0 || len(id) > 64 {
		return SupLink{}, fmt.Errorf("build ID of %d bytes", len(id))
	}
	return SupLink{Section: SectionAltLink, Name: string(data[:nul]), ID: hex.EncodeToString(id)}, nil
}

// ParseDebugSup decodes a DWARF 5 .debug_sup section: version (2 bytes, 5), is_supplementary
// (1 byte), a NUL-terminated file name, a ULEB128 checksum length and the checksum. isSup is
// true in the supplementary file itself, whose checksum identifies it.
func ParseDebugSup(data []byte) (isSup bool, link SupLink, err error) {
	if len(data) < 4 {
		return false, SupLink{}, fmt.Errorf("%d bytes, too short", len(data))
	}
	// The version is little- or big-endian as the file is; 5 either way reads as 5 or 0x500.
	if v := int(data[0]) | int(data[1])<<8; v != 5 && v != 0x500 {
		return false, SupLink{}, fmt.Errorf("version %d, want 5", v)
	}
	switch data[2] {
	case 0, 1:
		isSup = data[2] == 1
	default:
		return false, SupLink{}, fmt.Errorf("is_supplementary %d", data[2])
	}
	rest := data[3:]
	nul := indexNUL(rest)
	if nul < 0 {
		return false, SupLink{}, errors.New("no NUL-terminated file name")
	}
	name := string(rest[:nul])
	rest = rest[nul+1:]
	var n uint64
	var shift uint
	i := 0
	for ; ; i++ {
		if i >= len(rest) || shift > 63 {
			return false, SupLink{}, errors.New("truncated checksum length")
		}
		c := rest[i]
		n |= uint64(c&0x7f) << shift
		shift += 7
		if c < 0x80 {
			break
		}
	}
	rest = rest[i+1:]
	if n != uint64(len(rest)) || n == 0 || n > 64 {
		return false, SupLink{}, fmt.Errorf("checksum of %d bytes in %d", n, len(rest))
	}
	if !isSup && name == "" {
		return false, SupLink{}, errors.New("no file name")
	}
	return isSup, SupLink{Section: SectionSup, Name: name, ID: hex.EncodeToString(rest)}, nil
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// SupplementaryID returns the ID a supplementary file is known by: the checksum of its own
// .debug_sup when it has one that says it is supplementary, else its GNU build ID.
func SupplementaryID(f *elfx.File) (string, error) {
	if s := f.Section(SectionSup); s != nil && s.Type != elf.SHT_NOBITS && s.FileSize <= maxSupLink {
		data, err := f.RawSectionData(s)
		if err != nil {
			return "", fmt.Errorf("%s: %w", SectionSup, err)
		}
		if isSup, link, err := ParseDebugSup(data); err == nil && isSup {
			return link.ID, nil
		}
	}
	id, _ := buildid.FromELF(f)
	return id, nil
}

// FindSupplementary returns the path of the supplementary file link names, for a file read
// from linkerPath, and how it was found (HowSupplementaryPath or HowBuildID).
//
// Order: the link's name when absolute, else relative to linkerPath's directory; that name
// under each dir (distributions install /usr/lib/debug/.dwz/... files and link them by
// absolute path); <dir>/.build-id/xx/rest.debug for each dir. A candidate is accepted only
// if its ID (SupplementaryID) is the link's. Returns an error wrapping
// ErrSupplementaryNotFound, naming the ID, when nothing matched.
func FindSupplementary(link SupLink, linkerPath string, dirs []string) (path, how string, err error) {
	var cands []string
	if filepath.IsAbs(link.Name) {
		cands = append(cands, link.Name)
	} else if link.Name != "" && linkerPath != "" {
		cands = append(cands, filepath.Join(filepath.Dir(linkerPath), link.Name))
	}
	if link.Name != "" {
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, link.Name))
		}
	}
	nPath := len(cands)
	if len(link.ID) > 2 {
		for _, d := range dirs {
			cands = append(cands, BuildIDPath(d, link.ID))
		}
	}
	for i, c := range cands {
		if supplementaryIDOf(c) != link.ID {
			continue
		}
		if i < nPath {
			return c, HowSupplementaryPath, nil
		}
		return c, HowBuildID, nil
	}
	return "", "", fmt.Errorf("%s names %q with ID %s; %d candidates: %w", link.Section, link.Name, link.ID, len(cands), ErrSupplementaryNotFound)
}

// supplementaryIDOf is the SupplementaryID of the regular file at p, "" when it has none.
func supplementaryIDOf(p string) string {
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return ""
	}
	f, c, err := elfx.OpenPath(p, elfx.DefaultLimits())
	if err != nil {
		return ""
	}
	// A read-only file: a failing Close loses nothing and cannot change the answer.
	defer func() { _ = c.Close() }()
	id, _ := SupplementaryID(f)
	return id
}
