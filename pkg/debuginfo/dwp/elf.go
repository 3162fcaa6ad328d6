package dwp

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"math"
)

// A package is an ELF relocatable file of sections only, as dwp and llvm-dwp write it:
// readers find its sections by name and need no segments, symbols or relocations.

type elfHeader struct {
	class   elf.Class
	data    elf.Data
	osabi   elf.OSABI
	machine elf.Machine
	flags   uint32
}

type section struct {
	name    string
	data    []byte
	flags   elf.SectionFlag
	align   uint64
	entsize uint64
}

// writeELF writes an ELF file of h's class holding secs (and the section name table after
// them), and returns the bytes written.
func writeELF(w io.Writer, h elfHeader, order byteOrder, secs []section) (int64, error) {
	is64 := h.class == elf.ELFCLASS64
	if !is64 && h.class != elf.ELFCLASS32 {
		return 0, fmt.Errorf("ELF class %v", h.class)
	}
	ehSize, shSize := uint64(52), uint64(40)
	if is64 {
		ehSize, shSize = 64, 64
	}
	shstr := []byte{0}
	names := make([]uint32, len(secs)+1)
	for i, s := range secs {
		names[i] = uint32(len(shstr))
		shstr = append(append(shstr, s.name...), 0)
	}
	names[len(secs)] = uint32(len(shstr))
	shstr = append(append(shstr, ".shstrtab"...), 0)
	secs = append(secs, section{name: ".shstrtab", data: shstr})

	offs := make([]uint64, len(secs))
	at := ehSize
	for i, s := range secs {
		at = alignUp(at, max(s.align, 1))
		offs[i] = at
		at += uint64(len(s.data))
	}
	shoff := alignUp(at, 8)
	if !is64 && shoff+shSize*uint64(len(secs)+1) > math.MaxUint32 {
		return 0, fmt.Errorf("%d bytes: too large for a 32-bit ELF file", shoff)
	}

	bw := bufio.NewWriter(w)
	cw := &countWriter{w: bw}
	var b []byte
	b = append(b, 0x7f, 'E', 'L', 'F', byte(h.class), byte(h.data), byte(elf.EV_CURRENT), byte(h.osabi))
	b = append(b, make([]byte, 8)...)
	b = order.AppendUint16(b, uint16(elf.ET_REL))
	b = order.AppendUint16(b, uint16(h.machine))
	b = order.AppendUint32(b, uint32(elf.EV_CURRENT))
	b = appendWord(b, order, is64, 0) // entry
	b = appendWord(b, order, is64, 0) // program headers
	b = appendWord(b, order, is64, shoff)
	b = order.AppendUint32(b, h.flags)
	b = order.AppendUint16(b, uint16(ehSize))
	b = order.AppendUint16(b, 0) // program header size
	b = order.AppendUint16(b, 0) // program headers
	b = order.AppendUint16(b, uint16(shSize))
	b = order.AppendUint16(b, uint16(len(secs)+1))
	b = order.AppendUint16(b, uint16(len(secs))) // .shstrtab, the last
	cw.Write(b)
	for i, s := range secs {
		cw.pad(offs[i])
		cw.Write(s.data)
	}
	cw.pad(shoff)
	cw.Write(make([]byte, shSize)) // the null section
	for i, s := range secs {
		typ := elf.SHT_PROGBITS
		if s.name == ".shstrtab" {
			typ = elf.SHT_STRTAB
		}
		b = b[:0]
		b = order.AppendUint32(b, names[i])
		b = order.AppendUint32(b, uint32(typ))
		b = appendWord(b, order, is64, uint64(s.flags))
		b = appendWord(b, order, is64, 0) // address
		b = appendWord(b, order, is64, offs[i])
		b = appendWord(b, order, is64, uint64(len(s.data)))
		b = order.AppendUint32(b, 0) // link
		b = order.AppendUint32(b, 0) // info
		b = appendWord(b, order, is64, max(s.align, 1))
		b = appendWord(b, order, is64, s.entsize)
		cw.Write(b)
	}
	if cw.err != nil {
		return cw.n, cw.err
	}
	return cw.n, bw.Flush()
}

func appendWord(b []byte, order byteOrder, is64 bool, v uint64) []byte {
	if is64 {
		return order.AppendUint64(b, v)
	}
	return order.AppendUint32(b, uint32(v))
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) / a * a }

// countWriter counts what it writes and keeps the first error, so that the writing above
// reads straight and is checked once.
type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
}

// pad writes zeros up to offset at.
func (c *countWriter) pad(at uint64) {
	if n := int64(at) - c.n; n > 0 {
		c.Write(make([]byte, n))
	}
}

// shfExclude (SHF_EXCLUDE, a processor-specific flag that GNU and LLVM give every machine)
// marks sections a linker leaves out, as the .dwo sections of dwp's and llvm-dwp's packages are.
const shfExclude elf.SectionFlag = 0x80000000
