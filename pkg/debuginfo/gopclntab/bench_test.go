package gopclntab

import (
	"debug/elf"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// BenchmarkLoad measures Load and Build on the large binary PROFSYM_GOPCLNTAB_LARGE_STRIPPED
// names (see TestLargeBinary).
func BenchmarkLoad(b *testing.B) {
	path := os.Getenv("PROFSYM_GOPCLNTAB_LARGE_STRIPPED")
	if path == "" {
		b.Skip("PROFSYM_GOPCLNTAB_LARGE_STRIPPED not set")
	}
	f, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.ReportAllocs()
	for b.Loop() {
		bl := index.NewBuilder()
		if _, err := Load(f, bl); err != nil {
			b.Fatal(err)
		}
		if _, err := bl.Build(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadOnly leaves Build out, to tell the two apart.
func BenchmarkLoadOnly(b *testing.B) {
	path := os.Getenv("PROFSYM_GOPCLNTAB_LARGE_STRIPPED")
	if path == "" {
		b.Skip("PROFSYM_GOPCLNTAB_LARGE_STRIPPED not set")
	}
	f, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(f, index.NewBuilder()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResolver measures what a command-line run on a stripped binary costs the pclntab
// reader: a new Resolver and 20,000 addresses, each at a random offset in a function drawn
// uniformly from the functab (as bench/symbolize draws them from the symbol table), on the
// large binary PROFSYM_GOPCLNTAB_LARGE_STRIPPED names. Nearly every address is in a function
// not decoded before. "mapped" reads the file through a mapping, as the command does; "read"
// copies the sections it reads into memory.
func BenchmarkResolver(b *testing.B) {
	path := os.Getenv("PROFSYM_GOPCLNTAB_LARGE_STRIPPED")
	if path == "" {
		b.Skip("PROFSYM_GOPCLNTAB_LARGE_STRIPPED not set")
	}
	file, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		b.Fatal(err)
	}
	r, err := NewResolver(f)
	if err != nil {
		b.Fatal(err)
	}
	addrs := sampleFunctab(r.t, 20000, 3)
	for _, mapped := range []bool{true, false} {
		name := "read"
		if mapped {
			name = "mapped"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var frames []index.Frame
			for b.Loop() {
				var r *Resolver
				if mapped {
					r, err = NewMappedResolver(f, file)
				} else {
					r, err = NewResolver(f)
				}
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for _, a := range addrs {
					frames = r.AppendLookup(frames[:0], a)
					n += len(frames)
				}
				if n == 0 || r.Err() != nil {
					b.Fatalf("%d frames, %v", n, r.Err())
				}
				if err := r.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// sampleFunctab draws n addresses, each at a random offset in a function drawn uniformly from
// t's functab.
func sampleFunctab(t *table, n int, seed uint64) []uint64 {
	rng := rand.New(rand.NewPCG(seed, ^seed))
	out := make([]uint64, 0, n)
	for len(out) < n {
		i := rng.IntN(t.nfunc)
		pc, _ := t.functabEntry(i)
		next, err := t.functabPC(i + 1)
		if err != nil {
			continue
		}
		lo, hi := t.entryAddr(pc), t.entryAddr(next)
		if hi <= lo {
			continue
		}
		out = append(out, lo+rng.Uint64N(hi-lo))
	}
	return out
}
