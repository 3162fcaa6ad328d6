package debuginfo_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/debuginfo/internal/llvmcompare"
)

// Two C++ programs sharing a header of inline functions, templates and types: what dwz -m
// moves into a supplementary file (the abstract instances of the inlined functions, their
// linkage names, the types, the producer and compilation directory strings).
var dwzSources = map[string]string{
	"shared.h": `
#include <cstdio>
namespace shared {
struct Point { int x, y; };
template <typename T> inline __attribute__((always_inline)) T sq(T v) { return v * v; }
template <typename T> inline __attribute__((always_inline)) T sumsq(T a, T b) { return sq(a) + sq(b); }
inline int dist2(Point p) { return sumsq(p.x, p.y); }
template <typename T> struct Acc {
  T total{};
  __attribute__((noinline)) void add(T v) { total += sumsq(v, v + 1); }
};
}
`,
	"a.cc": `
#include "shared.h"
__attribute__((noinline)) int fa(int n) { shared::Point p{n, n + 1}; return shared::dist2(p) + shared::sq(n); }
int main(int argc, char **) { shared::Acc<long> acc; acc.add(argc); std::printf("%d %ld\n", fa(argc), acc.total); return 0; }
`,
	"b.cc": `
#include "shared.h"
__attribute__((noinline)) int fb(int n) { shared::Point p{n, 2 * n}; return shared::dist2(p) * 3; }
int main(int argc, char **) { shared::Acc<long> acc; acc.add(argc); std::printf("%d %ld\n", fb(argc), acc.total); return 0; }
`,
}

