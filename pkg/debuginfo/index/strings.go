package index

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
)

// StringTable is an index's strings without the rest of it: the names and paths that its
// lookups' string IDs (FrameRef) refer to, in 14% of the memory of a whole index of a large
// Go binary (11.7 MB of 83.8 MB for MinIO's 143 MiB; 9% for a 16 MB Go binary, a third for a
// small C binary, whose index is mostly names), and about a third of the index's bytes when
// serialized. A symbolizer that keeps results as string IDs in a shared cache needs only this
// to read them.
//
// Serialized (little endian):
//
//	magic       [8]byte  "PSYMSTR\x1a"
//	version     uint16   stringsVersion
//	flags       uint16   0
//	payloadLen  uint64
//	crc32c      uint32   Castagnoli CRC over the payload
//	payload     count, count lengths (uvarints), then the concatenated bytes
//
// The tag is the first 48 bits of the SHA-256 of the index format version and the payload, in
// hex: two tables with one tag hold the same strings under the same IDs, and belong to indexes
// built by builders that give the same answers (the format version changes with those
// answers). Results kept by tag in a shared cache are therefore never read by a symbolizer
// whose answers differ, even where the strings did not change.
type StringTable struct {
	strs  []string
	dm    *demangled // the strings shown demangled (see Builder.Demangled); shared with the index
	bytes int64

	tagOnce sync.Once
	tag     string // set at Unmarshal, else on first use: hashing takes 20 ms on a large table
}

// stringsVersion 2 adds the demangled-name marks (see appendStrings).
const stringsVersion = 2

var stringsMagic = [8]byte{'P', 'S', 'Y', 'M', 'S', 'T', 'R', 0x1a}

// Len is the number of strings; IDs run from 0 (always "") to Len()-1.
func (t *StringTable) Len() int { return len(t.strs) }

// String returns string id, which must be below Len. A function name kept mangled is
// demangled here (see Builder.Demangled). Safe for concurrent use.
func (t *StringTable) String(id uint32) string { return t.dm.get(t.strs, id) }

// Tag names the table's content.
func (t *StringTable) Tag() string {
	t.tagOnce.Do(func() {
		if t.tag == "" {
			t.tag = tagOf(formatVersion, appendStrings(nil, t.strs, t.dm))
		}
	})
	return t.tag
}

func tagOf(version uint16, payload []byte) string {
	h := sha256.New()
	h.Write([]byte{byte(version), byte(version >> 8)})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil)[:6])
}

// Bytes is the table's approximate memory.
func (t *StringTable) Bytes() int64 { return t.bytes }

// Strings returns ix's string table, built on first use and shared after.
func (ix *Index) Strings() *StringTable {
	build := func() *StringTable {
		n := int64(0)
		for i, s := range ix.strings {
			n += 16
			if !ix.dm.has(uint32(i)) {
				n += int64(len(s))
			}
		}
		return &StringTable{strs: ix.strings, dm: ix.dm, bytes: n}
	}
	if ix.str == nil { // an Index not made by Build or Unmarshal
		return build()
	}
	ix.str.once.Do(func() { ix.str.table = build() })
	return ix.str.table
}

func newStringTable(strs []string, dm *demangled, payload []byte) *StringTable {
	return &StringTable{strs: strs, dm: dm, tag: tagOf(formatVersion, payload), bytes: int64(len(payload)) + 16*int64(len(strs))}
}

// MarshalStrings serializes ix's string table alone.
func (ix *Index) MarshalStrings() []byte {
	n := 0
	for _, s := range ix.strings {
		n += len(s) + 2
	}
	buf := appendStrings(make([]byte, headerSize, headerSize+n+8), ix.strings, ix.dm)
	seal(buf, stringsMagic, stringsVersion)
	return buf
}

// UnmarshalStrings decodes a table written by MarshalStrings. Errors wrap ErrCorrupt, or
// ErrVersion for a version this build does not read. Every string is checked to be valid
// UTF-8, and string 0 to be empty.
func UnmarshalStrings(data []byte) (*StringTable, error) {
	payload, err := unseal(data, stringsMagic, stringsVersion, "string table")
	if err != nil {
		return nil, err
	}
	d := &decoder{b: payload}
	strs, dm, err := d.strings()
	if err != nil {
		return nil, err
	}
	if d.off != len(payload) {
		return nil, fmt.Errorf("%w: %d bytes after the string table", ErrCorrupt, len(payload)-d.off)
	}
	return newStringTable(strs, dm, payload), nil
}
