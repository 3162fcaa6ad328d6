package debuginfo_test

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/testsupport"
)

// fuzzProgramC has inlined calls, a static function and a cold part, so that DWARF, the
// symbol table, outer names and symbol files all take part.
const fuzzProgramC = `#include <stdio.h>
#include <stdlib.h>
static inline int sq(int x) { return x * x; }
static int helper(int x) { return sq(x) + 1; }
__attribute__((noinline, cold)) void fail(const char *m) { fprintf(stderr, "%s\n", m); exit(2); }
int main(int argc, char **argv) {
	(void)argv;
	if (argc > 5) fail("too many");
	printf("%d\n", helper(argc));
	return 0;
}
`

// FuzzIndex holds the whole engine, from a binary's bytes to its answers, to what every decoder
// is held to: hostile input gives an error or an index, never a panic, a hang or a runaway
// allocation; and an index answers the same after a round trip through its encoding, as the
// cache and the symbolizer's store keep it.
func FuzzIndex(f *testing.F) {
	for _, args := range [][]string{{"-g", "-O2"}, {"-gdwarf-4", "-O2", "-no-pie"}, {"-O2", "-s"}} {
		f.Add(readFile(f, testsupport.CompileC(f, fuzzProgramC, args...)))
	}
	// A relocatable object shaped like a kernel module: the module layout and the relocation
	// of its DWARF sections (elfx) take part.
	f.Add(readFile(f, elfxtest.Host.CC(f, f.TempDir(), "mod.o", elfxtest.KernelModule, "-c", "-g", "-O2")))
	// Go binaries are left to gopclntab's own fuzzing: the smallest is 1.5 MB, and the
	// fuzzer, which minimizes every input it finds interesting, spends minutes on each.
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "bin")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		lim := elfx.Limits{MaxSections: 1000, MaxSectionSize: 8 << 20, MaxDecompressedSize: 16 << 20}
		b, err := debuginfo.Open(path, debuginfo.Options{NoSearch: true, Limits: lim})
		if err != nil {
			return
		}
		defer b.Close()
		ix, err := b.Index()
		if err != nil {
			return
		}
		addrs := fuzzAddrs(b)
		blob, err := ix.MarshalBinary()
		if err != nil {
			t.Fatalf("an index that built does not encode: %v", err)
		}
		back, err := index.Unmarshal(blob)
		if err != nil {
			t.Fatalf("an index's own encoding does not decode: %v", err)
		}
		for _, a := range addrs {
			if got, want := back.Lookup(a), ix.Lookup(a); !slices.Equal(got, want) {
				t.Fatalf("%#x after a round trip: %v, want %v", a, got, want)
			}
		}
		if lazy, ok := b.LazyLookup(); ok {
			for _, a := range addrs {
				lazy.AppendLookup(nil, a)
			}
		}
	})
}

// fuzzAddrs are addresses worth asking about: the ends of each segment and points inside,
// and the entries and middles of the functions of the symbol table.
func fuzzAddrs(b *debuginfo.Binary) []uint64 {
	f, err := os.Open(b.Path())
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	ef, err := elfx.Open(f, st.Size(), elfx.Limits{MaxSections: 1000})
	if err != nil {
		return nil
	}
	var out []uint64
	for _, p := range ef.ELF().Progs {
		for k := uint64(0); k <= 16; k++ {
			out = append(out, p.Vaddr+p.Memsz/16*k)
		}
		if len(out) > 256 {
			break
		}
	}
	syms, _ := ef.Symbols()
	for _, s := range syms {
		if len(out) > 512 {
			break
		}
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			out = append(out, s.Value, s.Value+s.Size/2)
		}
	}
	return out
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(b)
}
