// Package addrmap turns the addresses that profilers report into ELF virtual addresses, with the
// one formula of the design ("Addresses"): file_offset = address - mapping.memory_start +
// mapping.file_offset, then elf_vaddr = file_offset - p_offset + p_vaddr of the PT_LOAD segment
// that holds the file offset. It is right both for runtime (process-space) addresses with their
// /proc/<pid>/maps mapping and for producers such as the OTel eBPF profiler whose addresses and
// mappings are already in ELF virtual-address space.
package addrmap

import (
	"debug/elf"
	"errors"
	"fmt"
)

// Load is one PT_LOAD program header.
type Load struct {
	Offset, Vaddr, Filesz, Memsz uint64
}

// Mapping is the part of an OTLP Mapping the formula needs: memory_start, memory_limit and
// file_offset. The all-zero Mapping means "the address already is an ELF virtual address".
type Mapping struct {
	Start, Limit, Offset uint64
}

// Sentinel errors, so callers can count why addresses failed to normalize (errors.Is).
var (
	// ErrOutsideMapping: the address is below Start or at/above Limit.
	ErrOutsideMapping = errors.New("address outside its mapping")
	// ErrNoSegment: the computed file offset lies in no PT_LOAD segment.
	ErrNoSegment = errors.New("file offset in no PT_LOAD segment")
	// ErrOverflow: the computed file offset does not fit in 64 bits.
	ErrOverflow = errors.New("file offset overflows")
)

// IsZero reports whether m is the all-zero mapping.
func (m Mapping) IsZero() bool { return m == Mapping{} }

// Normalize returns the ELF virtual address of addr, which was observed inside mapping m of a
// file whose PT_LOAD segments are loads.
//
// A Limit of 0 (with a non-zero Start or Offset) is taken as "limit unknown": some producers
// leave memory_limit unset, and the segment lookup still rejects addresses outside the file.
// A file offset inside a segment's file image wins over one that only falls into another
// segment's zero-filled tail (.bss, Memsz > Filesz).
func Normalize(addr uint64, m Mapping, loads []Load) (uint64, error) {
	if m.IsZero() {
		return addr, nil
	}
	if addr < m.Start || (m.Limit != 0 && addr >= m.Limit) {
		return 0, fmt.Errorf("address %#x, mapping [%#x, %#x): %w", addr, m.Start, m.Limit, ErrOutsideMapping)
	}
	rel := addr - m.Start
	fileOff := rel + m.Offset
	if fileOff < rel {
		return 0, fmt.Errorf("address %#x, mapping start %#x offset %#x: %w", addr, m.Start, m.Offset, ErrOverflow)
	}
	for _, l := range loads {
		if fileOff >= l.Offset && fileOff-l.Offset < l.Filesz {
			return fileOff - l.Offset + l.Vaddr, nil
		}
	}
	for _, l := range loads {
		if fileOff >= l.Offset && fileOff-l.Offset < l.Memsz {
			return fileOff - l.Offset + l.Vaddr, nil
		}
	}
	return 0, fmt.Errorf("address %#x, file offset %#x (%d PT_LOAD segments): %w", addr, fileOff, len(loads), ErrNoSegment)
}

// LoadsOf returns the PT_LOAD program headers of f, in file order.
func LoadsOf(f *elf.File) []Load {
	if f == nil {
		return nil
	}
	var out []Load
	for _, p := range f.Progs {
		if p == nil || p.Type != elf.PT_LOAD {
			continue
		}
		out = append(out, Load{Offset: p.Off, Vaddr: p.Vaddr, Filesz: p.Filesz, Memsz: p.Memsz})
	}
	return out
}
