package demangle

import (
	"os"
	"testing"
)

// BenchmarkNameLibraries demangles every mangled name of the installed system C++ libraries
// (libstdc++ and libLLVM, about 44,000 names), what the index build does for each symbol of
// a binary. One op is one name; the names are taken in turn.
func BenchmarkNameLibraries(b *testing.B) {
	var names []string
	for _, p := range systemLibraries {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		n, err := mangledNames(p)
		if err != nil {
			b.Fatalf("%s: %v", p, err)
		}
		names = append(names, n...)
	}
	if len(names) == 0 {
		b.Skip("no system C++ library installed")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		_ = Name(names[i%len(names)])
	}
}
