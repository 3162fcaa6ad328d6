package procmaps

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

func TestFollowsCall(t *testing.T) {
	pad := func(tail ...byte) [8]byte {
		var c [8]byte
		for i := range c {
			c[i] = 0x90
		}
		copy(c[8-len(tail):], tail)
		return c
	}
	tests := []struct {
		name string
		code [8]byte
		want bool
	}{
		{"call rel32", pad(0xe8, 0x10, 0x20, 0x00, 0x00), true},
		{"call *%rax", pad(0xff, 0xd0), true},
		{"call *%r11 (REX)", pad(0x41, 0xff, 0xd3), true},
		{"call *0x10(%rax)", pad(0xff, 0x50, 0x10), true},
		{"call *0x10(%rsp) (SIB disp8)", pad(0xff, 0x54, 0x24, 0x10), true},
		{"call *(%rax,%rbx,8)", pad(0xff, 0x14, 0xd8), true},
		{"call *0x601018(,%rax,8)", pad(0xff, 0x14, 0xc5, 0x18, 0x10, 0x60, 0x00), true},
		{"call *rip-relative", pad(0xff, 0x15, 0x00, 0x10, 0x00, 0x00), true},
		{"call *0x100(%rax)", pad(0xff, 0x90, 0x00, 0x01, 0x00, 0x00), true},
		{"jmp *%rax", pad(0xff, 0xe0), false},
		{"ret then nops", pad(0xc3), false},
		{"push rbp; mov rsp,rbp", pad(0x55, 0x48, 0x89, 0xe5), false},
		{"FF /2 of the wrong length", pad(0xff, 0xd0, 0x90), false},
		{"data", [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, false},
	}
	for _, tt := range tests {
		if got := FollowsCall(tt.code); got != tt.want {
			t.Errorf("%s: FollowsCall(% x) = %v, want %v", tt.name, tt.code, got, tt.want)
		}
	}
}

func TestIsLeafReturnOutsideMapping(t *testing.T) {
	tab := NewTable("/proc", NewFileCache(1), nil)
	if tab.IsLeafReturn(1, nil, 0x1000, 0x1000) {
		t.Error("true without a mapping")
	}
	m := &Mapping{Start: 0x1000, End: 0x2000}
	if tab.IsLeafReturn(1, m, 0x1000, 0x1004) || tab.IsLeafReturn(1, m, 0x1000, 0x3000) {
		t.Error("true for an address the mapping cannot hold the call of")
	}
}

func TestDecodeARM64Call(t *testing.T) {
	tests := []struct {
		name string
		insn uint32
		want callSite
	}{
		{"bl +0x100", 0x94000040, callSite{call: true, direct: true, delta: 0x100 - 4}},
		{"bl -0x8", 0x97fffffe, callSite{call: true, direct: true, delta: -8 - 4}},
		{"blr x8", 0xd63f0100, callSite{call: true}},
		{"blraaz x16", 0xd63f0a1f, callSite{call: true}},
		{"blrab x17, sp", 0xd73f0e3f, callSite{call: true}},
		{"b +0x100 (no link)", 0x14000040, callSite{}},
		{"br x16", 0xd61f0200, callSite{}},
		{"ret", 0xd65f03c0, callSite{}},
		{"stp x29, x30, [sp, #-16]!", 0xa9bf7bfd, callSite{}},
	}
	for _, tt := range tests {
		if got := decodeARM64Call(tt.insn); got != tt.want {
			t.Errorf("%s: decodeARM64Call(%#08x) = %+v, want %+v", tt.name, tt.insn, got, tt.want)
		}
	}
}

// TestIsLeafReturnARM64 reads its code from a fake /proc/<pid>/mem: a direct BL at 0x1ffc
// whose return address 0x2000 is the candidate, calling a function at 0x1ffc+imm.
func TestIsLeafReturnARM64(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 0x3000)
	// At 0x1ffc: bl 0x1000 (imm26 = (0x1000-0x1ffc)/4).
	imm := int32(0x1000-0x1ffc) / 4
	binary.LittleEndian.PutUint32(mem[0x1ffc:], 0x94000000|uint32(imm)&0x03ffffff)
	if err := os.WriteFile(filepath.Join(root, "7", "mem"), mem, 0o644); err != nil {
		t.Fatal(err)
	}
	m := &Mapping{Start: 0x100, End: 0x3000}
	tests := []struct {
		name string
		pc   uint64
		want bool
	}{
		{"pc in the called leaf", 0x1010, true},
		{"pc below the called function", 0x0ff0, false},
		{"pc far past the called function's entry", 0x1000 + maxLeafBytes, false},
		// The sampled function itself made the call: the link register is stale.
		{"pc after the call site, past the callee", 0x2010, false},
	}
	for _, tt := range tests {
		tab := NewTable(root, NewFileCache(1), nil)
		tab.arch = "arm64"
		if got := tab.IsLeafReturn(7, m, tt.pc, 0x2000); got != tt.want {
			t.Errorf("%s: IsLeafReturn(pc %#x, ret 0x2000) = %v, want %v", tt.name, tt.pc, got, tt.want)
		}
	}
}
