package symbolizecodec

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
)

// Codec implements connect.Codec, and the optional interfaces connect looks for.
type Codec struct{}

// Name is the codec name connect registers the binary protobuf codec under.
func (Codec) Name() string { return "proto" }

// IsBinary tells connect the output is binary (for GET requests it is base64-encoded).
func (Codec) IsBinary() bool { return true }

// Marshal encodes msg.
func (c Codec) Marshal(msg any) ([]byte, error) { return c.MarshalAppend(nil, msg) }

// MarshalAppend appends the encoding of msg to dst; connect passes a pooled buffer.
func (Codec) MarshalAppend(dst []byte, msg any) ([]byte, error) {
	if r, ok := msg.(*symbolizerv1.SymbolizeResponse); ok && handwritten(r) {
		return AppendSymbolizeResponse(dst, r)
	}
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", msg)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

// MarshalStable encodes msg deterministically (connect uses it for GET requests).
func (Codec) MarshalStable(msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", msg)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// Unmarshal decodes data into msg. Connect reuses data's buffer afterwards: nothing decoded
// may point into it.
func (Codec) Unmarshal(data []byte, msg any) error {
	if r, ok := msg.(*symbolizerv1.SymbolizeResponse); ok {
		return DecodeSymbolizeResponse(data, r)
	}
	m, ok := msg.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", msg)
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", msg, err)
	}
	return nil
}

// handwritten reports whether r holds only what the hand-written encoder writes.
func handwritten(r *symbolizerv1.SymbolizeResponse) bool {
	if len(r.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, m := range r.Modules {
		if m == nil || len(m.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
		if m.Frames != nil && len(m.Frames.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
		for _, c := range m.Companions {
			if c == nil {
				return false
			}
		}
	}
	return true
}

// Tags (field number and wire type) from proto/profsym/symbolizer/v1/symbolizer.proto.
const (
	wireVarint = 0 // wire type of enums
	wireBytes  = 2 // wire type of strings, messages and packed fields

	tagModules = 1<<3 | wireBytes // SymbolizeResponse.modules

	tagStatus          = 1<<3 | wireVarint // ModuleResult.status
	tagMessage         = 2<<3 | wireBytes
	tagFidelity        = 3<<3 | wireVarint
	tagResolvedID      = 4<<3 | wireBytes
	tagResolvedIDType  = 5<<3 | wireVarint
	tagFrameCounts     = 7<<3 | wireBytes
	tagFrames          = 8<<3 | wireBytes
	tagStrings         = 9<<3 | wireBytes
	tagCompanions      = 10<<3 | wireBytes  // rare (dwz, split DWARF): encoded by proto
	tagUploading       = 11<<3 | wireVarint // ModuleResult.upload_in_progress
	firstFrameTableTag = 1<<3 | wireBytes   // FrameTable's six packed columns are fields 1 to 6
)

// AppendSymbolizeResponse appends r in the protobuf wire format, as proto.Marshal would. It
// fails, as proto.Marshal does, on a string that is not valid UTF-8. r must have no unknown
// fields and no nil modules (Codec checks, and hands such a message to proto.Marshal).
func AppendSymbolizeResponse(b []byte, r *symbolizerv1.SymbolizeResponse) ([]byte, error) {
	sizes := make([]moduleSizes, len(r.Modules))
	n := 0
	for i, m := range r.Modules {
		sizes[i].measure(m)
		n += 1 + protowire.SizeVarint(uint64(sizes[i].total)) + sizes[i].total
	}
	// One allocation at most: the answer can be several MB.
	b = slices.Grow(b, n)
	for i, m := range r.Modules {
		b = append(b, tagModules)
		b = protowire.AppendVarint(b, uint64(sizes[i].total))
		var err error
		if b, err = appendModule(b, m, &sizes[i]); err != nil {
			return nil, fmt.Errorf("modules[%d]: %w", i, err)
		}
	}
	return b, nil
}

// moduleSizes holds the encoded sizes of a ModuleResult's packed columns and its whole.
type moduleSizes struct {
	counts int    // payload of frame_counts
	cols   [6]int // payloads of FrameTable's columns
	frames int    // payload of frames
	total  int
}

func (s *moduleSizes) measure(m *symbolizerv1.ModuleResult) {
	n := 0
	n += sizeEnum(int32(m.Status))
	n += sizeString(m.Message)
	n += sizeEnum(int32(m.Fidelity))
	n += sizeString(m.ResolvedBuildId)
	n += sizeEnum(int32(m.ResolvedBuildIdType))
	s.counts = sizeVarints(m.FrameCounts)
	n += sizePacked(s.counts)
	if ft := m.Frames; ft != nil {
		s.frames = 0
		for c, col := range columns(ft) {
			s.cols[c] = sizeVarints(col)
			s.frames += sizePacked(s.cols[c])
		}
		n += 1 + protowire.SizeVarint(uint64(s.frames)) + s.frames
	}
	for _, str := range m.Strings {
		n += 1 + protowire.SizeVarint(uint64(len(str))) + len(str)
	}
	for _, c := range m.Companions {
		sz := proto.Size(c)
		n += 1 + protowire.SizeVarint(uint64(sz)) + sz
	}
	if m.UploadInProgress {
		n += 2
	}
	s.total = n
}

func columns(ft *symbolizerv1.FrameTable) [6][]uint32 {
	return [6][]uint32{ft.FunctionNames, ft.LinkageNames, ft.Files, ft.Lines, ft.Columns, ft.StartLines}
}

func appendModule(b []byte, m *symbolizerv1.ModuleResult, s *moduleSizes) ([]byte, error) {
	b = appendEnum(b, tagStatus, int32(m.Status))
	var err error
	if b, err = appendString(b, tagMessage, m.Message, "message"); err != nil {
		return nil, err
	}
	b = appendEnum(b, tagFidelity, int32(m.Fidelity))
	if b, err = appendString(b, tagResolvedID, m.ResolvedBuildId, "resolved_build_id"); err != nil {
		return nil, err
	}
	b = appendEnum(b, tagResolvedIDType, int32(m.ResolvedBuildIdType))
	b = appendPacked(b, tagFrameCounts, m.FrameCounts, s.counts)
	if ft := m.Frames; ft != nil {
		b = append(b, tagFrames)
		b = protowire.AppendVarint(b, uint64(s.frames))
		for c, col := range columns(ft) {
			b = appendPacked(b, byte(firstFrameTableTag+c<<3), col, s.cols[c])
		}
	}
	// UTF-8 is checked on the copy, which is in cache, over runs of strings with their tags
	// and lengths: the byte before each string (the last of its length) and the one after it
	// (the next tag) are ASCII, so if a run is valid UTF-8, so is each of its strings. A
	// length over 127 bytes takes bytes above 0x7f, so such a string ends the run and is
	// checked on its own.
	run := len(b)
	for _, str := range m.Strings {
		long := len(str) >= 1<<7
		if long && !utf8.Valid(b[run:]) {
			return nil, invalidString(m.Strings)
		}
		b = append(b, tagStrings)
		b = protowire.AppendVarint(b, uint64(len(str)))
		b = append(b, str...)
		if long {
			if !utf8.Valid(b[len(b)-len(str):]) {
				return nil, invalidString(m.Strings)
			}
			run = len(b)
		}
	}
	if !utf8.Valid(b[run:]) {
		return nil, invalidString(m.Strings)
	}
	for i, c := range m.Companions {
		b = append(b, tagCompanions)
		b = protowire.AppendVarint(b, uint64(proto.Size(c)))
		var err error
		if b, err = (proto.MarshalOptions{}).MarshalAppend(b, c); err != nil {
			return nil, fmt.Errorf("companions[%d]: %w", i, err)
		}
	}
	if m.UploadInProgress {
		b = append(b, tagUploading, 1)
	}
	return b, nil
}

// sizeVarints is the total size of xs as varints.
func sizeVarints(xs []uint32) int {
	n := len(xs)
	for _, x := range xs {
		if x >= 1<<7 {
			n += (bits.Len32(x) - 1) / 7
		}
	}
	return n
}

// sizePacked is the size of a packed field whose payload is n bytes; an empty one is left
// out, as proto3 does.
func sizePacked(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

func sizeEnum(v int32) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(int64(v)))
}

func sizeString(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(len(s))) + len(s)
}

func appendEnum(b []byte, tag byte, v int32) []byte {
	if v == 0 {
		return b
	}
	// A negative enum value is sign-extended to ten bytes, as for int32.
	return protowire.AppendVarint(append(b, tag), uint64(int64(v)))
}

func appendString(b []byte, tag byte, s, field string) ([]byte, error) {
	if s == "" {
		return b, nil
	}
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("%s: not valid UTF-8", field)
	}
	b = protowire.AppendVarint(append(b, tag), uint64(len(s)))
	return append(b, s...), nil
}

// appendPacked appends xs as a packed field whose payload is n bytes (sizeVarints(xs)).
func appendPacked(b []byte, tag byte, xs []uint32, n int) []byte {
	if n == 0 {
		return b
	}
	b = protowire.AppendVarint(append(b, tag), uint64(n))
	b = slices.Grow(b, n)
	out := b[len(b) : len(b)+n]
	i := 0
	for _, x := range xs {
		for x >= 1<<7 {
			out[i] = byte(x) | 0x80
			x >>= 7
			i++
		}
		out[i] = byte(x)
		i++
	}
	return b[:len(b)+n]
}

// invalidString names the first string of strs that is not valid UTF-8.
func invalidString(strs []string) error {
	for i, str := range strs {
		if !utf8.ValidString(str) {
			return fmt.Errorf("strings[%d]: not valid UTF-8", i)
		}
	}
	return errors.New("strings: not valid UTF-8")
}
