package symbolizecmd

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
