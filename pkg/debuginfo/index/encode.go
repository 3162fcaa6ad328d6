package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"unicode/utf8"
)

// The serialized index, stored in object storage so that a restarted symbolizer loads it
// instead of parsing DWARF again:
//
//	header (24 bytes, little endian)
//	  magic         [8]byte  "PSYMIDX\x1a"
//	  version       uint16   formatVersion
//	  flags         uint16   0
//	  payloadLen    uint64
//	  crc32c        uint32   Castagnoli CRC over the payload
//	payload (uvarints unless noted; every table is stored column by column, which keeps
//	similar numbers together for the object store's compression)
//	  fidelity      byte
//	  strings       count, count lengths, then the concatenated bytes
//	  nodes         count, then columns name, linkage, startLine, parent (0 = none, else
//	                index - parent), callFile, callLine, callColumn, declFile,
//	                startAddress
//	  intervals     count, then columns start - previous end, end - start, node
//	  line rows     count, then columns address delta, file (0 = end of sequence, else
//	                string + 1), zigzag line delta, column
//	  outer names   count, then columns start delta, end - start, node
//
// Version 2 added the declFile and startAddress node columns and the outer names. Version 3
// guarantees that every string is valid UTF-8 (the Builder replaces invalid sequences; Unmarshal
// rejects a string that is not): earlier versions may hold raw symbol bytes, so they are not
// read, and the caller rebuilds them. Version 4 gives outermost nodes made from local ELF
// symbols their STT_FILE name in the callFile column (see Node.SymbolFile). Version 5 changes
// no column but what a Go binary's index holds: pclntab's file names take the spelling of its
// DWARF line table's (see gopclntab.Prepared.SpellFilesAs), and an inline chain no longer
// follows a parentPc into another inlined instance of the same function (an index of version 4
// spells one file two ways and can hold a frame that is not there), so older ones are rebuilt.
// Version 6, likewise: a Go binary's index holds the functions and inlined calls of its cgo C
// and C++ units, from DWARF (version 5 lacks those inlined frames), and no index takes a name
// from a symbol of a section that is not loaded (gcc's LTO markers in .debug_info, whose
// offsets fall on the code of a PIE). Version 7, likewise: a Go binary's functions carry the
// symbol file of their local ELF symbol (see Builder.SetSymbolFiles; version 6 answers no file
// where llvm-symbolizer answers go.go).
const (
	formatVersion = 7
	headerSize    = 24
)

var magic = [8]byte{'P', 'S', 'Y', 'M', 'I', 'D', 'X', 0x1a}

