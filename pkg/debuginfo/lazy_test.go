package debuginfo_test

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// TestLazyLookupMatchesIndex: on a stripped Go binary the lazy pclntab reader answers every
// address exactly as the whole index does, and it is not offered for binaries with more sources.
func TestLazyLookupMatchesIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("corpus test: needs the corpus's Go programs")
	}
	build := ensureCorpus(t)
	stripped := filepath.Join(build, "bin", "go-stripped")
	b, err := debuginfo.Open(stripped, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lazy, ok := b.LazyLookup()
	if !ok {
		t.Fatal("no lazy lookup for a stripped Go binary")
	}
	ix, err := b.Index()
	if err != nil {
		t.Fatal(err)
	}
	// Every third byte of the text, in a scattered order so that functions are decoded out
	// of order, as the addresses of a profile come.
	lo, hi := textRange(t, stripped)
	n, frames := 0, 0
	for start := lo; start < lo+61; start++ {
		for a := start; a < hi; a += 61 * 3 {
			var got, want []index.Frame
			got, want = lazy.AppendLookup(got, a), ix.AppendLookup(want, a)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%#x: lazy %+v, index %+v", a, got, want)
			}
			n++
			frames += len(want)
		}
	}
	if frames == 0 {
		t.Fatal("no address resolved at all")
	}
	t.Logf("%d addresses, %d frames: the lazy reader agrees with the index", n, frames)

	unstripped, err := debuginfo.Open(filepath.Join(build, "bin", "go"), debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer unstripped.Close()
	if _, ok := unstripped.LazyLookup(); ok {
		t.Error("a Go binary with DWARF and a symbol table was offered the lazy pclntab reader")
	}
}

// textRange returns the address range of the .text section.
func textRange(t *testing.T, path string) (uint64, uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".text")
	if s == nil {
		t.Fatalf("%s: no .text", path)
	}
	return s.Addr, s.Addr + s.Size
}
