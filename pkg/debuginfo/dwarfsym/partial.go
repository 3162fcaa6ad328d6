package dwarfsym

import (
	"encoding/binary"
	"fmt"
)

// utPartial is DWARF 5's DW_UT_partial.
const utPartial = 0x03

// OnlyPartialUnits reports whether .debug_info (keys as in SectionNames) holds units and all
// of them are partial units: DWARF that other files import and that describes no compilation
// of its own, which is what the common file dwz -m writes holds. An error means the units
// could not be read.
func OnlyPartialUnits(secs map[string][]byte, order binary.ByteOrder) (bool, error) {
	units, err := scanUnits(secs["info"], order)
	if err != nil {
		return false, err
	}
	if len(units) == 0 {
		return false, nil
	}
	s := &dieSecs{info: secs["info"], abbrev: secs["abbrev"], str: secs["str"], lineStr: secs["line_str"],
		strOffsets: secs["str_offsets"], addr: secs["addr"], order: order}
	cache := map[uint64]*abbrevTable{}
	for _, h := range units {
		if h.version >= 5 {
			if h.unitType != utPartial {
				return false, nil
			}
			continue
		}
		u, err := s.openUnit(h, cache)
		if err != nil {
			return false, fmt.Errorf("unit at %#x: %w", h.off, err)
		}
		if u.tag != tagPartialUnit {
			return false, nil
		}
	}
	return true, nil
}