// ErrVersion is returned by Unmarshal for an index written in a format version this build does
// not read; the caller rebuilds the index from the binary instead.
var ErrVersion = errors.New("unsupported index format version")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MarshalBinary serializes the index in the current format version.
func (ix *Index) MarshalBinary() ([]byte, error) {
	blob := 0
	for _, s := range ix.strings {
		blob += len(s)
	}
	// A rough upper bound that avoids regrowing for typical indexes.
	est := headerSize + 1 + blob + 5*len(ix.strings) + 7*3*len(ix.nodes) + 3*4*len(ix.iv) + 4*3*len(ix.ln)
	buf := make([]byte, headerSize, est)
	buf = append(buf, byte(ix.fidelity))

	buf = appendStrings(buf, ix.strings)

	buf = binary.AppendUvarint(buf, uint64(len(ix.nodes)))
	col := func(f func(n *Node) uint64) {
		for i := range ix.nodes {
			buf = binary.AppendUvarint(buf, f(&ix.nodes[i]))
		}
	}
	col(func(n *Node) uint64 { return uint64(n.Name) })
	col(func(n *Node) uint64 { return uint64(n.LinkageName) })
	col(func(n *Node) uint64 { return uint64(n.StartLine) })
	for i, n := range ix.nodes {
		var d uint64
		if n.Parent != NoParent {
			d = uint64(i) - uint64(n.Parent)
		}
		buf = binary.AppendUvarint(buf, d)
	}
	col(func(n *Node) uint64 { return uint64(n.CallFile) })
	col(func(n *Node) uint64 { return uint64(n.CallLine) })
	col(func(n *Node) uint64 { return uint64(n.CallColumn) })
	col(func(n *Node) uint64 { return uint64(n.DeclFile) })
	col(func(n *Node) uint64 { return n.StartAddress })

	buf = binary.AppendUvarint(buf, uint64(len(ix.iv)))
	var prev uint64
	for i := range ix.iv {
		buf = binary.AppendUvarint(buf, ix.iv[i].start()-prev)
		prev = ix.iv[i].end()
	}
	for i := range ix.iv {
		buf = binary.AppendUvarint(buf, ix.iv[i].end()-ix.iv[i].start())
	}
	for i := range ix.iv {
		buf = binary.AppendUvarint(buf, uint64(ix.iv[i].node))
	}

	buf = binary.AppendUvarint(buf, uint64(len(ix.ln)))
	prev = 0
	for i := range ix.ln {
		a := ix.ln[i].addr()
		buf = binary.AppendUvarint(buf, a-prev)
		prev = a
	}
	for i := range ix.ln {
		if f := ix.ln[i].file; f == endFile {
			buf = binary.AppendUvarint(buf, 0)
		} else {
			buf = binary.AppendUvarint(buf, uint64(f)+1)
		}
	}
	var prevLine int64
	for i := range ix.ln {
		l := ix.ln[i].line
		buf = binary.AppendVarint(buf, int64(l)-prevLine)
		prevLine = int64(l)
	}
	for i := range ix.ln {
		buf = binary.AppendUvarint(buf, uint64(ix.ln[i].col))
	}

	buf = binary.AppendUvarint(buf, uint64(len(ix.on)))
	prev = 0
	for i := range ix.on {
		s := ix.on[i].start()
		buf = binary.AppendUvarint(buf, s-prev)
		prev = s
	}
	for i := range ix.on {
		buf = binary.AppendUvarint(buf, ix.on[i].end()-ix.on[i].start())
	}
	for i := range ix.on {
		buf = binary.AppendUvarint(buf, uint64(ix.on[i].node))
	}

	seal(buf, magic, formatVersion)
	return buf, nil
}

