package dwarfsym

import (
	"encoding/binary"
	"testing"
)

// Malformed or foreign .debug_info is "not supplementary" or an error, never a panic; the
// positive case runs on dwz output in the debuginfo package's TestDWZSupplementary.
func TestOnlyPartialUnits(t *testing.T) {
	le := binary.LittleEndian
	// DWARF 5 unit headers: length, version 5, unit type, address size, abbrev offset;
	// the unit type alone decides.
	unit5 := func(ut byte) []byte { return []byte{8, 0, 0, 0, 5, 0, ut, 8, 0, 0, 0, 0} }
	for _, c := range []struct {
		name    string
		info    []byte
		want    bool
		wantErr bool
	}{
		{"empty", nil, false, false},
		{"truncated length", []byte{1, 2}, false, true},
		{"length past the end", []byte{0xf0, 0, 0, 0, 5, 0}, false, true},
		{"DWARF 5 partial units", append(unit5(utPartial), unit5(utPartial)...), true, false},
		{"DWARF 5 compile unit among partial ones", append(unit5(utPartial), unit5(0x01)...), false, false},
		{"DWARF 4 unit without abbreviations", []byte{7, 0, 0, 0, 4, 0, 0, 0, 0, 0, 8}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := OnlyPartialUnits(map[string][]byte{"info": c.info}, le)
			if got != c.want || (err != nil) != c.wantErr {
				t.Errorf("OnlyPartialUnits = %v, %v; want %v, error %v", got, err, c.want, c.wantErr)
			}
		})
	}
}
