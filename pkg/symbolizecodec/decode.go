package symbolizecodec

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
)

// DecodeSymbolizeResponse sets r to the message data encodes, as proto.Unmarshal does, and
// fails where it fails. data is not retained: all strings of r are copied into one
// allocation, which stays alive as long as any of them does. A caller that keeps a few
// strings of a large answer for a long time (in a cache, say) keeps that whole allocation.
//
// The hand-written path takes what proto.Marshal and AppendSymbolizeResponse write: packed
// columns, each column and frames at most once per module, no unknown fields. Anything else
// goes to proto.Unmarshal.
func DecodeSymbolizeResponse(data []byte, r *symbolizerv1.SymbolizeResponse) error {
	proto.Reset(r)
	if mods, ok := decode(data); ok {
		r.Modules = mods
		return nil
	}
	proto.Reset(r)
	if err := proto.Unmarshal(data, r); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", r, err)
	}
	return nil
}

// Tags the decoder reads that the encoder does not write as constants of its own.
const (
	tagFirstColumn = 1<<3 | wireBytes // FrameTable.function_names
	tagLastColumn  = 6<<3 | wireBytes // FrameTable.start_lines
)

// field is one field of a message: its tag byte, and either its varint value or its payload.
type field struct {
	tag     byte
	varint  uint64
	payload []byte
}

// next reads the field at the start of b. ok is false at the end of b, on malformed input,
// and on any tag that is not a single byte of wire type varint or bytes (a field number over
// 15, or a wire type this API never uses): the caller then leaves the message to
// proto.Unmarshal, which knows what to make of it.
func next(b []byte) (f field, rest []byte, ok bool) {
	if len(b) == 0 || b[0] >= 0x80 {
		return field{}, nil, false
	}
	f.tag = b[0]
	b = b[1:]
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return field{}, nil, false
	}
	b = b[n:]
	switch f.tag & 7 {
	case wireVarint:
		f.varint = v
	case wireBytes:
		if v > uint64(len(b)) {
			return field{}, nil, false
		}
		f.payload, b = b[:v], b[v:]
	default:
		return field{}, nil, false
	}
	return f, b, true
}

// decode is the hand-written path; ok is false when the message must go to proto.Unmarshal.
// A first pass checks the structure and the strings and measures them, so the second can
// size every allocation exactly.
func decode(data []byte) (mods []*symbolizerv1.ModuleResult, ok bool) {
	nmods, nstrs, strBytes := 0, 0, 0
	for b := data; len(b) > 0; nmods++ {
		var f field
		if f, b, ok = next(b); !ok || f.tag != tagModules {
			return nil, false
		}
		s, n, ok := measureModule(f.payload)
		if !ok {
			return nil, false
		}
		nstrs += s
		strBytes += n
	}
	if nmods == 0 {
		return nil, true
	}
	d := decoder{strs: make([]string, nstrs)}
	// Strings are written to the arena in order and never moved (it is grown once, to
	// size), so each may be taken as a substring of the arena's contents so far.
	d.arena.Grow(strBytes)
	mods = make([]*symbolizerv1.ModuleResult, nmods)
	for i, b := 0, data; len(b) > 0; i++ {
		f, rest, _ := next(b)
		b = rest
		if mods[i], ok = d.module(f.payload); !ok {
			return nil, false
		}
	}
	// One check of the whole arena, then one byte per string: the strings lie in the arena
	// one after the other, so when the arena is valid UTF-8, each of them is unless a
	// character straddles two of them; a string then starts with a continuation byte.
	all := d.arena.String()
	valid := utf8.ValidString(all)
	for _, m := range mods {
		for _, s := range m.Strings {
			if !valid || len(s) > 0 && s[0]&0xc0 == 0x80 {
				if !utf8.ValidString(s) {
					return nil, false
				}
			}
		}
	}
	return mods, true
}

// decoder holds the allocations that the modules of one answer share.
type decoder struct {
	arena strings.Builder
	strs  []string // the rest of one slice for every string of the answer
}

// measureModule checks the structure of a ModuleResult (the second pass checks UTF-8) and
// returns how many strings its strings field holds and their length in all.
func measureModule(b []byte) (nstrs, strBytes int, ok bool) {
	var seen uint32 // bit per tag of a field that may appear only once here
	for len(b) > 0 {
		var f field
		if f, b, ok = next(b); !ok {
			return 0, 0, false
		}
		switch f.tag {
		case tagStatus, tagFidelity, tagResolvedID, tagResolvedIDType, tagMessage, tagUploading:
			// Singular: proto.Unmarshal keeps the last, as the second pass does.
		case tagFrameCounts, tagFrames:
			if seen&(1<<(f.tag>>3)) != 0 {
				return 0, 0, false
			}
			seen |= 1 << (f.tag >> 3)
			if f.tag == tagFrames && !checkFrames(f.payload) {
				return 0, 0, false
			}
		case tagStrings:
			nstrs++
			strBytes += len(f.payload)
		case tagCompanions:
			// Read by proto.Unmarshal in the second pass.
		default:
			return 0, 0, false
		}
	}
	return nstrs, strBytes, true
}

