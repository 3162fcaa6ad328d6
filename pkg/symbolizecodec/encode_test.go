package symbolizecodec

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
)

var _ connect.Codec = Codec{}

// randomResponse draws a response with every field shape the encoder handles: zero and
// non-zero scalars, negative and unknown enum values, varints of one to five bytes, empty and
// nil columns, a nil FrameTable, empty and multi-byte strings, companions.
func randomResponse(r *rand.Rand) *symbolizerv1.SymbolizeResponse {
	num := func() uint32 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return r.Uint32N(128)
		case 2:
			return r.Uint32N(1 << 21)
		default:
			return r.Uint32()
		}
	}
	col := func(n int) []uint32 {
		if n == 0 && r.IntN(2) == 0 {
			return nil
		}
		c := make([]uint32, n)
		for i := range c {
			c[i] = num()
		}
		return c
	}
	enum := func() int32 {
		return []int32{0, 1, 3, 127, 128, -1, math.MaxInt32, math.MinInt32}[r.IntN(8)]
	}
	str := func() string {
		return []string{"", "x", "main.(*T).Run", "/usr/src/ä/😀.c", strings.Repeat("n", 200)}[r.IntN(5)]
	}
	resp := &symbolizerv1.SymbolizeResponse{}
	for range r.IntN(4) {
		rows := r.IntN(50)
		m := &symbolizerv1.ModuleResult{
			Status:              symbolizerv1.ModuleStatus(enum()),
			Message:             str(),
			Fidelity:            symbolizerv1.Fidelity(enum()),
			ResolvedBuildId:     str(),
			ResolvedBuildIdType: debuginfov1.BuildIDType(enum()),
			FrameCounts:         col(r.IntN(40)),
			UploadInProgress:    r.IntN(3) == 0,
		}
		if r.IntN(4) > 0 {
			m.Frames = &symbolizerv1.FrameTable{FunctionNames: col(rows), LinkageNames: col(rows), Files: col(rows),
				Lines: col(rows), Columns: col(rows), StartLines: col(rows)}
		}
		for range r.IntN(6) {
			m.Strings = append(m.Strings, str())
		}
		// Companions are rare (dwz, split DWARF); an empty one encodes to zero bytes.
		for range max(0, r.IntN(5)-2) {
			m.Companions = append(m.Companions, &debuginfov1.Companion{Kind: debuginfov1.CompanionKind(enum()),
				Id: str(), State: debuginfov1.CompanionState(enum())})
		}
		resp.Modules = append(resp.Modules, m)
	}
	return resp
}

func TestSameBytesAsProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		resp := randomResponse(r)
		want, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("kept")
		got, err := Codec{}.MarshalAppend(bytes.Clone(prefix), resp)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("message %d: encodings differ\n got %x\nwant %x", i, got[len(prefix):], want)
		}
		back := &symbolizerv1.SymbolizeResponse{}
		if err := (Codec{}).Unmarshal(got[len(prefix):], back); err != nil || !proto.Equal(back, resp) {
			t.Fatalf("message %d: round trip: %v", i, err)
		}
	}
}

func TestInvalidUTF8(t *testing.T) {
	bad := "ok\xff"
	for _, tc := range []struct {
		name string
		m    *symbolizerv1.ModuleResult
		want string
	}{
		{"strings", &symbolizerv1.ModuleResult{Strings: []string{"", "f", bad}}, "modules[1]: strings[2]: not valid UTF-8"},
		// A length of two bytes makes the run of strings invalid by itself; the bad string
		// must still be the one named.
		{"strings after a long one", &symbolizerv1.ModuleResult{Strings: []string{"", strings.Repeat("n", 200), "ä", bad, "g"}}, "modules[1]: strings[3]: not valid UTF-8"},
		{"string split across a boundary", &symbolizerv1.ModuleResult{Strings: []string{"", "a\xc3", "\xa4b"}}, "modules[1]: strings[1]: not valid UTF-8"},
		{"message", &symbolizerv1.ModuleResult{Message: bad}, "modules[1]: message: not valid UTF-8"},
		{"build id", &symbolizerv1.ModuleResult{ResolvedBuildId: bad}, "modules[1]: resolved_build_id: not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &symbolizerv1.SymbolizeResponse{Modules: []*symbolizerv1.ModuleResult{{}, tc.m}}
			if _, err := proto.Marshal(resp); err == nil {
				t.Fatal("proto.Marshal accepts it: the encoders would disagree")
			}
			_, err := Codec{}.Marshal(resp)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// Messages the encoder was not written for go to proto.Marshal, and come out as it writes them.
func TestFallback(t *testing.T) {
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7)
	withUnknown := func(m proto.Message) proto.Message {
		m.ProtoReflect().SetUnknown(unknown)
		return m
	}
	for _, tc := range []struct {
		name string
		msg  proto.Message
	}{
		{"response unknown", withUnknown(&symbolizerv1.SymbolizeResponse{})},
		{"module unknown", &symbolizerv1.SymbolizeResponse{Modules: []*symbolizerv1.ModuleResult{withUnknown(&symbolizerv1.ModuleResult{Status: 1}).(*symbolizerv1.ModuleResult)}}},
		{"frames unknown", &symbolizerv1.SymbolizeResponse{Modules: []*symbolizerv1.ModuleResult{{Frames: withUnknown(&symbolizerv1.FrameTable{Lines: []uint32{1}}).(*symbolizerv1.FrameTable)}}}},
		{"nil module", &symbolizerv1.SymbolizeResponse{Modules: []*symbolizerv1.ModuleResult{nil, {Status: 2}}}},
		{"other message", &symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: "ab", Addresses: []uint64{1, 1 << 40}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Codec{}.Marshal(tc.msg)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("got %x, %v; want %x", got, err, want)
			}
		})
	}
	if _, err := (Codec{}).Marshal("not a message"); err == nil || !strings.Contains(err.Error(), "string is not a protobuf message") {
		t.Fatalf("non-message: %v", err)
	}
	if err := (Codec{}).Unmarshal([]byte{0xff}, &symbolizerv1.SymbolizeResponse{}); err == nil || !strings.Contains(err.Error(), "unmarshal into *symbolizerv1.SymbolizeResponse") {
		t.Fatalf("corrupt input: %v", err)
	}
}

