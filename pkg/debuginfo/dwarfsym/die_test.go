package dwarfsym

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSkipAttrsAsReadAttr: skipAttrs, which a walk uses for the entries it passes over, ends
// every entry where readAttr's decoding of each value does, on the DWARF of gcc and clang
// (DWARF 4 and 5, C and C++) and of Go: one byte off and the walk reads the rest of the unit as
// garbage.
func TestSkipAttrsAsReadAttr(t *testing.T) {
	needTools(t, "go")
	dir := t.TempDir()
	goSrc := filepath.Join(dir, "main.go")
	if err := os.WriteFile(goSrc, []byte(goProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	goBin := filepath.Join(dir, "go-program")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", goBin, goSrc).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	paths := map[string]string{"go": goBin}
	for _, name := range []string{"gcc-c-O2-dwarf4-pie", "clang-c-O3-dwarf5-pie", "gcc-cxx-O2-dwarf5", "clang-cxx-O2-dwarf4"} {
		tb := binaryNamed(t, name)
		if _, err := exec.LookPath(tb.cc); err != nil {
			continue
		}
		paths[name] = tb.build(t, dir)
	}
	for name, path := range paths {
		secs, f, _ := elfSections(t, path)
		f.Close()
		units, err := scanUnits(secs["info"], binary.LittleEndian)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		dc := newDecoder(secs, binary.LittleEndian, units)
		entries := 0
		forms := map[uint64]bool{}
		for _, h := range units {
			u, err := dc.s.openUnit(h, dc.abbrevs)
			if err != nil {
				t.Fatalf("%s: unit at %#x: %v", name, h.off, err)
			}
			r := &secReader{data: dc.s.info[:h.end], off: int(h.dieOff), order: dc.s.order}
			for r.off < len(r.data) {
				off := r.off
				code := r.uleb()
				if code == 0 {
					continue
				}
				a := u.abbrevs.get(code)
				if a == nil {
					t.Fatalf("%s: entry at %#x: unknown abbreviation %d", name, off, code)
				}
				read := *r
				for _, sp := range a.attrs {
					forms[sp.form] = true
					if _, err := dc.s.readAttr(&read, u, sp.form, sp.implicit, false); err != nil {
						t.Fatalf("%s: entry at %#x: readAttr: %v", name, off, err)
					}
				}
				if err := skipAttrs(r, u, a); err != nil {
					t.Fatalf("%s: entry at %#x: skipAttrs: %v", name, off, err)
				}
				if r.off != read.off {
					t.Fatalf("%s: entry at %#x: skipAttrs ends at %#x, readAttr at %#x", name, off, r.off, read.off)
				}
				entries++
			}
		}
		if entries == 0 {
			t.Fatalf("%s: no entry: the test checks nothing", name)
		}
		t.Logf("%s: %d units, %d entries, %d forms", name, len(units), entries, len(forms))
	}
}

// goProgram has what gives Go's DWARF its variety: generics, closures, methods, a package
// initializer.
const goProgram = `package main

import (
	"fmt"
	"os"
	"strings"
)

type pair[K comparable, V any] struct {
	k K
	v V
}

func (p pair[K, V]) String() string { return fmt.Sprint(p.k, "=", p.v) }

var table = map[string]pair[string, int]{"a": {"a", 1}, "b": {"b", 2}}

func main() {
	n := 0
	add := func(s string) { n += len(s) }
	for _, a := range os.Args {
		add(strings.ToUpper(a))
	}
	fmt.Println(n, table["a"], pair[int, float64]{1, 2.5})
}
`
