// Package minidebuginfo reads MiniDebugInfo: the .gnu_debugdata section that Fedora and
// other distributions add to stripped binaries, an xz-compressed ELF file that holds a
// .symtab of the functions missing from .dynsym.
package minidebuginfo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/ulikunitz/xz"

	"github.com/profsym/profsym/pkg/debuginfo/elfx"
)

// SectionName is the section that holds the compressed ELF file.
const SectionName = ".gnu_debugdata"

// MaxDictSize caps the LZMA2 dictionary a .gnu_debugdata stream may ask for. The xz decoder
// allocates the dictionary the stream header names before decoding anything, so the header
// is checked first; 64 MiB is the largest any xz preset uses.
const MaxDictSize = 64 << 20

// ErrCorrupt marks a .gnu_debugdata section that is not a well-formed xz stream.
var ErrCorrupt = errors.New("corrupt .gnu_debugdata")

// Extract decompresses the MiniDebugInfo of f and parses it as an ELF file with the limits
// lim (the decompressed size is capped by lim.MaxDecompressedSize; zero fields take their
// defaults). It returns nil, nil when
// f has no .gnu_debugdata section. The returned File lives in memory and needs no closing.
func Extract(f *elfx.File, lim elfx.Limits) (*elfx.File, error) {
	lim = lim.OrDefault()
	s := f.Section(SectionName)
	if s == nil {
		return nil, nil
	}
	comp, err := f.RawSectionData(s)
	if err != nil {
		return nil, fmt.Errorf("minidebuginfo: %w", err)
	}
	data, err := Decompress(comp, lim.MaxDecompressedSize)
	if err != nil {
		return nil, fmt.Errorf("minidebuginfo: %w", err)
	}
	inner, err := elfx.Open(bytes.NewReader(data), int64(len(data)), lim)
	if err != nil {
		return nil, fmt.Errorf("minidebuginfo: inner ELF: %w", err)
	}
	return inner, nil
}

// Decompress decodes one xz stream of at most maxSize decompressed bytes. The stream's index
// and block headers are validated first, so neither the declared sizes nor the dictionary
// can make the decoder allocate more than the limits allow.
func Decompress(comp []byte, maxSize int64) ([]byte, error) {
	total, stream, err := checkStream(comp)
	if err != nil {
		return nil, err
	}
	if total > uint64(maxSize) {
		return nil, fmt.Errorf("xz: decompressed size %d over the limit %d: %w", total, maxSize, elfx.ErrLimit)
	}
	r, err := xz.ReaderConfig{SingleStream: true}.NewReader(bytes.NewReader(stream))
	if err != nil {
		return nil, fmt.Errorf("xz: %w: %w", ErrCorrupt, err)
	}
	out := bytes.NewBuffer(make([]byte, 0, min(total, uint64(len(comp))*8+4096)))
	n, err := io.Copy(out, io.LimitReader(r, int64(total)+1))
	if err != nil {
		return nil, fmt.Errorf("xz: %w: %w", ErrCorrupt, err)
	}
	if uint64(n) != total {
		return nil, fmt.Errorf("xz: stream gave %d bytes, index says %d: %w", n, total, ErrCorrupt)
	}
	return out.Bytes(), nil
}

var (
	headerMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0}
	footerMagic = []byte{'Y', 'Z'}
)

const (
	filterLZMA2 = 0x21
	maxBlocks   = 1 << 16
)

