package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestStringTableRoundTrip(t *testing.T) {
	ix := mustBuild(t, synthBuilder(7, 300))
	st := ix.Strings()
	if st != ix.Strings() {
		t.Fatal("Strings is not shared")
	}
	blob := ix.MarshalStrings()
	got, err := UnmarshalStrings(blob)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != st.Len() || got.Tag() != st.Tag() || len(got.Tag()) != 12 {
		t.Fatalf("round trip: %d strings tagged %q, want %d tagged %q", got.Len(), got.Tag(), st.Len(), st.Tag())
	}
	for id := range uint32(st.Len()) {
		if got.String(id) != ix.refString(id) {
			t.Fatalf("string %d: %q, want %q", id, got.String(id), ix.refString(id))
		}
	}
	// A reloaded index has the same table, so results cached as IDs by one replica read the
	// same on another.
	data, err := ix.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	re, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if re.Strings().Tag() != st.Tag() {
		t.Fatal("a reloaded index tags its strings differently")
	}
	other := mustBuild(t, synthBuilder(8, 301))
	if other.Strings().Tag() == st.Tag() {
		t.Fatal("two different tables share a tag")
	}
}

// TestLookupRefs: the frames of AppendLookupRefs, resolved, are those of AppendLookup, and
// equal IDs mean equal strings.
func TestLookupRefs(t *testing.T) {
	ix := mustBuild(t, synthBuilder(3, 400))
	st := ix.Strings()
	lo, hi := ix.iv[0].start(), ix.iv[len(ix.iv)-1].end()
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]uint32{}
	for range 5000 {
		addr := lo + r.Uint64N(hi-lo+64)
		refs := ix.AppendLookupRefs(nil, addr)
		frames := ix.AppendLookup(nil, addr)
		if len(refs) != len(frames) {
			t.Fatalf("%#x: %d refs, %d frames", addr, len(refs), len(frames))
		}
		for k, ref := range refs {
			if ix.Frame(ref) != frames[k] {
				t.Fatalf("%#x frame %d: %+v, want %+v", addr, k, ix.Frame(ref), frames[k])
			}
			for _, id := range []uint32{ref.Function, ref.LinkageName, ref.File, ref.StartFile} {
				s := st.String(id)
				if prev, ok := seen[s]; ok && prev != id {
					t.Fatalf("%q has IDs %d and %d", s, prev, id)
				}
				seen[s] = id
			}
		}
	}
}

func TestUnmarshalStringsRejects(t *testing.T) {
	good := mustBuild(t, synthBuilder(5, 50)).MarshalStrings()
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "shorter than the 24-byte header"},
		{"index magic", mod(func(b []byte) []byte { copy(b, magic[:]); return b }), "bad string table magic"},
		{"version", mod(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[8:], 9); return b }), "string table version 9"},
		{"flags", mod(func(b []byte) []byte { b[10] = 1; return b }), "unknown string table flags"},
		{"truncated", good[:len(good)-3], "payload length"},
		{"checksum", mod(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "checksum"},
		{"trailing bytes", reseal(append(bytes.Clone(good), 0)), "1 bytes after the string table"},
		{"string 0 not empty", reseal(mod(func(b []byte) []byte {
			// count, then the first length: make string 0 one byte long and the last one shorter.
			_, n := binary.Uvarint(b[headerSize:])
			b[headerSize+n] = 1
			return b
		})), "string"},
		{"invalid UTF-8", reseal(mod(func(b []byte) []byte { b[bytes.Index(b, []byte("/usr/src/"))] = 0xff; return b })), "not valid UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := UnmarshalStrings(c.data)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("%v wraps neither ErrCorrupt nor ErrVersion", err)
			}
		})
	}
}

func FuzzUnmarshalStrings(f *testing.F) {
	f.Add(mustBuild(f, synthBuilder(1, 20)).MarshalStrings())
	f.Add([]byte("PSYMSTR\x1a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fuzzer rarely finds a valid checksum: reseal so the payload checks are reached.
		if len(data) >= headerSize {
			data = reseal(bytes.Clone(data))
		}
		st, err := UnmarshalStrings(data)
		if err != nil {
			return
		}
		if st.Len() == 0 || st.String(0) != "" {
			t.Fatalf("accepted a table without the empty string 0: %d strings", st.Len())
		}
	})
}

// TestTagNamesTheFormatVersion: results a shared cache keeps by tag are those of one version of
// the index builder, whose answers change with the format version even where its strings do
// not, so one table's tag differs between versions.
func TestTagNamesTheFormatVersion(t *testing.T) {
	payload := appendStrings(nil, []string{"", "main", "main.go"}, nil)
	if a, b := tagOf(formatVersion, payload), tagOf(formatVersion-1, payload); a == b {
		t.Fatalf("tag %s is the same under format versions %d and %d", a, formatVersion, formatVersion-1)
	}
	if a, b := tagOf(formatVersion, payload), tagOf(formatVersion, payload); a != b {
		t.Fatalf("one table, two tags: %s and %s", a, b)
	}
}
