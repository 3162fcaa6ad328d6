package gopclntab

import (
	"debug/elf"
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
