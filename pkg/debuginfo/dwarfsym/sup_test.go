package dwarfsym

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// dwzPair builds src twice with cc and flags (two files whose DWARF is alike, as the binaries
// of one source package are), copies the first, and runs dwz -m over both. It returns the
// first binary, its un-dwz'ed copy and the supplementary file.
func dwzPair(t testing.TB, dir, cc, src string, dwz5 bool, flags ...string) (bin, orig, sup string) {
	t.Helper()
	needTools(t, cc, "dwz")
	tag := strings.Join(append([]string{cc, src, strconv.FormatBool(dwz5)}, flags...), "")
	var bins []string
	for _, name := range []string{"one", "two"} {
		bins = append(bins, testBinary{name: name + tag, cc: cc, srcs: []string{src}, flags: flags}.build(t, dir))
	}
	orig = bins[0] + ".orig"
	data, err := os.ReadFile(bins[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(orig, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sup = filepath.Join(dir, "common"+tag+".debug")
	args := []string{"-m", sup, "-M", filepath.Base(sup)}
	if dwz5 {
		args = append([]string{"-5"}, args...)
	}
	if out, err := exec.CommandContext(t.Context(), "dwz", append(args, bins...)...).CombinedOutput(); err != nil {
		t.Fatalf("dwz %v: %v\n%s", args, err, out)
	}
	return bins[0], orig, sup
}

// TestLoadSupplementary: a dwz'ed file with its supplementary file gives the index of the file
// before dwz, at every address of every function; without it, Load fails with
// ErrNoSupplementary rather than answer with unnamed functions.
func TestLoadSupplementary(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		dw   string
		dwz5 bool
	}{{"-gdwarf-4", false}, {"-gdwarf-5", false}, {"-gdwarf-5", true}} {
		bin, orig, sup := dwzPair(t, dir, "g++", "prog.cc", c.dwz5, "-O2", c.dw)
		secs, f, _ := elfSections(t, bin)
		funcs := funcSymbols(t, f)
		f.Close()
		supSecs, sf, _ := elfSections(t, sup)
		sf.Close()
		want, _ := loadIndex(t, orig, Options{})
		got, st := loadIndex(t, bin, Options{Supplementary: supSecs})
		if !st.HasInlines {
			t.Fatalf("%s: no inlined instances", bin)
		}
		n := 0
		for _, fn := range funcs {
			for a := fn.addr; a < fn.end; a++ {
				if g, w := got.Lookup(a), want.Lookup(a); !reflect.DeepEqual(g, w) {
					t.Fatalf("%s (dwz -5 %v) at %#x:\n got  %+v\n want %+v", c.dw, c.dwz5, a, g, w)
				}
				n++
			}
		}
		if _, err := Load(secs, binary.LittleEndian, index.NewBuilder(), Options{}); !errors.Is(err, ErrNoSupplementary) {
			t.Errorf("%s: Load without the supplementary file: %v, want ErrNoSupplementary", c.dw, err)
		}
		t.Logf("%s (dwz -5 %v): %d addresses as before dwz; %d functions, %d inlined instances", c.dw, c.dwz5, n, st.Functions, st.InlinedInstances)
	}
}

func FuzzLoadSupplementary(f *testing.F) {
	dir := f.TempDir()
	for _, c := range []struct {
		dw   string
		dwz5 bool
	}{{"-gdwarf-4", false}, {"-gdwarf-5", true}} {
		// The small C library of the other fuzz tests: large seeds make every fuzz input slow.
		bin, _, sup := dwzPair(f, dir, "gcc", "helper.c", c.dwz5, "-O2", c.dw, "-shared", "-fPIC")
		secs, ef, _ := elfSections(f, bin)
		ef.Close()
		supSecs, sf, _ := elfSections(f, sup)
		sf.Close()
		f.Add(secs["info"], secs["abbrev"], secs["line"], secs["str"], secs["line_str"],
			supSecs["info"], supSecs["abbrev"], supSecs["str"], supSecs["line"])
	}
	f.Fuzz(func(t *testing.T, info, abbrev, line, str, lineStr, supInfo, supAbbrev, supStr, supLine []byte) {
		secs := map[string][]byte{"info": info, "abbrev": abbrev, "line": line, "str": str, "line_str": lineStr}
		sup := map[string][]byte{"info": supInfo, "abbrev": supAbbrev, "str": supStr, "line": supLine}
		b := index.NewBuilder()
		if _, err := Load(secs, binary.LittleEndian, b, Options{Workers: 2, Supplementary: sup}); err != nil {
			return
		}
		if ix, err := b.Build(); err == nil {
			ix.Lookup(0x1000)
		}
	})
}
