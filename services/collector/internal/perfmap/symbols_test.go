package perfmap

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Symbol
		err  bool
	}{
		// Node.js (--perf-basic-prof): no 0x, names with spaces.
		{line: "7f6ecc006040 1e0 JS:*hotLoop /tmp/jt.js:1:17\n", want: Symbol{0x7f6ecc006040, 0x1e0, "JS:*hotLoop /tmp/jt.js:1:17"}},
		{line: "18c4000 300 Builtin:DeoptimizationEntry_Eager", want: Symbol{0x18c4000, 0x300, "Builtin:DeoptimizationEntry_Eager"}},
		// The JVM (Compiler.perfmap): 0x and zero padding.
		{line: "0x00007fd940ec7600 0x0000000000000178 long ProfsymJit.profsymHotMethod(long)", want: Symbol{0x7fd940ec7600, 0x178, "long ProfsymJit.profsymHotMethod(long)"}},
		// Python 3.12 (-X perf).
		{line: "7f3a1c0d0000 b py::loop:/srv/app.py\r\n", want: Symbol{0x7f3a1c0d0000, 0xb, "py::loop:/srv/app.py"}},
		{line: "  ABCDEF\t10\t  upper case hex, tabs  ", want: Symbol{0xabcdef, 0x10, "upper case hex, tabs"}},
		{line: "fffffffffffffffe 1 last byte", want: Symbol{0xfffffffffffffffe, 1, "last byte"}},
		{line: "ffffffffffffffff 1 wraps", err: true}, // ends past the address space
		{line: "", err: true},
		{line: "\n", err: true},
		{line: "7f00 10", err: true},                  // no name
		{line: "7f00 10   ", err: true},               // blank name
		{line: "7f00", err: true},                     // one field
		{line: "xyz 10 name", err: true},              // start not hex
		{line: "7f00 -10 name", err: true},            // signed size
		{line: "+7f00 10 name", err: true},            // signed start
		{line: "7f_00 10 name", err: true},            // underscores
		{line: "0x 10 name", err: true},               // 0x alone
		{line: "7f00 0 empty", err: true},             // no bytes
		{line: "1ffffffffffffffff 1 big", err: true},  // beyond 64 bits
		{line: "ffffffffffffffff 2 wraps", err: true}, // end beyond 64 bits
		{line: "7f00 10\x00 name", err: true},         // NUL in a number
	} {
		got, err := ParseLine([]byte(tc.line))
		if (err != nil) != tc.err {
			t.Errorf("ParseLine(%q) error %v, want error %v", tc.line, err, tc.err)
			continue
		}
		if !tc.err && got != tc.want {
			t.Errorf("ParseLine(%q) = %+v, want %+v", tc.line, got, tc.want)
		}
	}
	if _, err := ParseLine([]byte("7f00 0 x")); !errors.Is(err, ErrEmpty) {
		t.Errorf("a zero size: %v, want ErrEmpty", err)
	}
}

func FuzzParseLine(f *testing.F) {
	for _, seed := range []string{
		"7f6ecc006040 1e0 JS:*hotLoop /tmp/jt.js:1:17\n",
		"0x00007fd940ec7600 0x0000000000000178 long ProfsymJit.profsymHotMethod(long)",
		"7f3a1c0d0000 b py::loop:/srv/app.py\r\n",
		"ffffffffffffffff 1 x",
		"ffffffffffffffff 2 x",
		"0x 0x name",
		"\t \t",
		"1 1 \xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		s, err := ParseLine(line)
		if err != nil {
			return
		}
		if s.Size == 0 || s.Start+s.Size < s.Start || s.Name == "" || strings.TrimSpace(s.Name) != s.Name {
			t.Fatalf("ParseLine(%q) = %+v: an empty, wrapping or unnamed symbol accepted", line, s)
		}
		// What was parsed prints back to a line that parses the same.
		again, err := ParseLine([]byte(fmt.Sprintf("%x %x %s", s.Start, s.Size, s.Name)))
		if err != nil || again != s {
			t.Fatalf("ParseLine(%q) = %+v, printed back %+v, %v", line, s, again, err)
		}
	})
}

// sym is a compact symbol for tables of tests.
func sym(start, size uint64, name string) Symbol { return Symbol{start, size, name} }

