package symbolizeapi

import (
	"debug/elf"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/frametable"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/resultcache"
)

// testIndex builds the index of a compiled program with inlined calls and returns addresses
// across its executable segment, some of them repeated and some resolving to nothing.
func testIndex(t *testing.T) (*index.Index, []resultcache.Key) {
	path := testsupport.CompileC(t, src, "-g", "-O2")
	ix, _, err := debuginfo.OpenIndex(path, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lo, hi uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			lo, hi = p.Vaddr, p.Vaddr+p.Filesz
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	var keys []resultcache.Key
	for i := 0; i < 500; i++ {
		keys = append(keys, resultcache.Key{BuildID: "b", Tag: "t", Addr: lo + r.Uint64N(hi-lo)})
	}
	keys = append(keys, resultcache.Key{BuildID: "b", Tag: "t", Addr: 1}) // before every segment
	return ix, keys
}

// TestCachedValuesAnswerLikeTheIndex checks that what a replica writes to the result cache
// gives another replica, reading it back, exactly the frames the index gives.
func TestCachedValuesAnswerLikeTheIndex(t *testing.T) {
	ix, keys := testIndex(t)
	direct := newTable(len(keys))
	vals := direct.lookup(ix, keys, nil, true)

	cached := newTable(len(keys))
	for j, v := range vals {
		if err := cached.addValue(j, v); err != nil {
			t.Fatalf("value %d: %v", j, err)
		}
	}
	// A replica with half the answers cached looks up the other half.
	mixed := newTable(len(keys))
	var odd []int
	for j, v := range vals {
		if j%2 == 0 {
			if err := mixed.addValue(j, v); err != nil {
				t.Fatalf("value %d: %v", j, err)
			}
		} else {
			odd = append(odd, j)
		}
	}
	mixed.lookup(ix, keys, odd, false)
	// Addresses in request order, with duplicates and one outside every segment.
	ok := make([]bool, 0, 2*len(keys))
	slot := make([]int, 0, 2*len(keys))
	for j := range keys {
		ok, slot = append(ok, true, j%7 != 0), append(slot, j, len(keys)-1-j)
	}
	a, b, c := &symbolizerv1.ModuleResult{}, &symbolizerv1.ModuleResult{}, &symbolizerv1.ModuleResult{}
	direct.emit(a, ok, slot)
	cached.emit(b, ok, slot)
	mixed.emit(c, ok, slot)
	da, err := frametable.Decode(a, len(ok))
	if err != nil {
		t.Fatal(err)
	}
	db, err := frametable.Decode(b, len(ok))
	if err != nil {
		t.Fatal(err)
	}
	dc, err := frametable.Decode(c, len(ok))
	if err != nil {
		t.Fatal(err)
	}
	resolved, inlined := 0, 0
	for i := range ok {
		want := ix.AppendLookup(nil, keys[slot[i]].Addr)
		if !ok[i] {
			want = nil
		}
		if len(da[i]) != len(want) || len(db[i]) != len(want) || len(dc[i]) != len(want) {
			t.Fatalf("address %d: %d, %d and %d frames, index has %d", i, len(da[i]), len(db[i]), len(dc[i]), len(want))
		}
		for k, w := range want {
			link := w.LinkageName
			if link == w.Function {
				link = ""
			}
			exp := frametable.Frame{Function: w.Function, LinkageName: link, File: w.File, Line: w.Line, Column: w.Column, StartLine: w.StartLine}
			if da[i][k] != exp || db[i][k] != exp || dc[i][k] != exp {
				t.Fatalf("address %d frame %d: %+v / %+v / %+v, want %+v", i, k, da[i][k], db[i][k], dc[i][k], exp)
			}
		}
		if len(want) > 0 {
			resolved++
		}
		if len(want) > 1 {
			inlined++
		}
	}
	if resolved == 0 || inlined == 0 || resolved == len(ok) {
		t.Fatalf("test data too thin: %d of %d resolved, %d with inlines", resolved, len(ok), inlined)
	}
	// Each distinct string travels once, however it was found.
	for _, r := range []*symbolizerv1.ModuleResult{a, b, c} {
		seen := map[string]bool{}
		for _, s := range r.Strings {
			if seen[s] {
				t.Fatalf("string %q twice in the table", s)
			}
			seen[s] = true
		}
	}
}

func frameBytes(fields ...[]byte) string {
	var frame []byte
	for _, f := range fields {
		frame = append(frame, f...)
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return string(protowire.AppendBytes(b, frame))
}

func strField(n protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, n, protowire.BytesType), s)
}

func uintField(n protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, n, protowire.VarintType), v)
}

func TestAddValueRejectsWhatThisServerDoesNotWrite(t *testing.T) {
	good := frameBytes(strField(1, "main"), strField(3, "a.c"), uintField(4, 7))
	for _, tc := range []struct {
		name, v, want string
	}{
		{"unknown top-level field", string(strField(2, "x")), "unexpected field 2"},
		{"truncated frame", good[:len(good)-2], "truncated frame"},
		{"string not UTF-8", frameBytes(strField(1, "ma\xffin")), "not UTF-8"},
		{"line over 32 bits", frameBytes(uintField(4, 1<<33)), "not a uint32"},
		{"string field as varint", frameBytes(uintField(1, 3)), "unexpected frame field 1 type 0"},
		{"unknown frame field", frameBytes(strField(9, "x")), "unexpected frame field 9"},
		{"bad tag", "\x0a\x01\x80", "bad tag"},
		{"second frame bad", good + frameBytes(uintField(5, 1<<40)), "not a uint32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(2)
			if err := tb.addValue(0, good); err != nil {
				t.Fatal(err)
			}
			err := tb.addValue(1, tc.v)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			// Nothing of the rejected value is kept.
			if tb.rows() != 1 || tb.keyLen[1] != 0 {
				t.Fatalf("%d rows after the rejected value", tb.rows())
			}
		})
	}
}

func TestInternChecksCachedStrings(t *testing.T) {
	tb := newTable(1)
	if _, ok := tb.intern("x\xfe", false); ok {
		t.Fatal("a cached invalid string was accepted")
	}
	i, ok := tb.intern("x", false)
	if j, _ := tb.intern("x", true); !ok || i != j || tb.strings[i] != "x" {
		t.Fatalf("one string interned as %d and %d", i, j)
	}
	if i, _ := tb.intern("", true); i != 0 {
		t.Fatalf("empty string at %d", i)
	}
}

func FuzzAddValue(f *testing.F) {
	f.Add(frameBytes(strField(1, "main"), strField(2, "_Z4mainv"), strField(3, "a.c"), uintField(4, 7), uintField(5, 2), uintField(6, 1)))
	f.Add(frameBytes(strField(1, "inner")) + frameBytes(strField(1, "outer"), uintField(4, 3)))
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		tb := newTable(1)
		if err := tb.addValue(0, v); err != nil {
			if tb.rows() != 0 {
				t.Fatal("rows kept from a rejected value")
			}
			return
		}
		res := &symbolizerv1.ModuleResult{}
		tb.emit(res, []bool{true}, []int{0})
		// Whatever was accepted must make a response that marshals and decodes.
		b, err := proto.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		var back symbolizerv1.ModuleResult
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if _, err := frametable.Decode(&back, 1); err != nil {
			t.Fatal(err)
		}
	})
}
