package elfx

import (
	"bytes"
	"debug/elf"
	"strings"
	"testing"
	"unsafe"
)

// Mapped sections are the bytes DWARFSectionsOf reads: the uncompressed ones mapped, the
// compressed ones read and decompressed as before.
func TestDWARFSectionsMapped(t *testing.T) {
	defer func(m uint64) { minMappedSection = m }(minMappedSection)
	minMappedSection = 0
	for name, path := range variants(t) {
		t.Run(name, func(t *testing.T) {
			f := openPath(t, path)
			want, err := f.DWARFSections()
			if err != nil {
				t.Fatal(err)
			}
			got, maps, err := f.mapDWARFSections(DWARFSectionNames)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Errorf("got %d sections, want %d", len(got), len(want))
			}
			for k, w := range want {
				if !bytes.Equal(got[k], w) {
					t.Errorf("section %s differs from the one read (%d vs %d bytes)", k, len(got[k]), len(w))
				}
			}
			// Exactly the sections stored as they are come from a mapping.
			for k, b := range got {
				s := f.Section(".debug_" + k)
				if s == nil {
					s = f.Section(".zdebug_" + k)
				}
				compressed := s.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(s.Name, ".zdebug_")
				if mapped := inMaps(b, maps); mapped == compressed {
					t.Errorf("section %s: mapped %v, compressed %v", s.Name, mapped, compressed)
				}
			}
			if name == "plain" && len(maps) != len(want) {
				t.Errorf("%d of %d uncompressed sections mapped", len(maps), len(want))
			}
			for _, m := range maps {
				if err := unmap(m); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// inMaps reports whether b lies in one of the mappings.
func inMaps(b []byte, maps [][]byte) bool {
	if len(b) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	for _, m := range maps {
		if lo := uintptr(unsafe.Pointer(&m[0])); p >= lo && p < lo+uintptr(len(m)) {
			return true
		}
	}
	return false
}

var sink byte