// addRandomResponses seeds f with the encodings of 20 random responses.
func addRandomResponses(f *testing.F, r *rand.Rand) {
	for range 20 {
		b, err := proto.Marshal(randomResponse(r))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzMarshal: whatever protobuf decodes as a SymbolizeResponse, the codec encodes exactly as
// proto.Marshal does.
func FuzzMarshal(f *testing.F) {
	addRandomResponses(f, rand.New(rand.NewPCG(3, 4)))
	f.Fuzz(func(t *testing.T, data []byte) {
		resp := &symbolizerv1.SymbolizeResponse{}
		if proto.Unmarshal(data, resp) != nil {
			return
		}
		want, werr := proto.Marshal(resp)
		got, gerr := Codec{}.Marshal(resp)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("got %x, %v; want %x, %v", got, gerr, want, werr)
		}
		// The same message without what the decoder kept as unknown takes the hand-written path.
		resp.ProtoReflect().SetUnknown(nil)
		for _, m := range resp.Modules {
			m.ProtoReflect().SetUnknown(nil)
			if m.Frames != nil {
				m.Frames.ProtoReflect().SetUnknown(nil)
			}
		}
		want, werr = proto.Marshal(resp)
		got, gerr = AppendSymbolizeResponse(nil, resp)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("hand-written: got %x, %v; want %x, %v", got, gerr, want, werr)
		}
	})
}

// bigResponse is shaped like a 10,000-address answer: 12,000 frames, 11,000 strings.
func bigResponse() *symbolizerv1.SymbolizeResponse {
	r := rand.New(rand.NewPCG(5, 6))
	const rows, nstr = 12000, 11000
	m := &symbolizerv1.ModuleResult{Status: 1, Fidelity: 3, ResolvedBuildId: strings.Repeat("ab", 20), ResolvedBuildIdType: 1,
		FrameCounts: make([]uint32, 10000), Frames: &symbolizerv1.FrameTable{}}
	for i := range m.FrameCounts {
		m.FrameCounts[i] = 1 + r.Uint32N(2)
	}
	ft := m.Frames
	for range rows {
		ft.FunctionNames = append(ft.FunctionNames, r.Uint32N(nstr))
		ft.LinkageNames = append(ft.LinkageNames, 0)
		ft.Files = append(ft.Files, r.Uint32N(nstr))
		ft.Lines = append(ft.Lines, r.Uint32N(5000))
		ft.Columns = append(ft.Columns, r.Uint32N(80))
		ft.StartLines = append(ft.StartLines, r.Uint32N(5000))
	}
	m.Strings = append(m.Strings, "")
	for i := range nstr - 1 {
		// One name in ten is over 127 bytes, as long C++ and Go generic names are.
		parts := 2
		if i%10 == 0 {
			parts = 6
		}
		m.Strings = append(m.Strings, strings.Repeat("github.com/minio/minio/cmd.", parts)+string(rune('a'+i%26)))
	}
	return &symbolizerv1.SymbolizeResponse{Modules: []*symbolizerv1.ModuleResult{m}}
}

func BenchmarkMarshal(b *testing.B) {
	resp := bigResponse()
	buf := make([]byte, 0, 2<<20)
	b.Run("proto", func(b *testing.B) {
		for b.Loop() {
			out, err := proto.MarshalOptions{}.MarshalAppend(buf[:0], resp)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
		}
	})
	b.Run("codec", func(b *testing.B) {
		for b.Loop() {
			out, err := Codec{}.MarshalAppend(buf[:0], resp)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
		}
	})
}