// TestDWZSupplementary builds programs, gives them to dwz -m (DWARF 4 with .gnu_debugaltlink,
// and DWARF 5 with dwz -5's .debug_sup), and requires every address of every function to
// resolve exactly as in the original, un-dwz'ed binary, which agrees with llvm-symbolizer
// (llvm-symbolizer 14 does not read supplementary files: it names the moved functions "??").
// The supplementary file is found beside the binary by its link's name, in a debug directory
// by build ID, or given by the caller; missing, it makes a DWARF error naming its ID.
func TestDWZSupplementary(t *testing.T) {
	elfxtest.Need(t, "g++", "dwz", "llvm-symbolizer")
	for _, dw := range []string{"4", "5"} {
		t.Run("dwarf"+dw, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range dwzSources {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var bins []string
			for _, p := range []string{"a", "b"} {
				out := filepath.Join(dir, p)
				elfxtest.Run(t, "g++", "-O2", "-gdwarf-"+dw, "-Wl,--build-id", "-o", out, filepath.Join(dir, p+".cc"))
				elfxtest.Run(t, "cp", out, out+".orig")
				bins = append(bins, out)
			}
			args := []string{"-m", filepath.Join(dir, "shared.debug"), "-M", "shared.debug"}
			if dw == "5" {
				args = append([]string{"-5"}, args...)
			}
			elfxtest.Run(t, "dwz", append(args, bins...)...)

			for _, bin := range bins {
				ix, info, err := debuginfo.OpenIndex(bin, debuginfo.Options{})
				if err != nil {
					t.Fatal(err)
				}
				sup := info.Supplementary
				if sup == nil || sup.Missing || sup.FoundBy != "link-path" || info.DWARFError != "" {
					t.Fatalf("%s: supplementary %+v, DWARF error %q", bin, sup, info.DWARFError)
				}
				if want := map[string]string{"4": ".gnu_debugaltlink", "5": ".debug_sup"}[dw]; sup.Section != want {
					t.Errorf("%s: link in %s, want %s", bin, sup.Section, want)
				}
				n := sameAsOriginal(t, bin, ix)
				t.Logf("%s: %d addresses resolve as in the original; supplementary %s (%s) %s", filepath.Base(bin), n, sup.Name, sup.Section, sup.ID)
				// A server does not open the path a link names; the file is missing until given.
				if _, info, err := debuginfo.OpenIndex(bin, debuginfo.Options{NoSearch: true}); err != nil {
					t.Fatal(err)
				} else if s := info.Supplementary; s == nil || !s.Missing || s.Path != "" || !strings.Contains(info.DWARFError, "not searched") {
					t.Fatalf("%s with NoSearch: supplementary %+v, DWARF error %q", bin, s, info.DWARFError)
				}
			}

			// A store tells the common file from the files that link to it.
			for _, c := range []struct {
				path string
				ok   bool
			}{{filepath.Join(dir, "shared.debug"), true}, {bins[0], false}, {bins[0] + ".orig", false}} {
				id, ok, err := debuginfo.SupplementaryFileID(c.path, elfx.Limits{})
				if err != nil || ok != c.ok {
					t.Errorf("SupplementaryFileID(%s) = %q, %v, %v; want ok %v", filepath.Base(c.path), id, ok, err, c.ok)
				}
				if ok {
					_, info, err := debuginfo.OpenIndex(bins[0], debuginfo.Options{})
					if err != nil || info.Supplementary.ID != id {
						t.Errorf("supplementary file's ID %q, the link names %+v (%v)", id, info.Supplementary, err)
					}
				}
			}

			// Moved away, the file is found in a debug directory's build-ID layout, or given.
			id := func() string {
				_, info, err := debuginfo.OpenIndex(bins[0], debuginfo.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return info.Supplementary.ID
			}()
			debugDir := filepath.Join(dir, "debug")
			byID := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
			if err := os.MkdirAll(filepath.Dir(byID), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "shared.debug"), byID); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				opts    debuginfo.Options
				foundBy string
			}{
				{debuginfo.Options{DebugDirs: []string{debugDir}}, "build-id"},
				{debuginfo.Options{SupplementaryFile: byID}, "option"},
			} {
				ix, info, err := debuginfo.OpenIndex(bins[0], c.opts)
				if err != nil {
					t.Fatal(err)
				}
				if sup := info.Supplementary; sup.FoundBy != c.foundBy || sup.Path != byID {
					t.Errorf("found by %q at %q, want %q at %q", sup.FoundBy, sup.Path, c.foundBy, byID)
				}
				sameAsOriginal(t, bins[0], ix)
			}

			// Missing: the DWARF is not read, and the error names the file's ID; the symbol
			// table still answers.
			ix, info, err := debuginfo.OpenIndex(bins[0], debuginfo.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !info.Supplementary.Missing || !strings.Contains(info.DWARFError, id) ||
				!strings.Contains(info.DWARFError, debuginfo.ErrSupplementaryMissing.Error()) {
				t.Errorf("missing supplementary file: %+v, DWARF error %q", info.Supplementary, info.DWARFError)
			}
			if ix.Fidelity() != index.FidelitySymbols {
				t.Errorf("fidelity %v without the supplementary file, want symbols", ix.Fidelity())
			}
			t.Logf("without it: %s", info.DWARFError)
		})
	}
}

// sameAsOriginal requires ix (of a dwz'ed bin) to resolve every address of every function as
// the index of bin.orig does, and bin.orig to agree with llvm-symbolizer; it returns the
// number of addresses.
func sameAsOriginal(t *testing.T, bin string, ix *index.Index) int {
	t.Helper()
	orig := bin + ".orig"
	addrs := functionAddrs(t, orig)
	origIx, _, err := debuginfo.OpenIndex(orig, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ours := make([][]llvmcompare.Frame, len(addrs))
	inlined := 0
	for i, a := range addrs {
		got, want := ix.Lookup(a), origIx.Lookup(a)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s at %#x:\n got  %+v\n want %+v (un-dwz'ed)", bin, a, got, want)
		}
		if len(got) > 1 {
			inlined++
		}
		for _, f := range got {
			ours[i] = append(ours[i], frameOf(f))
		}
	}
	if inlined == 0 {
		t.Fatalf("%s: no inlined frames: the test program lost its point", bin)
	}
	ref, err := llvmcompare.Tool{}.Symbolize(t.Context(), orig, addrs)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := llvmcompare.Compare(addrs, ours, ref, llvmcompare.ModeFull, llvmcompare.Known...)
	if err != nil {
		t.Fatal(err)
	}
	if u := rep.Unexplained(); len(u) > 0 {
		t.Fatalf("%d of %d addresses differ from llvm-symbolizer on the original, first %+v", len(u), len(addrs), u[:min(len(u), 3)])
	}
	return len(addrs)
}
