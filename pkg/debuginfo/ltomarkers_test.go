package debuginfo_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/debuginfo/internal/llvmcompare"
	"github.com/profsym/profsym/pkg/testsupport"
)

// ltoMarker is the name gcc's LTO gives the symbol it writes into .debug_info for each source
// file: the file's name and a hash.
var ltoMarker = regexp.MustCompile(`^[a-z]\.c\.[0-9a-f]{8}$`)

// TestLTOMarkersNameNoCode: gcc's LTO writes a symbol per source file into .debug_info, whose
// value is an offset into that section; in a PIE whose code starts low, those offsets fall on
// code, and llvm-symbolizer 14 names the functions there after them (b.c.a911a462 for b_f3).
// The engine takes no name from a section that is not loaded: on every address of the
// program's functions it answers as llvm-symbolizer does on a copy without those symbols.
func TestLTOMarkersNameNoCode(t *testing.T) {
	testsupport.RequireTools(t, "gcc", "objcopy", "llvm-symbolizer")
	dir := t.TempDir()
	var srcs []string
	for _, unit := range []string{"a", "b", "c"} {
		var b strings.Builder
		// Much code and little DWARF per function, so that the code reaches past the
		// markers' offsets.
		for i := range 60 {
			fmt.Fprintf(&b, "__attribute__((noinline)) int %s_f%d(int x) { int s = x;", unit, i)
			for k := range 60 {
				fmt.Fprintf(&b, " s = s * %d + (x ^ %d);", k+3, k*7+i)
			}
			b.WriteString(" return s; }\n")
		}
		if unit == "a" {
			b.WriteString("int b_entry(int); int c_entry(int);\nint main(int c, char **v) { (void)v; return a_f0(c) + b_entry(c) + c_entry(c); }\n")
		} else {
			fmt.Fprintf(&b, "int %s_entry(int x) { int s = 0;", unit)
			for i := range 60 {
				fmt.Fprintf(&b, " s += %s_f%d(x);", unit, i)
			}
			b.WriteString(" return s; }\n")
		}
		src := filepath.Join(dir, unit+".c")
		if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, src)
	}
	obj := filepath.Join(dir, "prog")
	if out, err := exec.CommandContext(t.Context(), "gcc", append([]string{"-O2", "-g", "-flto", "-fPIE", "-pie", "-o", obj}, srcs...)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	addrs := namedFunctionAddrs(t, obj, func(name string) bool { return !ltoMarker.MatchString(name) }, 1000, "the program's functions")
	ours, theirs, info := oursAndLLVM(t, obj, addrs)
	marked := 0
	for i := range addrs {
		for _, f := range theirs[i] {
			if ltoMarker.MatchString(f.Function) {
				marked++
				break
			}
		}
		for _, f := range ours[i] {
			if ltoMarker.MatchString(f.Function) {
				t.Fatalf("%#x is named after the marker symbol %s (sources %v)", addrs[i], f.Function, info.Sources)
			}
		}
	}
	if marked == 0 {
		t.Fatal("llvm-symbolizer names no code after a marker: the program no longer tests them")
	}
	// The reference: llvm-symbolizer on a copy without the markers.
	var strip []string
	for _, s := range elfxtest.Symbols(t, obj) {
		if ltoMarker.MatchString(s.Name) {
			strip = append(strip, "--strip-symbol="+s.Name)
		}
	}
	clean := filepath.Join(dir, "prog.clean")
	if out, err := exec.CommandContext(t.Context(), "objcopy", append(strip, obj, clean)...).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	ref, err := llvmcompare.Tool{}.Symbolize(t.Context(), clean, addrs)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := llvmcompare.Compare(addrs, ours, ref, llvmcompare.ModeFull)
	if err != nil {
		t.Fatal(err)
	}
	if u := rep.Unexplained(); len(u) > 0 {
		t.Fatalf("%d of %d addresses differ from llvm-symbolizer without the markers, first at %#x: %s vs %s",
			len(u), len(addrs), u[0].Addr, llvmcompare.Chain(u[0].Ours), llvmcompare.Chain(u[0].Ref))
	}
	t.Logf("%d addresses, %d of which llvm-symbolizer names after a marker; ours as llvm-symbolizer without them", len(addrs), marked)
}
