// Package buildid computes the identities of a binary that the OTel semantic conventions
// define and profsym indexes by: the GNU build ID, the Go build ID and the htlhash file ID of
// the OTel eBPF profiler.
//
// Representation: GNU and HTLHash are lower-case hex. Go is the Go build ID string exactly as
// `go tool buildid` prints it (e.g. "abc.../def.../ghi.../jkl..."): that is what the semantic
// convention process.executable.build_id.go specifies and shows in its example, so a
// producer that follows the convention sends the same string. It contains '/' characters:
// callers that build paths or keys from it must escape it.
package buildid

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/profsym/profsym/pkg/binaryid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
)

// IDs are the identities of one file; "" when absent.
type IDs struct {
	GNU, Go, HTLHash string
}

// Type names as used in the semantic-convention attribute names
// (process.executable.build_id.<type>).
const (
	TypeGNU     = "gnu"
	TypeGo      = "go"
	TypeHTLHash = "htlhash"
)

// Primary returns the preferred ID: GNU, else Go, else htlhash; ("", "") when there is none.
func (ids IDs) Primary() (typ string, id string) {
	switch {
	case ids.GNU != "":
		return TypeGNU, ids.GNU
	case ids.Go != "":
		return TypeGo, ids.Go
	case ids.HTLHash != "":
		return TypeHTLHash, ids.HTLHash
	}
	return "", ""
}

const (
	ntGNUBuildID = 3 // NT_GNU_BUILD_ID, owner "GNU"
	ntGoBuildID  = 4 // the Go linker's build ID note, owner "Go", in .note.go.buildid
	htlChunk     = 4096
	// Real notes are a few dozen bytes; bigger note sections or descriptors are not read.
	maxNoteData = 1 << 20
	maxGNUDesc  = 1024
)

// ErrCorrupt marks a file that starts like an ELF file but could not be parsed.
var ErrCorrupt = errors.New("corrupt ELF file")

// HTLHash is the OTel eBPF profiler's file ID (libpf.FileIDFromExecutableReader): the first
// 16 bytes of SHA-256 over the first min(size, 4096) bytes, the last min(size, 4096) bytes
// (both, so a file under 8 KiB is partly hashed twice) and the big-endian uint64 size.
func HTLHash(r io.ReaderAt, size int64) (string, error) {
	if size < 0 {
		return "", fmt.Errorf("htlhash: negative size %d", size)
	}
	n := min(size, htlChunk)
	buf := make([]byte, n)
	h := sha256.New()
	if _, err := r.ReadAt(buf, 0); err != nil && (!errors.Is(err, io.EOF) || n != 0) {
		return "", fmt.Errorf("htlhash: read head: %w", err)
	}
	h.Write(buf)
	if _, err := r.ReadAt(buf, size-n); err != nil && (!errors.Is(err, io.EOF) || n != 0) {
		return "", fmt.Errorf("htlhash: read tail: %w", err)
	}
	h.Write(buf)
	var l [8]byte
	binary.BigEndian.PutUint64(l[:], uint64(size))
	h.Write(l[:])
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// Compute returns every ID of the file of size bytes read through r. HTLHash is computed for
// any file. A file that is not ELF (wrong magic) yields only HTLHash and no error; a file
// with the ELF magic that cannot be parsed yields HTLHash and an error wrapping ErrCorrupt.
func Compute(r io.ReaderAt, size int64) (IDs, error) {
	var ids IDs
	h, err := HTLHash(r, size)
	if err != nil {
		return ids, err
	}
	ids.HTLHash = h
	f, err := elfx.Open(r, size, elfx.DefaultLimits())
	if errors.Is(err, elfx.ErrNotELF) {
		return ids, nil
	}
	if err != nil {
		return ids, fmt.Errorf("build ID: %w: %w", ErrCorrupt, err)
	}
	ids.GNU, ids.Go = FromELF(f)
	return ids, nil
}

// FromFile is Compute on the file at path.
func FromFile(path string) (IDs, error) {
	fh, err := os.Open(path)
	if err != nil {
		return IDs{}, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return IDs{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return IDs{}, fmt.Errorf("build ID of %s: not a regular file", path)
	}
	ids, err := Compute(fh, st.Size())
	if err != nil {
		return ids, fmt.Errorf("%s: %w", path, err)
	}
	return ids, nil
}

// FromELF returns the GNU (hex) and Go build IDs found in the SHT_NOTE sections and PT_NOTE
// segments of f. Unreadable or malformed notes are skipped: a binary without a readable
// note simply has no such ID.
func FromELF(f *elfx.File) (gnu, goID string) {
	ef := f.ELF()
	visit := func(data []byte, align uint64) {
		forEachNote(data, ef.ByteOrder, align, func(name string, typ uint32, desc []byte) {
			switch {
			case gnu == "" && name == "GNU" && typ == ntGNUBuildID && len(desc) > 0 && len(desc) <= maxGNUDesc:
				gnu = hex.EncodeToString(desc)
			case goID == "" && name == "Go" && typ == ntGoBuildID:
				if s := string(bytes.TrimRight(desc, "\x00")); binaryid.ValidGo(s) {
					goID = s
				}
			}
		})
	}
	for _, s := range ef.Sections {
		if s == nil || s.Type != elf.SHT_NOTE || s.FileSize > maxNoteData {
			continue
		}
		if data, err := f.RawSectionData(s); err == nil {
			visit(data, s.Addralign)
		}
		if gnu != "" && goID != "" {
			return gnu, goID
		}
	}
	// Section headers may be stripped (sstrip) or lie; the loader's view still has the notes.
	for _, p := range ef.Progs {
		if p == nil || p.Type != elf.PT_NOTE || p.Filesz > maxNoteData {
			continue
		}
		if data, err := f.ProgData(p); err == nil {
			visit(data, p.Align)
		}
	}
	return gnu, goID
}

// forEachNote walks ELF notes: namesz, descsz, type (4 bytes each), then name and desc, each
// padded to the note alignment (4, or 8 for 8-aligned note sections such as
// .note.gnu.property). It stops at the first malformed note.
func forEachNote(data []byte, bo binary.ByteOrder, align uint64, fn func(name string, typ uint32, desc []byte)) {
	a := uint64(4)
	if align == 8 {
		a = 8
	}
	pad := func(n uint64) uint64 { return (n + a - 1) &^ (a - 1) }
	for len(data) >= 12 {
		namesz := uint64(bo.Uint32(data[0:]))
		descsz := uint64(bo.Uint32(data[4:]))
		typ := bo.Uint32(data[8:])
		rest := uint64(len(data) - 12)
		if namesz > rest || pad(namesz) > rest || descsz > rest-pad(namesz) {
			return
		}
		name := data[12 : 12+namesz]
		desc := data[12+pad(namesz) : 12+pad(namesz)+descsz]
		fn(string(bytes.TrimRight(name, "\x00")), typ, desc)
		next := 12 + pad(namesz) + pad(descsz)
		if next > uint64(len(data)) {
			return
		}
		data = data[next:]
	}
}
