package index

import (
	"fmt"
	"reflect"
	"testing"
)

// TestTouch: Touch and TouchStrings read the tables of an index with a hint at any address
// (below, inside, between and above every table, at each row's edges) without faulting, and
// lookups answer the same after them.
func TestTouch(t *testing.T) {
	b := NewBuilder()
	file := b.String("f.c")
	var addrs []uint64
	for i := uint64(0); i < 500; i++ {
		lo := 0x10000 + i*0x40
		outer := b.AddNode(Node{Name: b.String(fmt.Sprintf("fn%d", i)), Parent: NoParent, StartAddress: lo})
		if i%2 == 0 {
			inl := b.AddNode(Node{Name: b.String(fmt.Sprintf("inl%d", i)), Parent: outer, CallFile: file, CallLine: 3})
			b.AddRange(lo+8, lo+16, inl)
		}
		b.AddRange(lo, lo+0x30, outer) // a gap of 0x10 after each function
		if i%3 == 0 {
			// Outer names for some functions, as a symbol table gives them.
			sym := b.AddNode(Node{Name: b.String(fmt.Sprintf("sym%d", i)), Parent: NoParent, StartAddress: lo})
			b.AddOuterName(lo, lo+0x30, sym)
		}
		b.AddLine(lo, file, uint32(i), 1)
		b.AddLine(lo+8, file, uint32(i)+1, 2)
		b.EndSequence(lo + 0x30)
		addrs = append(addrs, lo-1, lo, lo+7, lo+8, lo+15, lo+16, lo+0x2f, lo+0x30)
	}
	ix, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if ix.hint.first == nil || ix.hint.stride <= tabOuter {
		t.Fatal("no hint with outer names: the test needs an index that has one")
	}
	addrs = append(addrs, 0, 1, 0xffff, 0x10000+500*0x40, 1<<40, ^uint64(0))
	want := make([][]Frame, len(addrs))
	for i, a := range addrs {
		want[i] = ix.Lookup(a)
	}
	ix.Touch(addrs)
	var refs []FrameRef
	for _, a := range addrs {
		refs = ix.AppendLookupRefs(refs, a)
	}
	ix.TouchStrings(refs)
	inlined := 0
	for i, a := range addrs {
		got := ix.Lookup(a)
		if !reflect.DeepEqual(got, want[i]) {
			t.Fatalf("%#x after Touch: %+v, want %+v", a, got, want[i])
		}
		if len(got) > 1 {
			inlined++
		}
	}
	if inlined == 0 {
		t.Fatal("no inlined frames among the addresses")
	}
}
