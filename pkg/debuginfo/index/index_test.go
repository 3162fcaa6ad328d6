package index

import (
	"math/rand/v2"
	"reflect"
	"testing"
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
	data, err := ix.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
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

// TestSearchHint checks the radix hint against a plain binary search on sorted tables with
// clustered values, duplicates and gaps, for probes below, inside and above the range.
func TestSearchHint(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 100000} {
		s := make([]uint64, n)
		v := uint64(0x400000)
		for i := range s {
			switch r.IntN(10) {
			case 0: // a gap, as between a binary's segments
				v += uint64(r.IntN(1 << 24))
			case 1: // a duplicate, as line rows at one address
			default:
				v += uint64(r.IntN(64))
			}
			s[i] = v
		}
		h := makeHint(s)
		probes := []uint64{0, 0x3fffff, v, v + 1, ^uint64(0)}
		for range 5000 {
			probes = append(probes, 0x400000+r.Uint64N(v-0x400000+2))
		}
		for _, i := range []int{0, n / 2, n - 1} {
			if i >= 0 && i < n {
				probes = append(probes, s[i], s[i]-1, s[i]+1)
			}
		}
		for _, p := range probes {
			if got, want := h.upperBound(s, p), upperBound(s, p); got != want {
				t.Fatalf("n=%d: upperBound(%#x) = %d, want %d", n, p, got, want)
			}
		}
	}
}