func TestMapAddLookup(t *testing.T) {
	type probe struct {
		addr uint64
		want string // "" for none
	}
	for _, tc := range []struct {
		name    string
		batches [][]Symbol
		probes  []probe
		entries int
	}{
		{
			name:    "disjoint, out of order",
			batches: [][]Symbol{{sym(0x300, 0x10, "c"), sym(0x100, 0x10, "a")}, {sym(0x200, 0x10, "b")}},
			probes:  []probe{{0x100, "a"}, {0x10f, "a"}, {0x110, ""}, {0x205, "b"}, {0x30f, "c"}, {0xff, ""}, {0x310, ""}},
			entries: 3,
		},
		{
			name:    "same start: the later one",
			batches: [][]Symbol{{sym(0x100, 0x10, "old"), sym(0x100, 0x20, "new")}},
			probes:  []probe{{0x100, "new"}, {0x11f, "new"}},
			entries: 1,
		},
		{
			name:    "same start in a later read",
			batches: [][]Symbol{{sym(0x100, 0x20, "old")}, {sym(0x100, 0x10, "new")}},
			// The later, shorter code owns its bytes; past them the old code's rest remains.
			probes:  []probe{{0x100, "new"}, {0x10f, "new"}, {0x110, "old"}, {0x11f, "old"}, {0x120, ""}},
			entries: 2,
		},
		{
			name:    "a later symbol inside an earlier one splits it",
			batches: [][]Symbol{{sym(0x100, 0x100, "outer")}, {sym(0x140, 0x10, "inner")}},
			probes:  []probe{{0x13f, "outer"}, {0x140, "inner"}, {0x14f, "inner"}, {0x150, "outer"}, {0x1ff, "outer"}},
			entries: 3,
		},
		{
			name:    "an earlier symbol inside a later one is gone",
			batches: [][]Symbol{{sym(0x140, 0x10, "inner"), sym(0x100, 0x100, "outer")}},
			probes:  []probe{{0x140, "outer"}, {0x100, "outer"}},
			entries: 1,
		},
		{
			name:    "partial overlaps both ways",
			batches: [][]Symbol{{sym(0x100, 0x20, "a"), sym(0x110, 0x20, "b"), sym(0x0f0, 0x18, "c")}},
			probes:  []probe{{0x0f0, "c"}, {0x107, "c"}, {0x108, "a"}, {0x10f, "a"}, {0x110, "b"}, {0x12f, "b"}, {0x130, ""}},
			entries: 3,
		},
		{
			name:    "adjacent",
			batches: [][]Symbol{{sym(0x100, 0x10, "a"), sym(0x110, 0x10, "b")}},
			probes:  []probe{{0x10f, "a"}, {0x110, "b"}},
			entries: 2,
		},
		{
			name:    "top of the address space",
			batches: [][]Symbol{{sym(0xffffffffffffff00, 0xff, "top")}},
			probes:  []probe{{0xfffffffffffffffe, "top"}, {0xffffffffffffffff, ""}},
			entries: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Map
			for _, b := range tc.batches {
				m.Add(b)
			}
			for _, p := range tc.probes {
				got, ok := m.Lookup(p.addr)
				if ok != (p.want != "") || got != p.want {
					t.Errorf("Lookup(%#x) = %q, %v; want %q", p.addr, got, ok, p.want)
				}
			}
			if m.Len() != tc.entries {
				t.Errorf("%d entries, want %d: %+v", m.Len(), tc.entries, m.entries)
			}
			checkSorted(t, &m)
		})
	}
}

func checkSorted(t *testing.T, m *Map) {
	t.Helper()
	var bytes int64
	for i, e := range m.entries {
		if e.start >= e.end || (i > 0 && m.entries[i-1].end > e.start) {
			t.Fatalf("entries not sorted and disjoint at %d: %+v", i, m.entries)
		}
		bytes += e.cost()
	}
	if bytes != m.Bytes() {
		t.Fatalf("Bytes() = %d, entries cost %d", m.Bytes(), bytes)
	}
}

// TestMapPaintMatchesNaive compares the sweep with the rule it implements, point by point:
// an address belongs to the latest symbol holding it.
func TestMapPaintMatchesNaive(t *testing.T) {
	seed := uint64(1)
	next := func(n uint64) uint64 {
		seed = seed*6364136223846793005 + 1442695040888963407
		return (seed >> 33) % n
	}
	for round := 0; round < 200; round++ {
		var m Map
		var all []Symbol
		for b := 0; b < 1+int(next(4)); b++ {
			var batch []Symbol
			for i := 0; i < 1+int(next(12)); i++ {
				batch = append(batch, sym(next(200), 1+next(40), fmt.Sprintf("s%d.%d", b, i)))
			}
			m.Add(batch)
			all = append(all, batch...)
		}
		checkSorted(t, &m)
		for addr := uint64(0); addr < 260; addr++ {
			want := ""
			for _, s := range all {
				if s.Start <= addr && addr < s.Start+s.Size {
					want = s.Name
				}
			}
			if got, _ := m.Lookup(addr); got != want {
				t.Fatalf("round %d: Lookup(%d) = %q, want %q (symbols %v)", round, addr, got, want, all)
			}
		}
	}
}

func TestMapShrink(t *testing.T) {
	var m Map
	m.Add([]Symbol{sym(0x100, 0x10, "first"), sym(0x200, 0x10, "second")})
	m.Add([]Symbol{sym(0x300, 0x10, "third"), sym(0x105, 0x2, "fourth")}) // splits "first"
	one := int64(entryOverhead + len("third"))
	if n := m.Shrink(m.Bytes()); n != 0 {
		t.Errorf("Shrink to the current size dropped %d", n)
	}
	// Room for the two latest symbols: "first" (two pieces) and "second" go.
	if n := m.Shrink(2*one + 1); n != 2 {
		t.Errorf("Shrink dropped %d symbols, want 2", n)
	}
	for addr, want := range map[uint64]string{0x100: "", 0x105: "fourth", 0x200: "", 0x300: "third"} {
		if got, _ := m.Lookup(addr); got != want {
			t.Errorf("after Shrink, Lookup(%#x) = %q, want %q", addr, got, want)
		}
	}
	checkSorted(t, &m)
	if n := m.Shrink(0); n != 2 || m.Len() != 0 || m.Bytes() != 0 {
		t.Errorf("Shrink(0) dropped %d, left %d entries of %d bytes", n, m.Len(), m.Bytes())
	}
}
