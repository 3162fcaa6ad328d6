package procmaps

import "testing"

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

func TestIsReturnAddressOutsideMapping(t *testing.T) {
	tab := NewTable("/proc", NewFileCache(1), nil)
	if tab.IsReturnAddress(1, nil, 0x1000) {
		t.Error("true without a mapping")
	}
	m := &Mapping{Start: 0x1000, End: 0x2000}
	if tab.IsReturnAddress(1, m, 0x1004) || tab.IsReturnAddress(1, m, 0x3000) {
		t.Error("true for an address the mapping cannot hold the call of")
	}
}
