package index_test

import (
	"debug/elf"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// largeBinary is a 150 MB Go binary (MinIO, see tooling.md) that the lookup benchmarks and the
// reference comparison use when it is there: its interval and line tables hold millions of
// entries, the size at which the lookup's memory access pattern decides its speed.
func largeBinary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("PROFSYM_LARGE_BINARY"); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		tb.Skip("no home directory for the large test binary")
	}
	p := filepath.Join(home, ".cache", "profsym", "bin", "minio")
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("large test binary %s not present", p)
	}
	return p
}

type largeIndex struct {
	ix       *index.Index
	textLo   uint64
	textHi   uint64
	blob     []byte
	loadErrs error
}

var (
	largeOnce sync.Once
	large     largeIndex
)

// loadLarge builds the large binary's index once per test process: it takes seconds.
func loadLarge(tb testing.TB) *largeIndex {
	tb.Helper()
	path := largeBinary(tb)
	largeOnce.Do(func() {
		large.loadErrs = func() error {
			f, err := elf.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			for _, p := range f.Progs {
				if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
					large.textLo, large.textHi = p.Vaddr, p.Vaddr+p.Memsz
					break
				}
			}
			ix, _, err := debuginfo.OpenIndex(path, debuginfo.Options{})
			if err != nil {
				return err
			}
			large.ix = ix
			large.blob, err = ix.MarshalBinary()
			return err
		}()
	})
	if large.loadErrs != nil {
		tb.Fatalf("index %s: %v", path, large.loadErrs)
	}
	if large.textHi == 0 {
		tb.Fatalf("%s has no executable PT_LOAD segment", path)
	}
	return &large
}

// randomAddrs draws n addresses uniformly from [lo, hi), as a profile of a busy process does
// from the symbolizer's point of view once its result cache misses.
func randomAddrs(seed uint64, n int, lo, hi uint64) []uint64 {
	r := rand.New(rand.NewPCG(seed, seed+1))
	a := make([]uint64, n)
	for i := range a {
		a[i] = lo + r.Uint64N(hi-lo)
	}
	return a
}

// BenchmarkLookupLarge looks up a batch of 10,000 uniformly random addresses of the large
// binary's executable segment per op, as one Symbolize request does.
func BenchmarkLookupLarge(b *testing.B) {
	l := loadLarge(b)
	addrs := randomAddrs(1, 10000, l.textLo, l.textHi)
	var dst []index.Frame
	b.ReportAllocs()
	for b.Loop() {
		for _, a := range addrs {
			dst = l.ix.AppendLookup(dst[:0], a)
		}
	}
	b.ReportMetric(float64(l.ix.Stats().Bytes), "index-bytes")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(addrs)), "ns/lookup")
}

func BenchmarkUnmarshalLarge(b *testing.B) {
	l := loadLarge(b)
	b.SetBytes(int64(len(l.blob)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := index.Unmarshal(l.blob); err != nil {
			b.Fatal(err)
		}
	}
}

// cProgram has inlined calls, a cold split and static functions, so that its index has nested
// intervals, gaps and outer names.
const cProgram = `#include <stdio.h>
#include <stdlib.h>
static inline __attribute__((always_inline)) int leaf(int x) { return x * 3 + 1; }
static inline __attribute__((always_inline)) int mid(int x) { return leaf(x) + leaf(x + 1); }
__attribute__((noinline)) int top(int x) { if (__builtin_expect(x > 1000, 0)) { fprintf(stderr, "big %d\n", x); abort(); } return mid(x) * 2; }
static __attribute__((noinline)) long sum(const char *s) { long t = 0; while (*s) t += mid(*s++); return t; }
int main(int c, char **v) { printf("%d %ld\n", top(c), sum(v[0])); return 0; }
`

const goProgram = `package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Println(strings.ToUpper(strings.Join(os.Args, ",")))
}
`

// TestLookupMatchesReferenceBinaries compares the optimized lookup with the plain reference at
// every table edge and at random addresses, on indexes of binaries compiled here (DWARF from gcc
// and clang, Go pclntab) and, when present, of the large binary.
func TestLookupMatchesReferenceBinaries(t *testing.T) {
	dir := t.TempDir()
	type bin struct {
		name, path string
	}
	var bins []bin
	if _, err := exec.LookPath("gcc"); err == nil {
		bins = append(bins,
			bin{"gcc -O2", elfxtest.CC(t, dir, "gcc-o2", cProgram, "-O2", "-g")},
			bin{"gcc -O0 static", elfxtest.CC(t, dir, "gcc-static", cProgram, "-O0", "-g", "-static")})
	}
	if _, err := exec.LookPath("clang"); err == nil {
		src := filepath.Join(dir, "prog.c")
		if err := os.WriteFile(src, []byte(cProgram), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "clang-o2")
		elfxtest.Run(t, "clang", "-O2", "-g", "-o", out, src)
		bins = append(bins, bin{"clang -O2", out})
	}
	if goTool, err := exec.LookPath("go"); err == nil {
		mod := filepath.Join(dir, "gomod")
		if err := os.MkdirAll(mod, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range map[string]string{"go.mod": "module prog\n\ngo 1.22\n", "main.go": goProgram} {
			if err := os.WriteFile(filepath.Join(mod, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(dir, "goprog")
		cmd := exec.CommandContext(t.Context(), goTool, "build", "-o", out, ".")
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
		bins = append(bins, bin{"go", out})
	}
	for _, b := range bins {
		t.Run(b.name, func(t *testing.T) {
			ix, _, err := debuginfo.OpenIndex(b.path, debuginfo.Options{})
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := textSegment(t, b.path)
			compareReference(t, ix, ix.EdgeAddrs(), randomAddrs(3, 50000, lo-0x100, hi+0x100))
		})
	}
	t.Run("large", func(t *testing.T) {
		if testing.Short() {
			t.Skip("short")
		}
		l := loadLarge(t)
		// Every edge of a large index is millions of addresses: take a random tenth of them.
		edges := l.ix.EdgeAddrs()
		r := rand.New(rand.NewPCG(5, 6))
		sample := edges[:0:0]
		for _, e := range edges {
			if r.IntN(10) == 0 {
				sample = append(sample, e)
			}
		}
		compareReference(t, l.ix, sample, randomAddrs(4, 300000, l.textLo-0x1000, l.textHi+0x1000))
		data, err := l.ix.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		back, err := index.Unmarshal(data)
		if err != nil {
			t.Fatal(err)
		}
		compareReference(t, back, nil, randomAddrs(5, 100000, l.textLo, l.textHi))
		t.Logf("stats %+v", l.ix.Stats())
	})
}

func compareReference(t *testing.T, ix *index.Index, addrSets ...[]uint64) {
	t.Helper()
	var dst []index.Frame
	n, bad := 0, 0
	for _, set := range addrSets {
		for _, a := range set {
			dst = ix.AppendLookup(dst[:0], a)
			want := ix.ReferenceLookup(a)
			n++
			if len(dst) == 0 && len(want) == 0 {
				continue
			}
			if !reflect.DeepEqual(dst, want) {
				if bad++; bad <= 5 {
					t.Errorf("AppendLookup(%#x) = %+v, reference %+v", a, dst, want)
				}
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d lookups differ from the reference", bad, n)
	}
}

func textSegment(t *testing.T, path string) (lo, hi uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return p.Vaddr, p.Vaddr + p.Memsz
		}
	}
	t.Fatalf("%s has no executable PT_LOAD segment", path)
	return 0, 0
}
