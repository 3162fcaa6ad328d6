package index

import (
	"fmt"
	"sync"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/demangle"
)

// TestDemangled: a name given by Builder.Demangled reads as demangle.Name of the linkage name
// everywhere (Lookup, Frame, the StringTable), before and after serialization, while the index
// stores the mangled bytes once.
func TestDemangled(t *testing.T) {
	b := NewBuilder()
	linkages := []string{
		"_ZN4core3fmt5write17h0123456789abcdefE",
		"_ZNSt6vectorIiSaIiEE9push_backERKi",
		"_ZN2ns3fooEv",
		"_RNvCs1234_7mycrate4main", // Rust v0
		"_Znotmangled",             // starts as a mangled name does, but is not one
		"plain_c_function",         // cannot be mangled: interned as it is
		"_Z4caf\xe9v",              // invalid UTF-8: demangled at once, then sanitized
		"_",
		"",
	}
	addr := uint64(0x1000)
	ids := map[string]uint32{}
	for _, l := range linkages {
		id := b.Demangled(l)
		if again := b.Demangled(l); again != id {
			t.Errorf("Demangled(%q) = %d, then %d", l, id, again)
		}
		ids[l] = id
		n := b.AddNode(Node{Name: id, LinkageName: b.String(l), Parent: NoParent})
		b.AddRange(addr, addr+0x10, n)
		addr += 0x10
	}
	if got, want := ids["plain_c_function"], b.String("plain_c_function"); got != want {
		t.Errorf("a plain name has its own ID %d, want the string's %d", got, want)
	}
	ix := mustBuild(t, b)
	if got := ix.dm.refs; len(got) != 5 {
		t.Errorf("%d names marked demangled, want 5 (the valid names starting with '_' and longer than 1): %v", len(got), got)
	}
	back, data := roundTrip(t, ix)
	if again, _ := back.MarshalBinary(); string(again) != string(data) {
		t.Errorf("the decoded index encodes differently")
	}
	strs, err := UnmarshalStrings(ix.MarshalStrings())
	if err != nil {
		t.Fatal(err)
	}
	if strs.Tag() != ix.Strings().Tag() || strs.Tag() != back.Strings().Tag() {
		t.Errorf("tags differ: built %s, decoded index %s, decoded table %s", ix.Strings().Tag(), back.Strings().Tag(), strs.Tag())
	}
	for name, x := range map[string]*Index{"built": ix, "decoded": back} {
		addr := uint64(0x1000)
		for _, l := range linkages {
			want := toValid(demangle.Name(l))
			fs := x.Lookup(addr + 4)
			if len(fs) != 1 || fs[0].Function != want || fs[0].LinkageName != toValid(l) {
				t.Errorf("%s: Lookup(%#x) = %+v, want function %q, linkage %q", name, addr+4, fs, want, toValid(l))
			}
			refs := x.AppendLookupRefs(nil, addr+4)
			if got := x.Strings().String(refs[0].Function); got != want {
				t.Errorf("%s: StringTable.String(%d) = %q, want %q", name, refs[0].Function, got, want)
			}
			if got := strs.String(refs[0].Function); got != want {
				t.Errorf("decoded string table: String(%d) = %q, want %q", refs[0].Function, got, want)
			}
			addr += 0x10
		}
	}
}

func toValid(s string) string {
	b := NewBuilder()
	return b.strList[b.String(s)]
}

// TestDemangledConcurrent reads many names from many goroutines through the cache of names
// demangled (run with -race): each read is the name demangled, first read or not.
func TestDemangledConcurrent(t *testing.T) {
	b := NewBuilder()
	const n = 3000
	for i := 0; i < n; i++ {
		l := fmt.Sprintf("_ZN2ns%d%s%dEv", len(fmt.Sprint("f", i)), "f", i)
		node := b.AddNode(Node{Name: b.Demangled(l), LinkageName: b.String(l), Parent: NoParent})
		b.AddRange(uint64(0x1000+16*i), uint64(0x1010+16*i), node)
	}
	ix := mustBuild(t, b)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 3*n; k++ {
				i := (k*7 + g*131) % n
				want := fmt.Sprintf("ns::f%d()", i)
				if fs := ix.Lookup(uint64(0x1004 + 16*i)); len(fs) != 1 || fs[0].Function != want {
					select {
					case errs <- fmt.Sprintf("Lookup of function %d = %+v, want %q", i, fs, want):
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
