package index

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLookupNestedInlines(t *testing.T) {
	b := NewBuilder()
	s := b.String
	mainN := b.AddNode(Node{Name: s("main"), StartLine: 10, Parent: NoParent})
	inl := b.AddNode(Node{Name: s("helper"), StartLine: 3, Parent: mainN, CallFile: s("main.c"), CallLine: 12, CallColumn: 5})
	inner := b.AddNode(Node{Name: s("leaf"), StartLine: 1, Parent: inl, CallFile: s("h.h"), CallLine: 4, CallColumn: 9})
	sym := b.AddNode(Node{Name: s("other"), LinkageName: s("_Z5otherv"), Parent: NoParent})
	b.AddRange(0x1000, 0x1100, mainN)
	b.AddRange(0x1010, 0x1040, inl)
	b.AddRange(0x1020, 0x1030, inner)
	b.AddSymbolRange(0x1000, 0x1200, sym) // only fills 0x1100..0x1200
	b.AddLine(0x1000, s("main.c"), 11, 0)
	b.AddLine(0x1020, s("leaf.h"), 2, 7)
	b.AddLine(0x1030, s("h.h"), 5, 1)
	b.EndSequence(0x1100)
	ix, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr uint64
		want []Frame
	}{
		{0x0fff, nil},
		{0x1000, []Frame{{Function: "main", File: "main.c", Line: 11, StartLine: 10}}},
		{0x1025, []Frame{
			{Function: "leaf", File: "leaf.h", Line: 2, Column: 7, StartLine: 1},
			{Function: "helper", File: "h.h", Line: 4, Column: 9, StartLine: 3},
			{Function: "main", File: "main.c", Line: 12, Column: 5, StartLine: 10},
		}},
		{0x1035, []Frame{
			{Function: "helper", File: "h.h", Line: 5, Column: 1, StartLine: 3},
			{Function: "main", File: "main.c", Line: 12, Column: 5, StartLine: 10},
		}},
		{0x1050, []Frame{{Function: "main", File: "h.h", Line: 5, Column: 1, StartLine: 10}}},
		{0x1150, []Frame{{Function: "other", LinkageName: "_Z5otherv"}}},
		{0x1200, nil},
	}
	for _, tt := range tests {
		if got := ix.Lookup(tt.addr); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Lookup(%#x) = %+v, want %+v", tt.addr, got, tt.want)
		}
	}
	if st := ix.Stats(); st.Intervals != 6 {
		t.Errorf("intervals = %d, want 6 (main, helper, leaf, helper, main, other)", st.Intervals)
	}
}

// TestOuterNames checks llvm-symbolizer's rule: the symbol covering an address names the
// outermost frame, inlined frames keep their debug names, and an address past the end of the
// nearest symbol below it keeps the debug name. The encoding must keep all of it.
func TestOuterNames(t *testing.T) {
	b := NewBuilder()
	s := b.String
	outer := b.AddNode(Node{Name: s("summarize<short int>"), StartLine: 7, DeclFile: s("a.cc"), StartAddress: 0x100, Parent: NoParent})
	inl := b.AddNode(Node{Name: s("add"), Parent: outer, CallFile: s("a.cc"), CallLine: 9})
	sym := b.AddNode(Node{Name: s("ns::(anonymous namespace)::summarize<short>(int)"), LinkageName: s("_ZN2ns12_GLOBAL__N_19summarizeIsEEvi"), StartAddress: 0x100, Parent: NoParent})
	cold := b.AddNode(Node{Name: s("ns::(anonymous namespace)::summarize<short>(int) (.cold)"), StartAddress: 0x300, Parent: NoParent})
	b.AddRange(0x100, 0x200, outer)
	b.AddRange(0x110, 0x120, inl)
	b.AddRange(0x300, 0x340, outer)
	b.AddOuterName(0x100, 0x1f0, sym)
	b.AddOuterName(0x300, 0x320, cold)
	b.AddLine(0x100, s("a.cc"), 8, 1)
	b.EndSequence(0x200)
	b.AddLine(0x300, s("a.cc"), 12, 3)
	b.EndSequence(0x340)
	ix, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	back, _ := roundTrip(t, ix)
	symName, coldName := "ns::(anonymous namespace)::summarize<short>(int)", "ns::(anonymous namespace)::summarize<short>(int) (.cold)"
	tests := []struct {
		addr uint64
		want []Frame
	}{
		{0x104, []Frame{{Function: symName, LinkageName: "_ZN2ns12_GLOBAL__N_19summarizeIsEEvi", File: "a.cc", Line: 8, Column: 1, StartLine: 7, StartFile: "a.cc", StartAddress: 0x100}}},
		{0x114, []Frame{
			{Function: "add", File: "a.cc", Line: 8, Column: 1},
			{Function: symName, LinkageName: "_ZN2ns12_GLOBAL__N_19summarizeIsEEvi", File: "a.cc", Line: 9, StartLine: 7, StartFile: "a.cc", StartAddress: 0x100},
		}},
		// Past the symbol's end: the debug name stands.
		{0x1f8, []Frame{{Function: "summarize<short int>", File: "a.cc", Line: 8, Column: 1, StartLine: 7, StartFile: "a.cc", StartAddress: 0x100}}},
		{0x304, []Frame{{Function: coldName, File: "a.cc", Line: 12, Column: 3, StartLine: 7, StartFile: "a.cc", StartAddress: 0x300}}},
	}
	for _, tt := range tests {
		for name, x := range map[string]*Index{"built": ix, "decoded": back} {
			if got := x.Lookup(tt.addr); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s: Lookup(%#x) = %+v, want %+v", name, tt.addr, got, tt.want)
			}
		}
	}
}