// seal fills the header that buf's first headerSize bytes hold for the payload after them:
// magic, version, no flags, payload length, CRC-32C. The index and the string table objects
// share this header, each with its own magic and version.
func seal(buf []byte, magic [8]byte, version uint16) {
	payload := buf[headerSize:]
	copy(buf[0:8], magic[:])
	binary.LittleEndian.PutUint16(buf[8:], version)
	binary.LittleEndian.PutUint16(buf[10:], 0)
	binary.LittleEndian.PutUint64(buf[12:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(buf[20:], crc32.Checksum(payload, castagnoli))
}

// unseal checks the header seal wrote, naming the object what in its errors, and returns the
// payload. Errors wrap ErrCorrupt, or ErrVersion for a version this build does not read.
func unseal(data []byte, magic [8]byte, version uint16, what string) ([]byte, error) {
	if len(data) < headerSize {
		return nil, fmt.Errorf("%w: %s of %d bytes, shorter than the %d-byte header", ErrCorrupt, what, len(data), headerSize)
	}
	if [8]byte(data[0:8]) != magic {
		return nil, fmt.Errorf("%w: bad %s magic %q", ErrCorrupt, what, data[0:8])
	}
	if v := binary.LittleEndian.Uint16(data[8:]); v != version {
		return nil, fmt.Errorf("%w: %s version %d, this build reads %d", ErrVersion, what, v, version)
	}
	if f := binary.LittleEndian.Uint16(data[10:]); f != 0 {
		return nil, fmt.Errorf("%w: unknown %s flags %#x", ErrCorrupt, what, f)
	}
	if n := binary.LittleEndian.Uint64(data[12:]); n != uint64(len(data)-headerSize) {
		return nil, fmt.Errorf("%w: %s payload length %d, have %d bytes", ErrCorrupt, what, n, len(data)-headerSize)
	}
	payload := data[headerSize:]
	if sum := crc32.Checksum(payload, castagnoli); sum != binary.LittleEndian.Uint32(data[20:]) {
		return nil, fmt.Errorf("%w: %s checksum %#08x, header says %#08x", ErrCorrupt, what, sum, binary.LittleEndian.Uint32(data[20:]))
	}
	return payload, nil
}

// decoder reads the payload; the first problem sticks and every later read returns zero.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format+" at payload offset %d", append([]any{ErrCorrupt}, append(args, d.off)...)...)
	}
	d.off = len(d.b)
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	// Most numbers of an index fit in one byte: deltas, lengths, columns, small IDs.
	if d.off < len(d.b) && d.b[d.off] < 0x80 {
		d.off++
		return uint64(d.b[d.off-1])
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.failf("bad uvarint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	if d.off < len(d.b) && d.b[d.off] < 0x80 {
		b := int64(d.b[d.off])
		d.off++
		return b>>1 ^ -(b & 1) // zigzag, as binary.Varint
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.failf("bad varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) u32(what string) uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.failf("%s %d exceeds 32 bits", what, v)
		return 0
	}
	return uint32(v)
}

// count reads a table length and checks that the rest of the payload can hold it when every
// element takes at least perElem bytes: this is what bounds allocations by the input length.
func (d *decoder) count(what string, perElem int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if rest := uint64(len(d.b) - d.off); n > rest/uint64(perElem) {
		d.failf("%s count %d exceeds the %d bytes left", what, n, rest)
		return 0
	}
	return int(n)
}

// Unmarshal decodes an index written by MarshalBinary. Errors wrap ErrCorrupt, or ErrVersion
// for a format this build does not read. Memory allocated is bounded by a small multiple of
// len(data), and every cross-reference is checked, so Lookup on the result cannot fail.
func Unmarshal(data []byte) (*Index, error) {
	payload, err := unseal(data, magic, formatVersion, "index")
	if err != nil {
		return nil, err
	}
	d := &decoder{b: payload}
	if len(payload) < 1 {
		return nil, fmt.Errorf("%w: empty payload", ErrCorrupt)
	}
	ix := &Index{fidelity: Fidelity(payload[0]), str: &lazyStrings{}}
	d.off = 1
	if ix.fidelity > FidelityFullInlines {
		return nil, fmt.Errorf("%w: unknown fidelity %d", ErrCorrupt, ix.fidelity)
	}

	if ix.strings, err = d.strings(); err != nil {
		return nil, err
	}
	ns := len(ix.strings)

	nn := d.count("node", 9)
	ix.nodes = make([]Node, nn)
	for i := range ix.nodes {
		ix.nodes[i].Name = d.u32("node name")
	}
	for i := range ix.nodes {
		ix.nodes[i].LinkageName = d.u32("node linkage name")
	}
	for i := range ix.nodes {
		ix.nodes[i].StartLine = d.u32("node start line")
	}
	for i := range ix.nodes {
		pd := d.uvarint()
		switch {
		case pd == 0:
			ix.nodes[i].Parent = NoParent
		case pd > uint64(i):
			d.failf("node %d: parent delta %d reaches before node 0", i, pd)
		default:
			ix.nodes[i].Parent = NodeID(uint64(i) - pd)
		}
	}
	for i := range ix.nodes {
		ix.nodes[i].CallFile = d.u32("node call file")
	}
	for i := range ix.nodes {
		ix.nodes[i].CallLine = d.u32("node call line")
	}
	for i := range ix.nodes {
		ix.nodes[i].CallColumn = d.u32("node call column")
	}
	for i := range ix.nodes {
		ix.nodes[i].DeclFile = d.u32("node declaration file")
	}
	for i := range ix.nodes {
		ix.nodes[i].StartAddress = d.uvarint()
	}

	ni := d.count("interval", 3)
	ix.iv = make([]ivRow, ni)
	// The start column holds distances from the previous interval's end and the end column
	// lengths; both become absolute once both columns are read.
	for i := range ix.iv {
		ix.iv[i].setStart(d.uvarint())
	}
	for i := range ix.iv {
		ix.iv[i].setEnd(d.uvarint())
	}
	var prev uint64
	for i := range ix.iv {
		r := &ix.iv[i]
		s := prev + r.start()
		e := s + r.end()
		if d.err != nil || s < prev || e < s {
			d.failf("interval %d overflows", i)
			break
		}
		r.setStart(s)
		r.setEnd(e)
		prev = e
	}
	for i := range ix.iv {
		ix.iv[i].node = NodeID(d.u32("interval node"))
	}

	nl := d.count("line row", 4)
	ix.ln = make([]lnRow, nl)
	prev = 0
	for i := range ix.ln {
		delta := d.uvarint()
		if prev+delta < prev {
			d.failf("line row %d address overflows", i)
		}
		prev += delta
		ix.ln[i].setAddr(prev)
	}
	for i := range ix.ln {
		f := d.uvarint()
		switch {
		case f == 0:
			ix.ln[i].file = endFile
		case f-1 >= uint64(ns):
			d.failf("line row %d: file %d out of range", i, f-1)
		default:
			ix.ln[i].file = uint32(f - 1)
		}
	}
	var line int64
	for i := range ix.ln {
		line += d.varint()
		if line < 0 || line > math.MaxUint32 {
			d.failf("line row %d: line %d out of range", i, line)
		}
		ix.ln[i].line = uint32(line)
	}
	for i := range ix.ln {
		ix.ln[i].col = d.u32("line column")
	}

	no := d.count("outer name", 3)
	ix.on = make([]ivRow, no)
	prev = 0
	for i := range ix.on {
		delta := d.uvarint()
		if prev+delta < prev {
			d.failf("outer name %d start overflows", i)
		}
		prev += delta
		ix.on[i].setStart(prev)
	}
	for i := range ix.on {
		r := &ix.on[i]
		l := d.uvarint()
		if r.start()+l < r.start() {
			d.failf("outer name %d end overflows", i)
		}
		r.setEnd(r.start() + l)
	}
	for i := range ix.on {
		ix.on[i].node = NodeID(d.u32("outer name node"))
	}
	if no == 0 {
		ix.on = nil
	}
	if d.err != nil {
		return nil, d.err
	}
	if d.off != len(d.b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b)-d.off)
	}
	if err := ix.validate(); err != nil {
		return nil, err
	}
	ix.prepare()
	return ix, nil
}

