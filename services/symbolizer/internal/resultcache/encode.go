package resultcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
)

// Values in Redis use a small encoding of their own rather than protobuf: decoding slices
// every string out of the one string Redis returned (no copies, no UTF-8 pass) and allocates
// the frames of a location together, which makes a batch of cache hits several times cheaper
// to decode.
//
//	version byte (1), uvarint frame count, then per frame: uvarint-length-prefixed
//	function, linkage name and file, then uvarint line, column and start line.
const encVersion = 1

// maxFrames bounds what a corrupt value can make the decoder allocate.
const maxFrames = 4096

func encode(dst []byte, loc *symbolizerv1.Location) []byte {
	dst = append(dst, encVersion)
	dst = binary.AppendUvarint(dst, uint64(len(loc.GetFrames())))
	for _, f := range loc.GetFrames() {
		for _, s := range []string{f.GetFunctionName(), f.GetLinkageName(), f.GetFile()} {
			dst = binary.AppendUvarint(dst, uint64(len(s)))
			dst = append(dst, s...)
		}
		dst = binary.AppendUvarint(dst, uint64(f.GetLine()))
		dst = binary.AppendUvarint(dst, uint64(f.GetColumn()))
		dst = binary.AppendUvarint(dst, uint64(f.GetStartLine()))
	}
	return dst
}

var errCorrupt = errors.New("corrupt cache value")

type decoder struct {
	s   string
	off int
	err error
}

func (d *decoder) uvarint() uint64 {
	var x uint64
	var shift uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		if d.off >= len(d.s) {
			d.err = errCorrupt
			return 0
		}
		b := d.s[d.off]
		d.off++
		if b < 0x80 {
			return x | uint64(b)<<shift
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	d.err = errCorrupt
	return 0
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.s)-d.off) {
		d.err = errCorrupt
		return ""
	}
	s := d.s[d.off : d.off+int(n)]
	d.off += int(n)
	// Protobuf strings must be UTF-8; a value that is not would fail the whole response.
	if !utf8.ValidString(s) {
		d.err = errCorrupt
	}
	return s
}

func (d *decoder) u32() uint32 {
	v := d.uvarint()
	if v > 1<<32-1 {
		d.err = errCorrupt
	}
	return uint32(v)
}

func decode(s string) (*symbolizerv1.Location, error) {
	if len(s) == 0 || s[0] != encVersion {
		return nil, fmt.Errorf("%w: unknown version", errCorrupt)
	}
	d := &decoder{s: s, off: 1}
	n := d.uvarint()
	// Every frame takes at least six bytes, which bounds n by the value's length too.
	if d.err != nil || n > maxFrames || n > uint64(len(s))/6 {
		return nil, fmt.Errorf("%w: frame count", errCorrupt)
	}
	loc := &symbolizerv1.Location{}
	if n == 0 {
		return loc, nil
	}
	frames := make([]symbolizerv1.Frame, n)
	loc.Frames = make([]*symbolizerv1.Frame, n)
	for i := range frames {
		f := &frames[i]
		f.FunctionName, f.LinkageName, f.File = d.str(), d.str(), d.str()
		f.Line, f.Column, f.StartLine = d.u32(), d.u32(), d.u32()
		loc.Frames[i] = f
	}
	if d.err != nil {
		return nil, d.err
	}
	if d.off != len(s) {
		return nil, fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(s)-d.off)
	}
	return loc, nil
}
