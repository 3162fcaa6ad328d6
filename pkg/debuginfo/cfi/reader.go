package cfi

import "encoding/binary"

// reader reads little-endian values from a bounded window of the section. A read past the
// window's end returns zero and sets bad instead of failing at each call, so that a sequence
// of reads is checked once; positions are offsets into the whole section, so that errors and
// pc-relative pointers use them directly.
type reader struct {
	data []byte // the whole section
	pos  int
	end  int // reads stop here (the end of the current entry)
	bad  bool
}

func (r *reader) u8() uint8 {
	if r.pos >= r.end {
		r.bad = true
		return 0
	}
	v := r.data[r.pos]
	r.pos++
	return v
}

func (r *reader) u16() uint16 {
	if r.end-r.pos < 2 {
		r.bad, r.pos = true, r.end
		return 0
	}
	v := binary.LittleEndian.Uint16(r.data[r.pos:])
	r.pos += 2
	return v
}

func (r *reader) u32() uint32 {
	if r.end-r.pos < 4 {
		r.bad, r.pos = true, r.end
		return 0
	}
	v := binary.LittleEndian.Uint32(r.data[r.pos:])
	r.pos += 4
	return v
}

func (r *reader) u64() uint64 {
	if r.end-r.pos < 8 {
		r.bad, r.pos = true, r.end
		return 0
	}
	v := binary.LittleEndian.Uint64(r.data[r.pos:])
	r.pos += 8
	return v
}

// uleb reads an unsigned LEB128 number. Bits beyond the 64th are dropped: no valid
// value here needs them, and the bytes are still consumed so that the next field is found.
func (r *reader) uleb() uint64 {
	var v uint64
	var shift uint
	for {
		if r.pos >= r.end {
			r.bad = true
			return 0
		}
		b := r.data[r.pos]
		r.pos++
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		shift += 7
		if b < 0x80 {
			return v
		}
	}
}

// sleb reads a signed LEB128 number, truncated to 64 bits like uleb.
func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	for {
		if r.pos >= r.end {
			r.bad = true
			return 0
		}
		b := r.data[r.pos]
		r.pos++
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b < 0x80 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

// bytes returns the next n bytes, or nil and bad when fewer are left.
func (r *reader) bytes(n uint64) []byte {
	if n > uint64(r.end-r.pos) {
		r.bad, r.pos = true, r.end
		return nil
	}
	b := r.data[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b
}

// cstring returns the bytes up to a NUL and consumes the NUL.
func (r *reader) cstring() []byte {
	for i := r.pos; i < r.end; i++ {
		if r.data[i] == 0 {
			s := r.data[r.pos:i]
			r.pos = i + 1
			return s
		}
	}
	r.bad, r.pos = true, r.end
	return nil
}