// checkStream validates the xz container (stream header and footer, index, block headers)
// and returns the total uncompressed size the index declares and the stream without its
// trailing padding.
func checkStream(b []byte) (uint64, []byte, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("xz: %s: %w", fmt.Sprintf(format, a...), ErrCorrupt)
	}
	// Stream padding: zero bytes in multiples of four after the footer.
	for len(b) >= 4 && len(b)%4 == 0 && binary.LittleEndian.Uint32(b[len(b)-4:]) == 0 {
		b = b[:len(b)-4]
	}
	if len(b) < 24 || !bytes.Equal(b[:6], headerMagic) {
		return 0, nil, bad("no stream header")
	}
	if crc32.ChecksumIEEE(b[6:8]) != binary.LittleEndian.Uint32(b[8:12]) {
		return 0, nil, bad("stream header CRC")
	}
	flags := b[6:8]
	foot := b[len(b)-12:]
	if !bytes.Equal(foot[10:], footerMagic) || !bytes.Equal(foot[8:10], flags) {
		return 0, nil, bad("no matching stream footer at the end")
	}
	if crc32.ChecksumIEEE(foot[4:10]) != binary.LittleEndian.Uint32(foot[0:4]) {
		return 0, nil, bad("stream footer CRC")
	}
	checkSize := checkLen(flags[1] & 0x0f)
	if flags[0] != 0 || flags[1]&0xf0 != 0 || checkSize < 0 {
		return 0, nil, bad("stream flags %x", flags)
	}
	indexSize := (uint64(binary.LittleEndian.Uint32(foot[4:8])) + 1) * 4
	body := b[12 : len(b)-12]
	if indexSize > uint64(len(body)) {
		return 0, nil, bad("index size %d past the stream", indexSize)
	}
	index := body[uint64(len(body))-indexSize:]
	blocks := body[:uint64(len(body))-indexSize]
	if crc32.ChecksumIEEE(index[:len(index)-4]) != binary.LittleEndian.Uint32(index[len(index)-4:]) {
		return 0, nil, bad("index CRC")
	}
	if index[0] != 0 {
		return 0, nil, bad("index indicator %#x", index[0])
	}
	p := index[1 : len(index)-4]
	count, p, ok := uvarint(p)
	if !ok || count > maxBlocks {
		return 0, nil, bad("index record count")
	}
	var total, off uint64
	for i := uint64(0); i < count; i++ {
		var unpadded, size uint64
		if unpadded, p, ok = uvarint(p); !ok {
			return 0, nil, bad("index record %d", i)
		}
		if size, p, ok = uvarint(p); !ok {
			return 0, nil, bad("index record %d", i)
		}
		if total+size < total {
			return 0, nil, bad("index sizes overflow")
		}
		total += size
		if off > uint64(len(blocks)) || unpadded > uint64(len(blocks))-off || unpadded < 5+uint64(checkSize) {
			return 0, nil, bad("block %d: size %d outside the stream", i, unpadded)
		}
		if err := checkBlockHeader(blocks[off:off+unpadded], i); err != nil {
			return 0, nil, err
		}
		off += (unpadded + 3) &^ 3
	}
	if off != uint64(len(blocks)) {
		return 0, nil, bad("blocks cover %d of %d bytes", off, len(blocks))
	}
	return total, b, nil
}

// checkBlockHeader validates one block header and the LZMA2 dictionary size it asks for.
func checkBlockHeader(blk []byte, i uint64) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("xz: block %d: %s: %w", i, fmt.Sprintf(format, a...), ErrCorrupt)
	}
	if blk[0] == 0 {
		return bad("index indicator where a block header belongs")
	}
	hsize := (int(blk[0]) + 1) * 4
	if hsize > len(blk) {
		return bad("header size %d", hsize)
	}
	h := blk[:hsize]
	if crc32.ChecksumIEEE(h[:hsize-4]) != binary.LittleEndian.Uint32(h[hsize-4:]) {
		return bad("header CRC")
	}
	flags := h[1]
	nfilters := int(flags&3) + 1
	p := h[2 : hsize-4]
	var ok bool
	if flags&0x40 != 0 {
		if _, p, ok = uvarint(p); !ok {
			return bad("compressed size")
		}
	}
	if flags&0x80 != 0 {
		if _, p, ok = uvarint(p); !ok {
			return bad("uncompressed size")
		}
	}
	for j := 0; j < nfilters; j++ {
		var id, psize uint64
		if id, p, ok = uvarint(p); !ok {
			return bad("filter %d id", j)
		}
		if psize, p, ok = uvarint(p); !ok || psize > uint64(len(p)) {
			return bad("filter %d properties", j)
		}
		props := p[:psize]
		p = p[psize:]
		if id != filterLZMA2 {
			continue
		}
		if len(props) != 1 || props[0] > 40 {
			return bad("LZMA2 properties %x", props)
		}
		if d := dictSize(props[0]); d > MaxDictSize {
			return bad("LZMA2 dictionary of %d bytes over the cap %d", d, MaxDictSize)
		}
	}
	return nil
}

// dictSize decodes the LZMA2 dictionary-size byte (0..40).
func dictSize(c byte) uint64 {
	if c == 40 {
		return 1<<32 - 1
	}
	return uint64(2|c&1) << (c/2 + 11)
}

// checkLen is the size of the integrity check for an xz check ID, -1 for reserved IDs.
func checkLen(id byte) int {
	switch {
	case id == 0:
		return 0
	case id <= 3:
		return 4
	case id <= 6:
		return 8
	case id <= 9:
		return 16
	case id <= 12:
		return 32
	case id <= 15:
		return 64
	}
	return -1
}

// uvarint decodes an xz multibyte integer (at most 9 bytes, little-endian base 128).
func uvarint(b []byte) (uint64, []byte, bool) {
	var v uint64
	for i := 0; i < 9 && i < len(b); i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if i > 0 && b[i] == 0 {
				return 0, nil, false
			}
			return v, b[i+1:], true
		}
	}
	return 0, nil, false
}
