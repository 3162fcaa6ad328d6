package debuginfo_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/internal/llvmcompare"
	"github.com/profsym/profsym/pkg/testsupport"
)

// cgoProgram is a Go program whose C part gcc inlines into itself at -O2 (cgo's default
// CFLAGS): hash_bytes and mix have no code of their own.
const cgoProgram = `package main

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
static inline uint32_t mix(uint32_t h, uint32_t v) { h ^= v; h *= 0x01000193u; return h; }
static inline uint32_t hash_bytes(const unsigned char *p, size_t n) {
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++) h = mix(h, p[i]);
	return h;
}
static int cmp_u32(const void *a, const void *b) {
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}
uint32_t c_work(const char *s, int rounds) {
	uint32_t acc = 0;
	uint32_t buf[64];
	for (int r = 0; r < rounds; r++) {
		acc = mix(acc, hash_bytes((const unsigned char *)s, strlen(s)));
		buf[r & 63] = acc;
	}
	qsort(buf, 64, sizeof buf[0], cmp_u32);
	return buf[0] ^ acc;
}
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"
)

func main() {
	s := C.CString(os.Args[0])
	defer C.free(unsafe.Pointer(s))
	fmt.Println(uint32(C.c_work(s, 100)))
}
`

// TestCgoInlinedC: in a Go binary, the C code cgo compiles is answered as llvm-symbolizer
// answers it, inlined C frames included. pclntab describes Go functions only; the functions
// and inline trees of the C units come from DWARF.
func TestCgoInlinedC(t *testing.T) {
	testsupport.RequireTools(t, "go", "gcc", "llvm-symbolizer")
	obj := testsupport.BuildGo(t, t.TempDir(), cgoProgram, "CGO_ENABLED=1")
	addrs := namedFunctionAddrs(t, obj, func(name string) bool { return name == "c_work" || name == "cmp_u32" },
		50, "c_work and cmp_u32: the C functions are missing")
	ours, theirs, info := oursAndLLVM(t, obj, addrs)
	inlined := 0
	for _, fs := range theirs {
		if len(fs) > 1 {
			inlined++
		}
	}
	if inlined == 0 {
		t.Fatal("llvm-symbolizer finds no inlined C frame: the program no longer tests inlining")
	}
	rep, err := llvmcompare.Compare(addrs, ours, theirs, llvmcompare.ModeFull)
	if err != nil {
		t.Fatal(err)
	}
	if u := rep.Unexplained(); len(u) > 0 {
		t.Fatalf("%d of %d C addresses differ from llvm-symbolizer (sources %v), first at %#x: %s vs %s", len(u), len(addrs), info.Sources,
			u[0].Addr, llvmcompare.Chain(u[0].Ours), llvmcompare.Chain(u[0].Ref))
	}
	t.Logf("%d C addresses (%d with inlined frames) agree with llvm-symbolizer; sources %v", len(addrs), inlined, info.Sources)
}

// TestGoSymbolFiles: where no line row covers an address of a Go binary with a symbol table,
// the file is the STT_FILE of the local symbol covering it (go.go, the Go linker's one), as
// llvm-symbolizer answers. An externally linked binary makes every Go function a local symbol,
// and the functions whose DWARF has no line rows (generated wrappers) fall there; an internally
// linked one has the C objects' code under local section symbols. pclntab names the functions
// in both, and knows no file of the C ones.
func TestGoSymbolFiles(t *testing.T) {
	testsupport.RequireTools(t, "go", "gcc", "llvm-symbolizer")
	for _, mode := range []string{"external", "internal"} {
		t.Run(mode, func(t *testing.T) {
			obj := testsupport.BuildGo(t, t.TempDir(), cgoProgram, "CGO_ENABLED=1", "GOFLAGS=-ldflags=-linkmode="+mode)
			funcs, err := llvmcompare.FunctionSymbols(obj)
			if err != nil {
				t.Fatal(err)
			}
			// A section symbol (runtime/cgo(.text)) spans several C functions and the padding
			// between them, which no function owns: llvm-symbolizer names none there, pclntab
			// the function before it. Only functions are sampled.
			funcs = slices.DeleteFunc(funcs, func(f llvmcompare.Func) bool { return strings.HasSuffix(f.Name, "(.text)") })
			addrs := llvmcompare.Sample(funcs, 3, 20000, 1)
			ours, theirs, info := oursAndLLVM(t, obj, addrs)
			inGoGo := 0
			for _, fs := range theirs {
				if len(fs) > 0 && fs[len(fs)-1].File == "go.go" {
					inGoGo++
				}
			}
			if inGoGo == 0 {
				t.Fatal("llvm-symbolizer places no address in go.go: the binary no longer tests symbol files")
			}
			rep, err := llvmcompare.Compare(addrs, ours, theirs, llvmcompare.ModeFull, llvmcompare.Known...)
			if err != nil {
				t.Fatal(err)
			}
			if u := rep.Unexplained(); len(u) > 0 {
				t.Fatalf("%d of %d addresses differ from llvm-symbolizer (sources %v), first at %#x: %s vs %s; %v", len(u), len(addrs), info.Sources,
					u[0].Addr, llvmcompare.Chain(u[0].Ours), llvmcompare.Chain(u[0].Ref), rep.Summary())
			}
			t.Logf("%d addresses, %d of them in go.go, agree with llvm-symbolizer or differ for a known reason; sources %v; %v",
				len(addrs), inGoGo, info.Sources, rep.Summary())
		})
	}
}
