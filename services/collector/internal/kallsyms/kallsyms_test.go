package kallsyms

import (
	"errors"
	"os"
	"strings"
	"testing"
)

const sample = `ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81000100 t do_one
ffffffff81000200 D some_data
ffffffff81000300 W weak_fn
ffffffffc0201000 t ftrace_trampoline	[__builtin__ftrace]
ffffffffc0300000 t ext4_read	[ext4]
ffffffffc0300400 T ext4_write	[ext4]
`

func TestLookup(t *testing.T) {
	tab, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() != 7 {
		t.Errorf("Len = %d, want 7 text symbols", tab.Len())
	}
	tests := []struct {
		addr      uint64
		name, mod string
		start     uint64
		ok        bool
	}{
		{0xffffffff80ffffff, "", "", 0, false},
		{0xffffffff81000000, "_stext", Kernel, 0xffffffff81000000, true},
		{0xffffffff81000050, "_stext", Kernel, 0xffffffff81000000, true},
		{0xffffffff81000100, "do_one", Kernel, 0xffffffff81000100, true},
		{0xffffffff81000250, "do_one", Kernel, 0xffffffff81000100, true}, // data symbols are skipped
		{0xffffffff81000301, "weak_fn", Kernel, 0xffffffff81000300, true},
		{0xffffffffc0300010, "ext4_read", "ext4", 0xffffffffc0300000, true},
		{0xffffffffc0300500, "ext4_write", "ext4", 0xffffffffc0300400, true},
	}
	for _, tt := range tests {
		s, ok := tab.Lookup(tt.addr)
		if ok != tt.ok || s.Name != tt.name || s.Module != tt.mod || (ok && s.Addr != tt.start) {
			t.Errorf("Lookup(%#x) = %+v, %v; want %s [%s] at %#x, %v", tt.addr, s, ok, tt.name, tt.mod, tt.start, tt.ok)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := map[string]string{
		"restricted":  "0000000000000000 T _stext\n0000000000000000 t foo\n",
		"short line":  "ffffffff81000000 T\n",
		"bad address": "xyz T foo\n",
		"bad type":    "ffffffff81000000 TT foo\n",
		"no text":     "ffffffff81000000 D foo\n",
		"huge line":   "ffffffff81000000 T " + strings.Repeat("a", 5000) + "\n",
	}
	for name, in := range tests {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	_, err := Parse(strings.NewReader(tests["restricted"]))
	if !errors.Is(err, ErrRestricted) {
		t.Errorf("restricted: err = %v, want ErrRestricted", err)
	}
}

func TestLoadRunningKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("kallsyms addresses need root")
	}
	tab, err := Load("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() < 1000 {
		t.Errorf("only %d symbols", tab.Len())
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Fuzz(func(t *testing.T, in string) {
		tab, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		tab.Lookup(0)
		tab.Lookup(^uint64(0))
	})
}
