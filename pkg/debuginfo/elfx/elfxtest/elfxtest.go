// Package elfxtest builds small ELF binaries for tests with the toolchain installed on the
// machine (gcc, objcopy, strip, xz), so no opaque binaries need to be committed.
package elfxtest

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Need skips the test when a tool is missing.
func Need(tb testing.TB, tools ...string) {
	tb.Helper()
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			tb.Skipf("%s not installed", t)
		}
	}
}

// Run runs a command and fails the test with its output when it fails.
func Run(tb testing.TB, name string, args ...string) []byte {
	tb.Helper()
	out, err := exec.CommandContext(tb.Context(), name, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return out
}

// CC writes src to dir/name.c and compiles it with gcc into dir/name with the extra args.
// Libraries among args come after the source, so they resolve its references. It returns
// the output path.
func CC(tb testing.TB, dir, name, src string, args ...string) string {
	tb.Helper()
	Need(tb, "gcc")
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(dir, name)
	Run(tb, "gcc", append([]string{"-o", out, c}, args...)...)
	return out
}

// Hello is a small C program with a few functions, for tests that need DWARF and symbols.
const Hello = `#include <stdio.h>
int counter;
__attribute__((noinline)) int leaf(int x) { return x * 3 + counter; }
__attribute__((noinline)) int middle(int x) { return leaf(x) + 1; }
int main(int argc, char **argv) { (void)argv; printf("%d\n", middle(argc)); return 0; }
`

// Tiny is a libc-free static program, a few hundred bytes of ELF: cheap fuzz seed material.
const Tiny = `int value = 7;
__attribute__((noinline)) int f(int x) { return x + value; }
void _start(void) { f(1); for (;;) {} }
`

// Read returns the bytes of the file at path.
func Read(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Symbols returns the .symtab symbols of the ELF file at path.
func Symbols(tb testing.TB, path string) []elf.Symbol {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		tb.Fatal(err)
	}
	return syms
}

// SymbolValue returns the value (address) of the .symtab symbol called name in the ELF file at
// path, failing the test when there is none.
func SymbolValue(tb testing.TB, path, name string) uint64 {
	tb.Helper()
	for _, s := range Symbols(tb, path) {
		if s.Name == name {
			return s.Value
		}
	}
	tb.Fatalf("%s: no symbol %s", path, name)
	return 0
}

// KernelModule is C shaped like a Linux kernel module, for tests of relocatable objects (gcc -c
// -g -O2, freestanding): code in .text with inlined static functions, a cold function, which
// gcc puts in .text.unlikely, an init function in .init.text and an exit function in
// .exit.text (the kernel's __init and __exit), and data, read-only data and bss. With
// -DTEXT_ONLY -fno-reorder-blocks-and-partition all the code is in .text: llvm-symbolizer reads
// a relocatable object as if every section started at 0, so its answers on the object itself
// are right only where no other code section overlaps.
const KernelModule = `#ifdef TEXT_ONLY
#define __cold
#define __init
#define __exit
#else
#define __cold __attribute__((cold))
#define __init __attribute__((section(".init.text"), cold))
#define __exit __attribute__((section(".exit.text"), cold))
#endif
static int counter;
static const int table[8] = {3, 1, 4, 1, 5, 9, 2, 6};
int limit = 100;

static inline __attribute__((always_inline)) int sq(int x) { return x * x; }
static inline __attribute__((always_inline)) int mix(int x) { return sq(x) + table[x & 7]; }

__attribute__((noinline)) int hot(int x)
{
	int s = 0;
	for (int i = 0; i < x; i++)
		s += mix(i + counter);
	return s;
}

__attribute__((noinline)) __cold int slow_path(int x)
{
	counter += mix(x);
	return counter > limit ? -1 : counter;
}

__attribute__((noinline)) int dispatch(int x)
{
	if (__builtin_expect(x > limit, 0))
		return slow_path(x);
	return hot(x) + mix(x);
}

__attribute__((noinline)) __init int module_start(void)
{
	counter = mix(limit);
	return dispatch(counter);
}

__attribute__((noinline)) __exit void module_stop(void)
{
	counter = sq(counter) + mix(limit);
}
`
