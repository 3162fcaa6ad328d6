package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// synthBuilder fills a builder with the shape DWARF of an optimized C++ binary has: contiguous
// functions, inline instances nested up to depth 4 inside them, a line row every few bytes and
// symbol-table ranges filling the gaps.
func synthBuilder(seed uint64, funcs int) *Builder {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := NewBuilder()
	files := make([]uint32, 64)
	for i := range files {
		files[i] = b.String(fmt.Sprintf("/usr/src/project/module%d/include/file_%d.h", i%7, i))
	}
	names := make([]uint32, funcs/4+8)
	for i := range names {
		names[i] = b.String(fmt.Sprintf("ns%d::Class%d::method_%d(int, std::string const&)", i%13, i%97, i))
	}
	addr := uint64(0x401000)
	var inline func(parent NodeID, lo, hi uint64, depth int)
	inline = func(parent NodeID, lo, hi uint64, depth int) {
		if depth > 4 || hi-lo < 16 {
			return
		}
		for k := r.IntN(3); k > 0; k-- {
			a := lo + uint64(r.IntN(int(hi-lo)))
			e := a + 1 + uint64(r.IntN(int(hi-a)))
			n := b.AddNode(Node{Name: names[r.IntN(len(names))], StartLine: uint32(r.IntN(5000)), Parent: parent,
				CallFile: files[r.IntN(len(files))], CallLine: uint32(1 + r.IntN(5000)), CallColumn: uint32(r.IntN(80))})
			b.AddRange(a, e, n)
			inline(n, a, e, depth+1)
		}
	}
	for i := 0; i < funcs; i++ {
		size := uint64(16 + r.IntN(2048))
		ln := names[r.IntN(len(names))]
		m := fmt.Sprint("method", i)
		linkage := fmt.Sprintf("_ZN2ns5Class%d%sEiRKSs", len(m), m)
		if i%3 == 0 { // named as DWARF names C++ functions: demangled when read
			ln = b.Demangled(linkage)
		}
		n := b.AddNode(Node{Name: ln, LinkageName: b.String(linkage), StartLine: uint32(r.IntN(5000)), Parent: NoParent})
		if r.IntN(20) == 0 {
			b.AddSymbolRange(addr, addr+size, n)
		} else {
			b.AddRange(addr, addr+size, n)
			inline(n, addr, addr+size, 1)
			line := uint32(1 + r.IntN(5000))
			for a := addr; a < addr+size; a += uint64(1 + r.IntN(16)) {
				line = uint32(int64(line) + int64(r.IntN(7)) - 2)
				b.AddLine(a, files[r.IntN(len(files))], line, uint32(r.IntN(60)))
			}
			b.EndSequence(addr + size)
		}
		addr += size + uint64(r.IntN(64))
	}
	b.RaiseFidelity(FidelityFullInlines)
	return b
}

func mustBuild(t testing.TB, b *Builder) *Index {
	t.Helper()
	ix, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// roundTrip encodes ix and decodes it again: the tests ask the decoded index what they ask
// the built one. It returns the decoded index and the encoding.
func roundTrip(t testing.TB, ix *Index) (*Index, []byte) {
	t.Helper()
	data, err := ix.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return back, data
}

func TestMarshalRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		b    func() *Builder
	}{
		{"empty", NewBuilder},
		{"lines only", func() *Builder {
			b := NewBuilder()
			b.AddLine(0x10, b.String("a.c"), 3, 1)
			b.EndSequence(0x20)
			b.RaiseFidelity(FidelityLines)
			return b
		}},
		{"synthetic 1", func() *Builder { return synthBuilder(1, 50) }},
		{"synthetic 2", func() *Builder { return synthBuilder(2, 2000) }},
		{"high addresses", func() *Builder {
			b := NewBuilder()
			n := b.AddNode(Node{Name: b.String("top"), Parent: NoParent})
			b.AddRange(^uint64(0)-0x100, ^uint64(0), n)
			b.AddLine(^uint64(0)-0x100, b.String("x"), 1<<31, 0)
			b.EndSequence(^uint64(0))
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := mustBuild(t, tt.b())
			data, err := ix.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			got, err := Unmarshal(data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normalize(got), normalize(ix)) {
				t.Fatalf("round trip changed the index")
			}
			again, _ := got.MarshalBinary()
			if string(again) != string(data) {
				t.Fatalf("re-encoding differs")
			}
		})
	}
}

// normalize maps nil and empty slices to one form so that DeepEqual compares content.
func normalize(ix *Index) Index {
	c := *ix
	if len(c.iv) == 0 {
		c.iv = nil
	}
	if len(c.ln) == 0 {
		c.ln = nil
	}
	if len(c.on) == 0 {
		c.on = nil
	}
	if len(c.nodes) == 0 {
		c.nodes = nil
	}
	return c
}