// checkFrames checks that a FrameTable holds each of its six packed columns at most once
// and nothing else.
func checkFrames(b []byte) bool {
	var seen uint32
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok || f.tag < tagFirstColumn || f.tag > tagLastColumn || f.tag&7 != wireBytes || seen&(1<<(f.tag>>3)) != 0 {
			return false
		}
		seen |= 1 << (f.tag >> 3)
		b = rest
	}
	return true
}

// module reads a ModuleResult that measureModule accepted.
func (d *decoder) module(b []byte) (*symbolizerv1.ModuleResult, bool) {
	m := &symbolizerv1.ModuleResult{}
	n := 0 // strings read
	for len(b) > 0 {
		f, rest, _ := next(b)
		b = rest
		var ok bool
		switch f.tag {
		case tagStatus:
			m.Status = symbolizerv1.ModuleStatus(int32(f.varint))
		case tagFidelity:
			m.Fidelity = symbolizerv1.Fidelity(int32(f.varint))
		case tagResolvedIDType:
			m.ResolvedBuildIdType = debuginfov1.BuildIDType(int32(f.varint))
		case tagUploading:
			m.UploadInProgress = f.varint != 0
		case tagMessage, tagResolvedID:
			if !utf8.Valid(f.payload) {
				return nil, false
			}
			if f.tag == tagMessage {
				m.Message = string(f.payload)
			} else {
				m.ResolvedBuildId = string(f.payload)
			}
		case tagFrameCounts:
			if m.FrameCounts, ok = packed(f.payload); !ok {
				return nil, false
			}
		case tagFrames:
			if m.Frames, ok = frames(f.payload); !ok {
				return nil, false
			}
		case tagCompanions:
			c := &debuginfov1.Companion{}
			if err := proto.Unmarshal(f.payload, c); err != nil {
				return nil, false
			}
			m.Companions = append(m.Companions, c)
		case tagStrings:
			start := d.arena.Len()
			d.arena.Write(f.payload)
			d.strs[n] = d.arena.String()[start:]
			n++
		}
	}
	if n > 0 {
		m.Strings, d.strs = d.strs[:n:n], d.strs[n:]
	}
	return m, true
}

// frames reads a FrameTable that checkFrames accepted.
func frames(b []byte) (*symbolizerv1.FrameTable, bool) {
	ft := &symbolizerv1.FrameTable{}
	cols := [...]*[]uint32{&ft.FunctionNames, &ft.LinkageNames, &ft.Files, &ft.Lines, &ft.Columns, &ft.StartLines}
	for len(b) > 0 {
		f, rest, _ := next(b)
		b = rest
		var ok bool
		if *cols[f.tag>>3-1], ok = packed(f.payload); !ok {
			return nil, false
		}
	}
	return ft, true
}

// packed reads the payload of a packed uint32 column. Like proto.Unmarshal, it takes
// varints of up to ten bytes and keeps their low 32 bits.
func packed(b []byte) ([]uint32, bool) {
	if len(b) == 0 {
		return nil, true
	}
	if b[len(b)-1] >= 0x80 {
		return nil, false // the last varint does not end
	}
	// Every varint ends in the one byte of it below 0x80.
	n := 0
	i := 0
	for ; i+8 <= len(b); i += 8 {
		n += bits.OnesCount64(^binary.LittleEndian.Uint64(b[i:]) & 0x8080808080808080)
	}
	for ; i < len(b); i++ {
		if b[i] < 0x80 {
			n++
		}
	}
	out := make([]uint32, n)
	p := 0
	for j := range out {
		// Names, files and lines are almost all one or two bytes.
		if c := b[p]; c < 0x80 {
			out[j] = uint32(c)
			p++
		} else if d := b[p+1]; d < 0x80 {
			out[j] = uint32(c&0x7f) | uint32(d)<<7
			p += 2
		} else {
			v, k := protowire.ConsumeVarint(b[p:])
			if k < 0 {
				return nil, false
			}
			out[j] = uint32(v)
			p += k
		}
	}
	return out, true
}
