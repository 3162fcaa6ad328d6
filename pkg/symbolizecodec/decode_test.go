package symbolizecodec

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
)

// sameAsProto decodes data both ways and fails t unless both fail or both give equal
// messages. It reports whether the hand-written path took the message.
func sameAsProto(t *testing.T, data []byte) (handwritten bool) {
	t.Helper()
	want := &symbolizerv1.SymbolizeResponse{}
	werr := proto.Unmarshal(data, want)
	got := &symbolizerv1.SymbolizeResponse{Modules: []*symbolizerv1.ModuleResult{{Message: "left over"}}}
	gerr := Codec{}.Unmarshal(bytes.Clone(data), got)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("proto.Unmarshal: %v; codec: %v", werr, gerr)
	}
	if werr == nil && !proto.Equal(got, want) {
		t.Fatalf("decoded differently:\n got %v\nwant %v", got, want)
	}
	_, handwritten = decode(data)
	return handwritten
}

func TestDecodeSameAsProto(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 2000 {
		resp := randomResponse(r)
		data, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if !sameAsProto(t, data) {
			t.Fatalf("message %d: proto.Marshal's encoding went to proto.Unmarshal", i)
		}
	}
}

// The strings must survive the reuse of the input buffer, as connect reuses it.
func TestDecodeCopies(t *testing.T) {
	resp := bigResponse()
	data, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	got := &symbolizerv1.SymbolizeResponse{}
	if err := DecodeSymbolizeResponse(data, got); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 'X'
	}
	if !proto.Equal(got, resp) {
		t.Fatal("the decoded message changed with its input buffer")
	}
}

func TestDecodeShapes(t *testing.T) {
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	bytesField := func(b []byte, num protowire.Number, payload []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), payload)
	}
	varintField := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(b, num, protowire.VarintType), v)
	}
	packedCol := func(vs ...uint64) []byte {
		var p []byte
		for _, v := range vs {
			p = protowire.AppendVarint(p, v)
		}
		return p
	}
	response := func(modules ...[]byte) []byte {
		var b []byte
		for _, m := range modules {
			b = bytesField(b, 1, m)
		}
		return b
	}
	ok := bytesField(varintField(nil, 1, 1), 9, []byte("main"))
	for _, tc := range []struct {
		name        string
		data        []byte
		handwritten bool
		fails       bool
	}{
		{"empty", nil, true, false},
		{"empty module", response(nil), true, false},
		{"fields out of order", response(varintField(bytesField(bytesField(nil, 9, []byte("b")), 7, packedCol(1)), 1, 2)), true, false},
		{"scalar twice, last wins", response(varintField(varintField(nil, 1, 1), 1, 2)), true, false},
		{"enum out of int32 range", response(varintField(nil, 3, 1<<40|5)), true, false},
		{"ten-byte varint in a column", response(bytesField(nil, 7, packedCol(1<<63|1<<32|9))), true, false},
		{"empty frames", response(bytesField(nil, 8, nil)), true, false},
		{"every column", response(bytesField(nil, 8, bytesField(bytesField(bytesField(bytesField(bytesField(bytesField(nil,
			6, packedCol(6)), 5, packedCol(5)), 4, packedCol(4)), 3, packedCol(300)), 2, packedCol(2)), 1, packedCol(1<<20)))), true, false},
		{"unknown top-level field", append(response(ok), varintField(nil, 2, 1)...), false, false},
		{"unknown module field", response(varintField(ok, 20, 1)), false, false},
		{"unknown frames field", response(bytesField(nil, 8, varintField(nil, 7, 1))), false, false},
		{"unpacked frame_counts", response(varintField(varintField(nil, 7, 1), 7, 2)), false, false},
		{"frame_counts twice", response(bytesField(bytesField(nil, 7, packedCol(1)), 7, packedCol(2))), false, false},
		{"frames twice", response(bytesField(bytesField(nil, 8, bytesField(nil, 4, packedCol(1))), 8, bytesField(nil, 5, packedCol(2)))), false, false},
		{"column twice", response(bytesField(nil, 8, bytesField(bytesField(nil, 4, packedCol(1)), 4, packedCol(2)))), false, false},
		{"two-byte tag", response([]byte{0x88, 0x00, 0x01}), false, false},
		{"invalid UTF-8 string", response(bytesField(nil, 9, []byte("a\xff"))), false, true},
		{"invalid UTF-8 message", response(bytesField(nil, 2, []byte("\xc3"))), false, true},
		// Each string is invalid, though the two side by side are "aäb".
		{"a character split across two strings", response(bytesField(bytesField(nil, 9, []byte("a\xc3")), 9, []byte("\xa4b"))), false, true},
		{"split across two modules", response(bytesField(nil, 9, []byte("a\xc3")), bytesField(nil, 9, []byte("\xa4b"))), false, true},
		{"truncated module", response(ok)[:4], false, true},
		{"length past the end", []byte{0x0a, 0x05, 0x08}, false, true},
		{"column ends inside a varint", response(bytesField(nil, 7, []byte{0x01, 0x80})), false, true},
		{"eleven-byte varint", response(bytesField(nil, 7, append(bytes.Repeat([]byte{0x80}, 10), 0x01))), false, true},
		{"ten-byte varint overflowing", response(bytesField(nil, 7, append(bytes.Repeat([]byte{0xff}, 9), 0x02))), false, true},
		{"field number 0", response([]byte{0x00, 0x01}), false, true},
		{"group wire type", response([]byte{0x0b}), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameAsProto(t, tc.data); got != tc.handwritten {
				t.Errorf("hand-written path: %v, want %v", got, tc.handwritten)
			}
			err := Codec{}.Unmarshal(tc.data, &symbolizerv1.SymbolizeResponse{})
			if (err != nil) != tc.fails {
				t.Errorf("error %v, want failure %v", err, tc.fails)
			}
			if err != nil && !strings.Contains(err.Error(), "unmarshal into *symbolizerv1.SymbolizeResponse") {
				t.Errorf("error %q does not say what it was decoding", err)
			}
		})
	}
}

// FuzzUnmarshal: whatever the input, the codec and proto.Unmarshal agree on success and on the
// message.
func FuzzUnmarshal(f *testing.F) {
	addRandomResponses(f, rand.New(rand.NewPCG(9, 10)))
	// A character split across two strings: each is invalid, the two together are not.
	f.Add([]byte("\x0a\x08\x4a\x02a\xc3\x4a\x02\xa4b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sameAsProto(t, data)
	})
}

func BenchmarkUnmarshal(b *testing.B) {
	data, err := proto.Marshal(bigResponse())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.Run("proto", func(b *testing.B) {
		for b.Loop() {
			if err := proto.Unmarshal(data, &symbolizerv1.SymbolizeResponse{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("codec", func(b *testing.B) {
		for b.Loop() {
			if err := (Codec{}).Unmarshal(data, &symbolizerv1.SymbolizeResponse{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