// TestSearchHint checks the hinted lookup against the plain one on tables with clustered
// values, duplicates, gaps and 64-bit extremes, for probes below, inside and above the range,
// with and without outer names (which add a column to the hint).
func TestSearchHint(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 20000} {
		for _, outer := range []bool{false, true} {
			for _, start := range []uint64{0, 0x400000, 1<<63 + 5} {
				for _, dense := range []bool{false, true} {
					keys := make([]uint64, n)
					v := start
					for i := range keys {
						if dense { // rows at a few addresses: a hint with shift 0
							if r.IntN(8) == 0 {
								v++
							}
							keys[i] = v
							continue
						}
						switch r.IntN(10) {
						case 0: // a gap, as between a binary's segments
							v += uint64(r.IntN(1 << 24))
						case 1: // a duplicate, as line rows at one address
						default:
							v += uint64(r.IntN(64))
						}
						keys[i] = v
					}
					ix := &Index{strings: []string{"", "f", "g"}, nodes: []Node{{Name: 1, Parent: NoParent}, {Name: 2, Parent: NoParent}}}
					for i, k := range keys {
						row := lnRow{file: 0, line: uint32(i + 1)}
						if i%5 == 4 {
							row.file = endFile
						}
						row.setAddr(k)
						ix.ln = append(ix.ln, row)
						// Intervals over every other distinct key, ending at the next key, leave gaps.
						if i%2 == 0 && i+1 < n && keys[i+1] > k && (len(ix.iv) == 0 || ix.iv[len(ix.iv)-1].end() <= k) {
							ix.iv = append(ix.iv, newIvRow(k, keys[i+1], 0))
						}
						if outer && i%3 == 0 && (len(ix.on) == 0 || ix.on[len(ix.on)-1].start() < k) {
							ix.on = append(ix.on, newIvRow(k, k+uint64(r.IntN(200))+1, 1))
						}
					}
					if err := ix.validate(); err != nil {
						t.Fatal(err)
					}
					ix.prepare()
					if n >= 64 && ix.hint.first == nil {
						t.Fatalf("n=%d: no hint", n)
					}
					probes := append(ix.edgeAddrs(), v+1)
					for range 5000 {
						probes = append(probes, start+r.Uint64N(v-start+2))
					}
					for _, p := range probes {
						if got, want := ix.Lookup(p), ix.referenceLookup(p); !reflect.DeepEqual(got, want) {
							t.Fatalf("n=%d outer=%v start=%#x dense=%v: Lookup(%#x) = %+v, reference %+v", n, outer, start, dense, p, got, want)
						}
					}
				}
			}
		}
	}
}

// TestLookupMatchesReference compares the hinted lookup with the plain one on synthetic indexes
// shaped like an optimized C++ binary, before and after an encoding round trip.
func TestLookupMatchesReference(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		ix := mustBuild(t, synthBuilder(seed, 600))
		back, _ := roundTrip(t, ix)
		lo, hi := ix.iv[0].start(), ix.iv[len(ix.iv)-1].end()
		r := rand.New(rand.NewPCG(seed, 9))
		probes := ix.edgeAddrs()
		for range 20000 {
			probes = append(probes, lo-0x100+r.Uint64N(hi-lo+0x200))
		}
		for _, p := range probes {
			want := ix.referenceLookup(p)
			for name, x := range map[string]*Index{"built": ix, "decoded": back} {
				if got := x.Lookup(p); !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d %s: Lookup(%#x) = %+v, reference %+v", seed, name, p, got, want)
				}
			}
		}
	}
}