// appendStrings writes a string table: count, count lengths, then the concatenated bytes.
func appendStrings(buf []byte, strs []string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(strs)))
	for _, s := range strs {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
	}
	for _, s := range strs {
		buf = append(buf, s...)
	}
	return buf
}

// strings reads a string table written by appendStrings, checking that string 0 is empty and
// every string valid UTF-8. The strings share one allocation.
func (d *decoder) strings() ([]string, error) {
	ns := d.count("string", 1)
	if d.err == nil && ns == 0 {
		d.failf("no strings; string 0 must be the empty string")
	}
	lens := make([]uint64, ns)
	var blob uint64
	for i := range lens {
		lens[i] = d.uvarint()
		blob += lens[i]
		if lens[i] > uint64(len(d.b)) || blob > uint64(len(d.b)) {
			d.failf("string %d of %d bytes exceeds the payload", i, lens[i])
			break
		}
	}
	if d.err == nil && blob > uint64(len(d.b)-d.off) {
		d.failf("string bytes %d exceed the %d bytes left", blob, len(d.b)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	if ns > 0 && lens[0] != 0 {
		return nil, fmt.Errorf("%w: string 0 is not empty", ErrCorrupt)
	}
	all := string(d.b[d.off : d.off+int(blob)])
	d.off += int(blob)
	strs := make([]string, ns)
	var p uint64
	for i, l := range lens {
		strs[i] = all[p : p+l]
		p += l
		if !utf8.ValidString(strs[i]) {
			return nil, fmt.Errorf("%w: string %d is not valid UTF-8", ErrCorrupt, i)
		}
	}
	return strs, nil
}
