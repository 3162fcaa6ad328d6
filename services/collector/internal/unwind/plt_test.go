package unwind

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/cfi"
	"github.com/profsym/profsym/pkg/testsupport"
)

func TestPLTRows(t *testing.T) {
	header := make([]byte, 64)
	binary.LittleEndian.PutUint32(header[0:], stpX16X30)
	bti := make([]byte, 64)
	binary.LittleEndian.PutUint32(bti[0:], 0xd503245f) // bti c
	binary.LittleEndian.PutUint32(bti[4:], stpX16X30)
	saved := func(pc uint64) cfi.Row {
		return cfi.Row{PC: pc, CFA: cfi.CFASP, CFAOffset: 16, RA: cfi.RegOffset, RAOffset: -8}
	}
	stub := func(pc uint64) cfi.Row { return cfi.Row{PC: pc, CFA: cfi.CFASP} }
	tests := []struct {
		name       string
		code       []byte
		withHeader bool
		want       []cfi.Row
	}{
		{"header saves x30 first", header, true, []cfi.Row{saved(0x1004), stub(0x1020)}},
		{"BTI header", bti, true, []cfi.Row{stub(0x1000), saved(0x1008), stub(0x1020)}},
		{"no stp: all stubs", make([]byte, 64), true, []cfi.Row{stub(0x1000)}},
		{".iplt has no header", header, false, []cfi.Row{stub(0x1000)}},
	}
	for _, tt := range tests {
		got := pltRows(0x1000, tt.code, tt.withHeader)
		if len(got) != len(tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: row %d = %v, want %v", tt.name, i, got[i], tt.want[i])
			}
		}
	}
}

// TestAArch64PLT builds the table of a dynamically linked arm64 program: its PLT, which the
// CFI does not describe, gets stub rows, and the rows around it stay as they were.
func TestAArch64PLT(t *testing.T) {
	testsupport.NeedTools(t, "aarch64-linux-gnu-gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	if err := os.WriteFile(src, []byte("#include <stdio.h>\n#include <stdlib.h>\nint main(int c, char **v) { char *p = malloc(8); printf(\"%p %d\\n\", p, atoi(v[0])); free(p); return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "p")
	if out, err := exec.CommandContext(t.Context(), "aarch64-linux-gnu-gcc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("aarch64-linux-gnu-gcc: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := cfi.Build(f)
	if err != nil {
		t.Fatal(err)
	}
	plt := f.Section(".plt")
	if plt == nil {
		t.Fatal("no .plt")
	}
	if r, _ := tab.Lookup(plt.Addr + 40); r.CFA != cfi.CFAUndefined {
		t.Fatalf("the compiler's CFI covers the PLT (%v): nothing to test", r)
	}
	before := append([]cfi.Row(nil), tab.Rows...)
	addAArch64PLT(tab, f)
	for a := plt.Addr + aarch64PLTHeader; a < plt.Addr+plt.Size; a += 4 {
		if r, _ := tab.Lookup(a); r.CFA != cfi.CFASP || r.CFAOffset != 0 || r.RA != cfi.RegSame {
			t.Fatalf("PLT stub at %#x: %v, want CFA = SP with the return address in x30", a, r)
		}
	}
	if r, _ := tab.Lookup(plt.Addr + 8); r.CFAOffset != 16 || r.RA != cfi.RegOffset || r.RAOffset != -8 {
		t.Errorf("PLT header after its stp: %v, want CFA = SP+16, x30 at CFA-8", r)
	}
	// Every address outside the PLT has the rule it had.
	orig := &cfi.Table{Rows: before}
	for _, r := range before {
		for _, a := range []uint64{r.PC, r.PC + 2} {
			if a >= plt.Addr && a < plt.Addr+plt.Size {
				continue
			}
			w, _ := orig.Lookup(a)
			g, _ := tab.Lookup(a)
			w.PC, g.PC = 0, 0
			if w != g {
				t.Fatalf("at %#x: %v, was %v", a, g, w)
			}
		}
	}
	// Encoded, the stubs take the return address from the link register.
	enc := encode(tab)
	found := false
	for _, r := range enc.rows {
		if uint64(r.PC)+enc.base == plt.Addr+aarch64PLTHeader {
			found = r.RARule == raLink && r.CFARule == cfaSP
		}
	}
	if !found {
		t.Error("no encoded stub row with the return address in the link register")
	}
}
