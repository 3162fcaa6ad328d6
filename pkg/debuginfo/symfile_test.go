package debuginfo_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/debuginfo/internal/llvmcompare"
)

// TestSymbolFileNames holds the file of frames that no line row covers to llvm-symbolizer's
// rule: a local symbol's STT_FILE name with line 0, nothing for a global one. The program mixes
// a file built with -g and files built without it (static and global functions, and a file
// whose code gcc splits into a .cold part), in a binary with DWARF and one with symbols only.
func TestSymbolFileNames(t *testing.T) {
	elfxtest.Need(t, "gcc", "llvm-symbolizer")
	dir := t.TempDir()
	srcs := map[string]string{
		"plain.c": `
static int __attribute__((noinline)) hidden(int x) { for (int i = 0; i < x; i++) x ^= i * 7; return x; }
int __attribute__((noinline)) shown(int x) { return hidden(x) + 1; }
`,
		"cold.c": `
#include <stdlib.h>
static int __attribute__((noinline)) checked(int x) {
	if (__builtin_expect(x > 1000000, 0)) { abort(); }
	return x * 5;
}
int __attribute__((noinline)) use_checked(int x) { return checked(x) + 2; }
`,
		"main.c": `
#include <stdio.h>
int shown(int); int use_checked(int);
int main(int c, char **v) { (void)v; printf("%d\n", shown(c) + use_checked(c)); return 0; }
`,
	}
	for name, text := range srcs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	obj := func(src string, flags ...string) string {
		out := filepath.Join(dir, src+".o")
		elfxtest.Run(t, "gcc", append(append([]string{"-c", "-o", out}, flags...), filepath.Join(dir, src))...)
		return out
	}
	mixed := filepath.Join(dir, "mixed")
	elfxtest.Run(t, "gcc", "-o", mixed, obj("plain.c", "-O2"), obj("cold.c", "-O2"), obj("main.c", "-O2", "-g"))
	// Without any -g (strip --strip-debug would drop the STT_FILE symbols too).
	symOnly := filepath.Join(dir, "symonly")
	elfxtest.Run(t, "gcc", "-o", symOnly, obj("plain.c", "-O2"), obj("cold.c", "-O2"), obj("main.c", "-O2"))

	for _, path := range []string{mixed, symOnly} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			addrs := functionAddrs(t, path)
			ref, err := llvmcompare.Tool{}.Symbolize(t.Context(), path, addrs)
			if err != nil {
				t.Fatal(err)
			}
			ix, _, err := debuginfo.OpenIndex(path, debuginfo.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ours := make([][]llvmcompare.Frame, len(addrs))
			for i, a := range addrs {
				for _, f := range ix.Lookup(a) {
					ours[i] = append(ours[i], frameOf(f))
				}
			}
			rep, err := llvmcompare.Compare(addrs, ours, ref, llvmcompare.ModeFull, llvmcompare.Known...)
			if err != nil {
				t.Fatal(err)
			}
			if u := rep.Unexplained(); len(u) > 0 || rep.LineAgree != rep.LineCompared {
				t.Fatalf("%d of %d locations differ from llvm-symbolizer, first %+v", rep.LineCompared-rep.LineAgree, rep.LineCompared, u[:min(len(u), 3)])
			}
			// The rule is exercised: locals without line rows carry their file, globals none.
			files := map[string]string{}
			for _, fr := range ours {
				if len(fr) == 0 || fr[len(fr)-1].Line != 0 {
					continue
				}
				last := fr[len(fr)-1]
				files[last.Function] = last.File
			}
			for fn, want := range map[string]string{"hidden": "plain.c", "checked": "cold.c", "shown": "", "use_checked": ""} {
				if got, ok := files[fn]; !ok || got != want {
					t.Errorf("%s: file %q (seen %v), want %q", fn, got, ok, want)
				}
			}
			t.Logf("%d addresses, %d locations agree with llvm-symbolizer", len(addrs), rep.LineAgree)
		})
	}
}

func frameOf(f index.Frame) llvmcompare.Frame {
	return llvmcompare.Frame{Function: f.Function, LinkageName: f.LinkageName, File: f.File, Line: f.Line, Column: f.Column}
}

// namedFunctionAddrs returns every address of the functions of obj's symbol table that keep
// accepts, or fails the test when there are fewer than atLeast (what names them, why).
func namedFunctionAddrs(t *testing.T, obj string, keep func(name string) bool, atLeast int, what string) []uint64 {
	t.Helper()
	funcs, err := llvmcompare.FunctionSymbols(obj)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []uint64
	for _, f := range funcs {
		if keep(f.Name) {
			for a := f.Addr; a < f.Addr+f.Size; a++ {
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) < atLeast {
		t.Fatalf("%d addresses in %s", len(addrs), what)
	}
	return addrs
}

// oursAndLLVM indexes obj and returns its answers and llvm-symbolizer's for addrs.
func oursAndLLVM(t *testing.T, obj string, addrs []uint64) (ours, theirs [][]llvmcompare.Frame, info debuginfo.Info) {
	t.Helper()
	ix, info, err := debuginfo.OpenIndex(obj, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ours = make([][]llvmcompare.Frame, len(addrs))
	for i, a := range addrs {
		for _, f := range ix.Lookup(a) {
			ours[i] = append(ours[i], frameOf(f))
		}
	}
	theirs, err = llvmcompare.Tool{}.Symbolize(t.Context(), obj, addrs)
	if err != nil {
		t.Fatal(err)
	}
	return ours, theirs, info
}