// reseal recomputes length and checksum so that a test reaches the payload checks.
func reseal(data []byte) []byte {
	binary.LittleEndian.PutUint64(data[12:], uint64(len(data)-headerSize))
	binary.LittleEndian.PutUint32(data[20:], crc32.Checksum(data[headerSize:], castagnoli))
	return data
}

func TestUnmarshalRejects(t *testing.T) {
	good, err := mustBuild(t, synthBuilder(3, 20)).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func(d []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	payload := func(p ...byte) []byte {
		return reseal(append(append([]byte(nil), good[:headerSize]...), p...))
	}
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name    string
		data    []byte
		version bool
	}{
		{"nil", nil, false},
		{"short header", good[:10], false},
		{"bad magic", mod(func(d []byte) []byte { d[0] = 'X'; return d }), false},
		{"future version", mod(func(d []byte) []byte { d[8] = 99; return d }), true},
		{"flags", mod(func(d []byte) []byte { d[10] = 1; return d }), false},
		{"truncated", good[:len(good)-1], false},
		{"extra byte", append(append([]byte(nil), good...), 0), false},
		{"bit flip", mod(func(d []byte) []byte { d[len(d)/2] ^= 4; return d }), false},
		{"truncated resealed", reseal(append([]byte(nil), good[:len(good)-3]...)), false},
		{"trailing resealed", reseal(append(append([]byte(nil), good...), 0)), false},
		{"empty payload", payload(), false},
		{"bad fidelity", payload(9), false},
		{"huge string count", payload(cat([]byte{3}, uv(1<<40))...), false},
		{"no strings", payload(cat([]byte{3}, uv(0))...), false},
		{"string 0 not empty", payload(cat([]byte{3}, uv(1), uv(1), []byte("x"), uv(0), uv(0), uv(0))...), false},
		{"string longer than input", payload(cat([]byte{3}, uv(2), uv(0), uv(1<<50))...), false},
		{"huge node count", payload(cat([]byte{3}, uv(1), uv(0), uv(0), uv(1<<33))...), false},
		{"parent before node 0", payload(cat([]byte{3}, uv(1), uv(0), uv(0), uv(1), uv(0), uv(0), uv(0), uv(1), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0))...), false},
		{"name out of range", payload(cat([]byte{3}, uv(1), uv(0), uv(0), uv(1), uv(5), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0))...), false},
		{"interval node out of range", payload(cat([]byte{3}, uv(1), uv(0), uv(0), uv(0), uv(1), uv(16), uv(4), uv(0), uv(0), uv(0))...), false},
		{"empty interval", payload(cat([]byte{3}, uv(1), uv(0), uv(0), uv(1), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(1), uv(16), uv(0), uv(0), uv(0), uv(0))...), false},
		{"interval overflow", payload(cat([]byte{3}, uv(1), uv(0), uv(0), uv(1), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(1), uv(^uint64(0)), uv(4), uv(0), uv(0), uv(0))...), false},
		{"line file out of range", payload(cat([]byte{3}, uv(1), uv(0), uv(0), uv(0), uv(0), uv(1), uv(16), uv(7), binary.AppendVarint(nil, 1), uv(0), uv(0))...), false},
		{"line overflow", payload(cat([]byte{3}, uv(1), uv(0), uv(0), uv(0), uv(0), uv(1), uv(16), uv(1), binary.AppendVarint(nil, 1<<40), uv(0), uv(0))...), false},
		{"outer name node out of range", payload(cat([]byte{3}, uv(1), uv(0), uv(0), uv(0), uv(0), uv(0), uv(1), uv(16), uv(4), uv(0))...), false},
		{"outer name overflow", payload(cat([]byte{3}, uv(1), uv(0), uv(0), uv(0), uv(0), uv(0), uv(1), uv(^uint64(0)), uv(4), uv(0))...), false},
		{"demangled name out of range", payload(cat([]byte{3}, uv(2), uv(0), uv(1), []byte("f"), uv(1), uv(2), uv(1), uv(0), uv(0), uv(0), uv(0))...), false},
		{"demangled name with bytes", payload(cat([]byte{3}, uv(2), uv(0), uv(1), []byte("f"), uv(1), uv(1), uv(1), uv(0), uv(0), uv(0), uv(0))...), false},
		{"demangled name of one", payload(cat([]byte{3}, uv(3), uv(0), uv(0), uv(0), uv(2), uv(1), uv(2), uv(1), uv(1), uv(0), uv(0), uv(0), uv(0))...), false},
		{"demangled string 0", payload(cat([]byte{3}, uv(2), uv(0), uv(0), uv(1), uv(0), uv(1), uv(0), uv(0), uv(0), uv(0))...), false},
		{"bad uvarint", payload(cat([]byte{3}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})...), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix, err := Unmarshal(tt.data)
			if err == nil {
				t.Fatalf("accepted: %+v", ix.Stats())
			}
			t.Log(err)
			if tt.version {
				if !errors.Is(err, ErrVersion) {
					t.Fatalf("error %v does not wrap ErrVersion", err)
				}
			} else if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
		})
	}
}

