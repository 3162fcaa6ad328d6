package gopclntab

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"slices"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// FuzzLoad patches bytes of a real stripped Go binary and loads it. The input selects a region
// (byte 0: the pclntab, moduledata, .rodata where the inline trees live, the section headers,
// or the whole file), an offset in it (bytes 1-4) and the bytes to write there (the rest).
// Load may fail, but must not panic, hang or allocate without bound, and what it adds must
// build into an index that answers lookups. A Resolver on the same bytes must answer as that
// index does, and must not panic or hang where Load failed.
func FuzzLoad(f *testing.F) {
	_, stripped := buildTestProgram(f)
	raw, err := os.ReadFile(stripped)
	if err != nil {
		f.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		f.Fatal(err)
	}
	type region struct{ off, size uint64 }
	var regions []region
	for _, name := range []string{".gopclntab", ".go.module", ".rodata"} {
		if s := ef.Section(name); s != nil {
			regions = append(regions, region{s.Offset, s.Size})
		}
	}
	shoff := binary.LittleEndian.Uint64(raw[0x28:])
	regions = append(regions, region{shoff, uint64(len(raw)) - shoff}, region{0, uint64(len(raw))})
	text := ef.Section(".text")
	ef.Close()

	seed := func(r byte, off uint32, patch ...byte) []byte {
		b := []byte{r, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[1:], off)
		return append(b, patch...)
	}
	f.Add(seed(0, 0))
	f.Add(seed(0, 8, 0xff, 0xff, 0xff, 0x7f))        // function count
	f.Add(seed(0, 7*8, 0x10))                        // a pclntab offset
	f.Add(seed(0, 0x200000, 0xff, 0xff, 0xff, 0xff)) // deep inside: functab, _func or pc tables
	f.Add(seed(1, 0, 0, 0, 0, 0))                    // moduledata's pcHeader pointer
	f.Add(seed(1, 40*8, 0xff, 0xff))                 // moduledata.gofunc
	f.Add(seed(2, 0x1000, 0xff, 0xff, 0xff, 0xff, 0x80, 0x80))
	f.Add(seed(3, 8*64+0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0)) // a section's size

	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 5 || len(in) > 5+64 {
			return
		}
		r := regions[int(in[0])%len(regions)]
		if r.size == 0 {
			return
		}
		at := r.off + uint64(binary.LittleEndian.Uint32(in[1:]))%r.size
		buf := bytes.Clone(raw)
		copy(buf[at:], in[5:])
		ef, err := elf.NewFile(bytes.NewReader(buf))
		if err != nil {
			return
		}
		var pcs []uint64
		for pc := text.Addr; pc < text.Addr+text.Size; pc += text.Size / 512 {
			pcs = append(pcs, pc)
		}
		b := index.NewBuilder()
		if _, err := Load(ef, b); err != nil {
			resolverAgrees(t, ef, nil, pcs)
			return
		}
		ix, err := b.Build()
		if err != nil {
			t.Fatalf("Build after a successful Load: %v", err)
		}
		resolverAgrees(t, ef, ix, pcs)
	})
}

// resolverAgrees looks pcs up with a Resolver on ef: where Load built ix, the answers must be
// ix's; where it failed (ix nil), the Resolver must still answer without a panic or a hang.
func resolverAgrees(t *testing.T, ef *elf.File, ix *index.Index, pcs []uint64) {
	t.Helper()
	r, err := NewResolver(ef)
	if err != nil {
		if ix != nil {
			t.Fatalf("NewResolver failed where Load did not: %v", err)
		}
		return
	}
	var got, want []index.Frame
	for _, pc := range pcs {
		got = r.AppendLookup(got[:0], pc)
		if ix == nil {
			continue
		}
		if want = ix.AppendLookup(want[:0], pc); !slices.Equal(got, want) {
			t.Fatalf("%#x: resolver %+v, index %+v", pc, got, want)
		}
	}
}

// FuzzLoadSynthetic patches the small tables of synthTable in every format, which runs three
// orders of magnitude faster than a real binary and reaches the layouts of old releases. The
// input: byte 0 selects the format, byte 1 the section, bytes 2-3 the offset, the rest is
// written there.
func FuzzLoadSynthetic(f *testing.F) {
	opts := []synthOpts{
		{ver: ver120}, {ver: ver120, headerNoStart: true}, {ver: ver118}, {ver: ver116},
		{ver: ver12, goVersion: "go1.15.5"},
	}
	f.Add([]byte{0, 1, 8, 0, 0xff})
	f.Add([]byte{2, 1, 0x40, 0, 0x80, 0x80, 0x80})
	f.Add([]byte{3, 2, 0x10, 0, 0xff, 0x7f})
	f.Add([]byte{4, 4, 16, 0, 0xff})
	f.Add([]byte{4, 1, 0x30, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 4 || len(in) > 4+64 {
			return
		}
		ef := synthTable(opts[int(in[0])%len(opts)])
		s := ef.Sections[int(in[1])%len(ef.Sections)]
		data := make([]byte, s.Size)
		if _, err := s.ReadAt(data, 0); err != nil {
			t.Fatal(err)
		}
		at := int(binary.LittleEndian.Uint16(in[2:])) % len(data)
		copy(data[at:], in[4:])
		patched := *s
		patched.ReaderAt = bytes.NewReader(data)
		for i, x := range ef.Sections {
			if x == s {
				ef.Sections[i] = &patched
			}
		}
		var pcs []uint64
		for pc := uint64(synthText) - 0x10; pc < synthText+0x70; pc++ {
			pcs = append(pcs, pc)
		}
		b := index.NewBuilder()
		if _, err := Load(ef, b); err != nil {
			resolverAgrees(t, ef, nil, pcs)
			return
		}
		ix, err := b.Build()
		if err != nil {
			t.Fatalf("Build after a successful Load: %v", err)
		}
		resolverAgrees(t, ef, ix, pcs)
	})
}
