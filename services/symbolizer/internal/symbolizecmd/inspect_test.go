package symbolizecmd

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/testsupport"
)

// TestInspectUnreadableDWARF: inspect says when a file's DWARF does not read, and why.
func TestInspectUnreadableDWARF(t *testing.T) {
	bin, _ := build(t)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".debug_info")
	f.Close()
	for i := s.Offset + 4; i < s.Offset+s.FileSize; i++ {
		data[i] = 0xff // unit headers and DIEs become garbage
	}
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, data, 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := (&InspectCmd{File: broken}).run(&out); err != nil {
		t.Fatal(err)
	}
	var dwarf string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "dwarf ") {
			dwarf = line
		}
	}
	if !strings.Contains(dwarf, "unreadable: ") || !strings.Contains(dwarf, "DWARF version") {
		t.Fatalf("dwarf line %q, want it unreadable with the reason\n%s", dwarf, out.String())
	}
	if !strings.Contains(out.String(), "index fidelity    symbols") {
		t.Fatalf("want the index from the symbol table:\n%s", out.String())
	}
}

// TestInspectCompanions: inspect names a dwz'ed file's supplementary file by ID and says
// whether it was found, recognizes the common file itself, and counts the skeleton units of
// a split build and those missing their package.
func TestInspectCompanions(t *testing.T) {
	testsupport.RequireTools(t, "gcc", "dwz", "dwp")
	dir := t.TempDir()
	sh := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	src := "#include <stdio.h>\nstatic inline __attribute__((always_inline)) int sq(int v) { return v * v; }\n" +
		"int main(int c, char **v) { (void)v; printf(\"%d\\n\", sq(c)); return 0; }\n"
	if err := os.WriteFile(filepath.Join(dir, "p.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	sh("gcc", "-g", "-O2", "-o", "p1", "p.c")
	sh("gcc", "-g", "-O2", "-DX", "-o", "p2", "p.c")
	sh("dwz", "-m", "common.debug", "-M", "common.debug", "p1", "p2")
	sh("gcc", "-g", "-gdwarf-4", "-gsplit-dwarf", "-O2", "-c", "p.c", "-o", "s.o")
	sh("gcc", "-o", "s", "s.o")
	sh("dwp", "-e", "s", "-o", "s.dwp")
	if err := os.Rename(filepath.Join(dir, "common.debug"), filepath.Join(dir, "moved.debug")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "s.dwp"), filepath.Join(dir, "moved.dwp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "s.dwo")); err != nil {
		t.Fatal(err)
	}
	inspect := func(c InspectCmd) string {
		t.Helper()
		var out bytes.Buffer
		if err := c.run(&out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	ids := func(path string) string {
		var out bytes.Buffer
		if err := (&InspectCmd{File: path, JSON: true, NoIndex: true}).run(&out); err != nil {
			t.Fatal(err)
		}
		var rep struct {
			IDs struct {
				GNU string `json:"gnu"`
			} `json:"ids"`
			SupplementaryOf string `json:"supplementary_of"`
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.IDs.GNU + "/" + rep.SupplementaryOf
	}
	common := filepath.Join(dir, "moved.debug")
	supID := strings.Split(ids(common), "/")[1]
	if supID == "" {
		t.Fatalf("the common file is not recognized: %s", ids(common))
	}
	for _, c := range []struct {
		name string
		cmd  InspectCmd
		want []string
	}{
		{"supplementary missing", InspectCmd{File: filepath.Join(dir, "p1")},
			[]string{"supplementary     .gnu_debugaltlink names \"common.debug\", ID " + supID + "; MISSING", "index fidelity    symbols"}},
		{"supplementary given", InspectCmd{File: filepath.Join(dir, "p1"), Supplementary: common},
			[]string{"ID " + supID + "; found at " + common + " (found by option)", "index fidelity    full"}},
		{"the common file", InspectCmd{File: common, NoIndex: true},
			[]string{"supplementary file  this file is one", "by ID " + supID}},
		{"package missing", InspectCmd{File: filepath.Join(dir, "s")},
			[]string{"split dwarf       1 skeleton units, functions from (none); 1 units MISSING", "index fidelity    lines"}},
		{"package given", InspectCmd{File: filepath.Join(dir, "s"), DWARFPackage: filepath.Join(dir, "moved.dwp")},
			[]string{"split dwarf       1 skeleton units, functions from " + filepath.Join(dir, "moved.dwp") + "\n", "index fidelity    full"}},
		{"the package", InspectCmd{File: filepath.Join(dir, "moved.dwp"), NoIndex: true},
			[]string{"dwarf package     this file is one, of 1 split units"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := inspect(c.cmd)
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("want %q in:\n%s", w, out)
				}
			}
		})
	}
}