// TestUnmarshalValid checks hand-made payloads the rejection table builds on, so that each
// rejection above fails for its stated reason and not an earlier one.
func TestUnmarshalValid(t *testing.T) {
	good, _ := mustBuild(t, NewBuilder()).MarshalBinary()
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	var p []byte
	for _, part := range [][]byte{{3}, uv(2), uv(0), uv(1), []byte("f"), uv(0), uv(1), uv(1), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(0), uv(1), uv(16), uv(4), uv(0), uv(2), uv(16), uv(4), uv(2), uv(0), binary.AppendVarint(nil, 7), binary.AppendVarint(nil, -7), uv(3), uv(0), uv(0)} {
		p = append(p, part...)
	}
	ix, err := Unmarshal(reseal(append(append([]byte(nil), good[:headerSize]...), p...)))
	if err != nil {
		t.Fatal(err)
	}
	want := []Frame{{Function: "f", File: "f", Line: 7, Column: 3}}
	if got := ix.Lookup(17); !reflect.DeepEqual(got, want) {
		t.Fatalf("Lookup = %+v, want %+v", got, want)
	}
	if got := ix.Lookup(20); got != nil {
		t.Fatalf("Lookup(20) = %+v, want nil", got)
	}
}

// TestUnmarshalAllocBound checks that a tiny input claiming huge tables allocates little.
func TestUnmarshalAllocBound(t *testing.T) {
	good, _ := mustBuild(t, NewBuilder()).MarshalBinary()
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	p := append([]byte{3}, uv(1)...)
	p = append(p, uv(0)...)
	p = append(p, uv(1<<30)...)
	data := reseal(append(append([]byte(nil), good[:headerSize]...), p...))
	allocs := testing.AllocsPerRun(10, func() { _, _ = Unmarshal(data) })
	if allocs > 20 {
		t.Fatalf("%v allocations for a %d-byte input", allocs, len(data))
	}
}

func FuzzUnmarshal(f *testing.F) {
	for seed := uint64(0); seed < 4; seed++ {
		data, err := mustBuild(f, synthBuilder(seed, 1+int(seed)*3)).MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	// testdata/fuzz/FuzzUnmarshal adds encodings of indexes built from real binaries (the
	// C test program of dwarfsym, gcc and clang), written by dwarfsym's TestEncodedSize.
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, err := Unmarshal(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrVersion", err)
			}
			// Fuzzed bytes rarely pass the checksum; retry with a fixed-up header so that
			// the payload decoder is exercised too.
			if len(data) < headerSize {
				return
			}
			d := reseal(append([]byte(nil), data...))
			copy(d, magic[:])
			binary.LittleEndian.PutUint16(d[8:], formatVersion)
			binary.LittleEndian.PutUint16(d[10:], 0)
			if ix, err = Unmarshal(d); err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v does not wrap ErrCorrupt", err)
				}
				return
			}
		}
		for _, a := range []uint64{0, 1, 0x401000, 0x401234, 1 << 40, ^uint64(0)} {
			ix.Lookup(a)
		}
		for _, a := range ix.edgeAddrs() {
			if got, want := ix.Lookup(a), ix.referenceLookup(a); !reflect.DeepEqual(got, want) {
				t.Fatalf("Lookup(%#x) = %+v, reference %+v", a, got, want)
			}
		}
		out, err := ix.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Unmarshal(out); err != nil {
			t.Fatalf("re-encoded index rejected: %v", err)
		}
	})
}

// cpuTime is the process's user+system CPU time. The benchmarks report it per operation next
// to wall time because the machines they run on are shared and wall time varies with the load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchFuncs sizes the benchmark index like a large C++ binary: 20,000 functions, about 10 MB
// of code, 1.2 million line rows.
const benchFuncs = 20000

func BenchmarkLookup(b *testing.B) {
	ix := mustBuild(b, synthBuilder(7, benchFuncs))
	lo, hi := ix.iv[0].start(), ix.iv[len(ix.iv)-1].end()
	r := rand.New(rand.NewPCG(1, 2))
	addrs := make([]uint64, 1<<16)
	for i := range addrs {
		addrs[i] = lo + r.Uint64N(hi-lo)
	}
	var dst []Frame
	b.ReportAllocs()
	b.ResetTimer()
	c := cpuTime()
	for i := 0; i < b.N; i++ {
		dst = ix.AppendLookup(dst[:0], addrs[i&(len(addrs)-1)])
	}
	cpu := cpuTime() - c
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "lookups/cpu-s")
}

func BenchmarkBuild(b *testing.B) {
	b.ReportAllocs()
	var cpu time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		bl := synthBuilder(7, benchFuncs)
		b.StartTimer()
		c := cpuTime()
		if _, err := bl.Build(); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - c
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

func BenchmarkUnmarshal(b *testing.B) {
	data, err := mustBuild(b, synthBuilder(7, benchFuncs)).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	c := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := Unmarshal(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-c).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
