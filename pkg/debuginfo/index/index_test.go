package index

import (
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