// TestInvalidUTF8 checks that no string of an index is invalid UTF-8: names and paths in
// binaries are arbitrary bytes, and the symbolizer puts them into protobuf strings.
func TestInvalidUTF8(t *testing.T) {
	b := NewBuilder()
	bad := "caf\xe9::r\xc3sum\xff\xfe"
	n := b.AddNode(Node{Name: b.String(bad), LinkageName: b.String("_Z4caf\xe9v"), DeclFile: b.String("/src/\x80x.c"), Parent: NoParent})
	if again := b.String(bad); again != b.String("caf\uFFFD::r\uFFFDsum\uFFFD") {
		t.Errorf("a sanitized string and its original intern differently")
	}
	b.AddRange(0x10, 0x20, n)
	b.AddLine(0x10, b.String("\xf0\x9f\x98dir/\xed\xa0\x80.c"), 3, 1)
	b.EndSequence(0x20)
	ix := mustBuild(t, b)
	want := []Frame{{
		Function: "caf\uFFFD::r\uFFFDsum\uFFFD", LinkageName: "_Z4caf\uFFFDv", File: "\uFFFDdir/\uFFFD.c",
		Line: 3, Column: 1, StartFile: "/src/\uFFFDx.c",
	}}
	back, data := roundTrip(t, ix)
	for name, x := range map[string]*Index{"built": ix, "decoded": back} {
		got := x.Lookup(0x14)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Lookup = %+v, want %+v", name, got, want)
		}
		for _, s := range x.strings {
			if !utf8.ValidString(s) {
				t.Errorf("%s: string %q is not valid UTF-8", name, s)
			}
		}
	}

	// An encoding that holds an invalid string is rejected, not passed on.
	i := bytes.Index(data, []byte("/src/"))
	if i < 0 {
		t.Fatal("string bytes not found in the encoding")
	}
	data[i+5] = 0xff
	_, err := Unmarshal(reseal(data))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("Unmarshal of an invalid string: %v, want a UTF-8 error wrapping ErrCorrupt", err)
	}
}

// TestDropSameOuterNames: the outer-name rows Build drops rename nothing: at every address,
// lookups answer as they do with every row kept. Rows that repeat the function's own name,
// rows that rename it, rows that reach into the next function or past its end, symbol-only
// functions and gaps are all there; some rows must be dropped and some kept.
func TestDropSameOuterNames(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	b := NewBuilder()
	file := b.String("f.c")
	const fns, size = 300, 0x40
	for i := range uint64(fns) {
		lo := 0x10000 + i*size
		hi := lo + size - uint64(rng.IntN(16)) // gaps between some functions
		name, link := b.String(fmt.Sprintf("fn%d", i)), b.String(fmt.Sprintf("_Z3fn%dv", i))
		symFile := uint32(0)
		if i%5 == 0 {
			symFile = b.String(fmt.Sprintf("sym%d.c", i))
		}
		outer := b.AddNode(Node{Name: name, LinkageName: link, StartAddress: lo, Parent: NoParent, CallFile: symFile})
		if i%7 == 3 {
			b.AddSymbolRange(lo, hi, outer)
		} else {
			b.AddRange(lo, hi, outer)
		}
		if i%2 == 0 {
			inl := b.AddNode(Node{Name: b.String("inl"), Parent: outer, CallFile: file, CallLine: 3})
			b.AddRange(lo+8, lo+16, inl)
		}
		if i%3 != 2 {
			b.AddLine(lo, file, uint32(i), 1)
			b.EndSequence(lo + size/2)
		}
		// The outer name: the same function's (as a symbol table gives it), or another.
		same := Node{Name: name, LinkageName: link, StartAddress: lo, Parent: NoParent, CallFile: symFile}
		switch rng.IntN(5) {
		case 0:
			same.Name = b.String(fmt.Sprintf("renamed%d", i))
		case 1:
			same.StartAddress = lo - 1
		case 2:
			same.CallFile = b.String("other.c")
		}
		end := lo + uint64(rng.IntN(2*size)) + 1 // may reach into the next functions
		b.AddOuterName(lo+uint64(rng.IntN(4)), end, b.AddNode(same))
	}
	all := slices.Clone(b.outer)
	ix, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	ref := &Index{strings: ix.strings, nodes: ix.nodes, iv: ix.iv, ln: ix.ln, on: outerNames(all), fidelity: ix.fidelity}
	ref.prepare()
	if len(ix.on) == 0 || len(ix.on) >= len(ref.on) {
		t.Fatalf("%d outer-name rows kept of %d: the test wants some dropped and some kept", len(ix.on), len(ref.on))
	}
	for a := uint64(0x10000 - 1); a <= 0x10000+fns*size+2*size; a++ {
		if got, want := ix.Lookup(a), ref.Lookup(a); !reflect.DeepEqual(got, want) {
			t.Fatalf("%#x: %+v, with every outer name %+v", a, got, want)
		}
	}
}
