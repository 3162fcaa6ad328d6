package elfx

import (
	"bytes"
	"compress/zlib"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
)

// variants builds Hello with uncompressed, zlib (gABI), legacy zlib-gnu and zstd DWARF.
func variants(t testing.TB) map[string]string {
	t.Helper()
	elfxtest.Need(t, "gcc", "objcopy")
	dir := t.TempDir()
	plain := elfxtest.CC(t, dir, "plain", elfxtest.Hello, "-g", "-O1")
	out := map[string]string{"plain": plain}
	out["gcc-gz"] = elfxtest.CC(t, dir, "gz", elfxtest.Hello, "-g", "-O1", "-gz=zlib")
	for _, c := range []string{"zlib", "zlib-gnu", "zstd"} {
		p := filepath.Join(dir, c)
		elfxtest.Run(t, "objcopy", "--compress-debug-sections="+c, plain, p)
		out[c] = p
	}
	return out
}

func TestDWARFSectionsAllCompressions(t *testing.T) {
	v := variants(t)
	want := openPath(t, v["plain"])
	wantSecs, err := want.DWARFSections()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"info", "abbrev", "line", "str"} {
		if len(wantSecs[k]) == 0 {
			t.Fatalf("plain build lacks .debug_%s", k)
		}
	}
	for name, path := range v {
		t.Run(name, func(t *testing.T) {
			f := openPath(t, path)
			if !f.HasDWARF() {
				t.Fatal("HasDWARF false")
			}
			secs, err := f.DWARFSections()
			if err != nil {
				t.Fatal(err)
			}
			if len(secs) != len(wantSecs) {
				t.Errorf("got %d sections, want %d", len(secs), len(wantSecs))
			}
			for k, w := range wantSecs {
				if name == "gcc-gz" {
					// A separate compile: compare with debug/elf's own decompression.
					d, err := f.ELF().Section(".debug_" + k).Data()
					if err != nil {
						t.Fatal(err)
					}
					w = d
				}
				if !bytes.Equal(secs[k], w) {
					t.Errorf("section %s differs from the uncompressed build (%d vs %d bytes)", k, len(secs[k]), len(w))
				}
				// A section is held for the whole index build: no room beyond its bytes.
				if cap(secs[k]) != len(secs[k]) {
					t.Errorf("section %s: %d bytes in an array of %d", k, len(secs[k]), cap(secs[k]))
				}
			}
			// debug/dwarf must accept what we hand it and find the functions and lines.
			d, err := f.DWARF()
			if err != nil {
				t.Fatalf("DWARF: %v", err)
			}
			funcs, lines := dwarfSummary(t, d)
			if !funcs["middle"] || !funcs["leaf"] || lines == 0 {
				t.Errorf("DWARF: functions %v, %d line rows", funcs, lines)
			}
		})
	}
	// The compressed variants really are compressed in the way the test means.
	if s := openPath(t, v["zstd"]).Section(".debug_info"); s == nil || s.Flags&elf.SHF_COMPRESSED == 0 {
		t.Error("zstd variant: .debug_info not SHF_COMPRESSED")
	}
	if s := openPath(t, v["zlib-gnu"]).Section(".zdebug_info"); s == nil {
		t.Error("zlib-gnu variant: no .zdebug_info")
	}
}

func dwarfSummary(t *testing.T, d *dwarf.Data) (map[string]bool, int) {
	funcs := map[string]bool{}
	lines := 0
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e == nil {
			break
		}
		switch e.Tag {
		case dwarf.TagSubprogram:
			if n, ok := e.Val(dwarf.AttrName).(string); ok {
				funcs[n] = true
			}
		case dwarf.TagCompileUnit:
			lr, err := d.LineReader(e)
			if err != nil {
				t.Fatal(err)
			}
			var le dwarf.LineEntry
			for lr != nil && lr.Next(&le) == nil {
				lines++
			}
		}
	}
	return funcs, lines
}

func openPath(t testing.TB, path string) *File {
	t.Helper()
	f, c, err := OpenPath(path, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return f
}

func TestLoadsAndSections(t *testing.T) {
	v := variants(t)
	f := openPath(t, v["plain"])
	if len(f.Loads()) == 0 {
		t.Fatal("no PT_LOAD")
	}
	text, err := f.SectionData(".text")
	if err != nil || len(text) == 0 {
		t.Fatalf(".text: %d bytes, %v", len(text), err)
	}
	if _, err := f.SectionData(".nope"); !errors.Is(err, ErrNoSection) {
		t.Errorf("missing section: %v", err)
	}
	if _, err := f.SectionData(".bss"); !errors.Is(err, ErrNoData) {
		t.Errorf(".bss: %v", err)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range syms {
		found = found || s.Name == "middle"
	}
	if !found {
		t.Error("symbol middle not in .symtab")
	}
}

// patch returns a copy of b with v written at off.
func patch(b []byte, off int, v any) []byte {
	c := append([]byte(nil), b...)
	var w bytes.Buffer
	if err := binary.Write(&w, binary.LittleEndian, v); err != nil {
		// Only fixed-size values are patched in; anything else is a mistake in the test.
		panic(fmt.Sprintf("patch %T: %v", v, err))
	}
	copy(c[off:], w.Bytes())
	return c
}

func TestHostileHeaders(t *testing.T) {
	v := variants(t)
	plain := elfxtest.Read(t, v["plain"])
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrNotELF},
		{"text", []byte("#!/bin/sh\necho hi\n"), ErrNotELF},
		{"truncated header", plain[:40], ErrTruncated},
		{"truncated section table", plain[:len(plain)-100], ErrTruncated},
		{"huge shnum via section 0", patch(patch(plain, 60, uint16(0)), int(binary.LittleEndian.Uint64(plain[40:]))+32, uint64(1<<30)), ErrLimit},
		{"shoff past end", patch(plain, 40, uint64(1<<40)), ErrTruncated},
		{"phoff past end", patch(plain, 32, uint64(1<<40)), ErrTruncated},
		{"bad class", patch(plain, 4, uint8(9)), ErrNotELF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Open(bytes.NewReader(c.data), int64(len(c.data)), DefaultLimits())
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if f != nil {
				// Only a panic would fail here: hostile sections may well not decode.
				_, _ = f.DWARFSections()
			}
		})
	}
	lim := DefaultLimits()
	lim.MaxSections = 5
	if _, err := Open(bytes.NewReader(plain), int64(len(plain)), lim); !errors.Is(err, ErrLimit) {
		t.Errorf("section limit: %v", err)
	}
}

// withSectionHeader rewrites section sec's header fields of an ELF64 LE file.
func withSectionHeader(t *testing.T, b []byte, name string, edit func(h *elf.Section64)) []byte {
	t.Helper()
	ef, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	shoff := binary.LittleEndian.Uint64(b[40:])
	for i, s := range ef.Sections {
		if s.Name != name {
			continue
		}
		off := int(shoff) + i*64
		var h elf.Section64
		if err := binary.Read(bytes.NewReader(b[off:off+64]), binary.LittleEndian, &h); err != nil {
			t.Fatalf("section header %s: %v", name, err)
		}
		edit(&h)
		return patch(b, off, h)
	}
	t.Fatalf("no section %s", name)
	return nil
}

func TestHostileCompressedSections(t *testing.T) {
	v := variants(t)
	zl := elfxtest.Read(t, v["zlib"])
	zs := elfxtest.Read(t, v["zstd"])
	gnu := elfxtest.Read(t, v["zlib-gnu"])
	chdrSize := func(b []byte, size uint64) []byte {
		f, err := Open(bytes.NewReader(b), int64(len(b)), DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		s := f.Section(".debug_info")
		return patch(b, int(s.Offset)+8, size)
	}
	zdebugSize := func(b []byte, size uint64) []byte {
		f, err := Open(bytes.NewReader(b), int64(len(b)), DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		s := f.Section(".zdebug_info")
		c := append([]byte(nil), b...)
		binary.BigEndian.PutUint64(c[s.Offset+4:], size)
		return c
	}
	cases := []struct {
		name    string
		data    []byte
		section string
		want    error
	}{
		{"zlib claims 1 TiB", chdrSize(zl, 1<<40), ".debug_info", ErrLimit},
		{"zstd claims 1 TiB", chdrSize(zs, 1<<40), ".debug_info", ErrLimit},
		{"zlib claims 3 GiB from a few bytes", chdrSize(zl, 3<<30), ".debug_info", ErrCompression},
		{"zstd claims 3 GiB", chdrSize(zs, 3<<30), ".debug_info", ErrCompression},
		{"zlib claims one byte less", chdrSize(zl, 10), ".debug_info", ErrCompression},
		{"zdebug claims 1 TiB", zdebugSize(gnu, 1<<40), ".zdebug_info", ErrLimit},
		{"zdebug claims too much", zdebugSize(gnu, 1<<20), ".zdebug_info", ErrCompression},
		{"section size past end", withSectionHeader(t, zl, ".debug_info", func(h *elf.Section64) { h.Size = 1 << 40 }), ".debug_info", ErrLimit},
		{"section offset past end", withSectionHeader(t, zl, ".debug_info", func(h *elf.Section64) { h.Off = 1 << 40 }), ".debug_info", ErrTruncated},
		{"section runs past end", withSectionHeader(t, zl, ".debug_info", func(h *elf.Section64) { h.Size = uint64(len(zl)) }), ".debug_info", ErrTruncated},
		{"tiny compressed section", withSectionHeader(t, zl, ".debug_info", func(h *elf.Section64) { h.Size = 5 }), ".debug_info", ErrCompression},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Open(bytes.NewReader(c.data), int64(len(c.data)), DefaultLimits())
			if err != nil {
				// debug/elf reads the compression header of SHF_COMPRESSED sections in NewFile.
				if !errors.Is(err, ErrTruncated) {
					t.Fatalf("Open: %v, want %v", err, ErrTruncated)
				}
				return
			}
			_, err = f.SectionData(c.section)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if _, err := f.DWARFSections(); err == nil {
				t.Error("DWARFSections: no error")
			}
		})
	}
}

func TestDecompressLimit(t *testing.T) {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	if _, err := w.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := &File{lim: Limits{MaxDecompressedSize: 1 << 19}}
	if _, err := f.decompress(".debug_x", elf.COMPRESS_ZLIB, buf.Bytes(), 1<<20); !errors.Is(err, ErrLimit) {
		t.Errorf("over limit: %v", err)
	}
	f.lim.MaxDecompressedSize = 1 << 20
	got, err := f.decompress(".debug_x", elf.COMPRESS_ZLIB, buf.Bytes(), 1<<20)
	if err != nil || len(got) != 1<<20 {
		t.Errorf("at limit: %d bytes, %v", len(got), err)
	}

	// A zstd frame whose header asks for a 512 MiB window is refused before the window is
	// allocated. The encoder sizes the window to the input, so the header is patched: the
	// window descriptor follows the magic and the frame header descriptor.
	payload := bytes.Repeat([]byte("zstd window "), 1000)
	enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(1<<20), zstd.WithSingleSegment(false))
	if err != nil {
		t.Fatal(err)
	}
	frame := enc.EncodeAll(payload, nil)
	if frame[4]&0x20 != 0 {
		t.Fatal("single-segment frame has no window descriptor")
	}
	f.lim.MaxDecompressedSize = 4 << 30
	got, err = f.decompress(".debug_x", elf.COMPRESS_ZSTD, frame, uint64(len(payload)))
	if err != nil || !bytes.Equal(got, payload) {
		t.Errorf("1 MiB window: %d bytes, %v", len(got), err)
	}
	// The claimed size is a lie: the stream ends early.
	if _, err := f.decompress(".debug_x", elf.COMPRESS_ZSTD, frame, 3<<30); !errors.Is(err, errSizeMismatch) {
		t.Errorf("lying size: %v", err)
	}
	big := append([]byte(nil), frame...)
	big[5] = (29 - 10) << 3
	if _, err := f.decompress(".debug_x", elf.COMPRESS_ZSTD, big, 3<<30); !errors.Is(err, ErrCompression) || !strings.Contains(err.Error(), "window") {
		t.Errorf("512 MiB window: %v", err)
	}
}

var (
	seedOnce sync.Once
	seeds    [][]byte
)

func fuzzSeeds(t testing.TB) [][]byte {
	seedOnce.Do(func() {
		if os.Getenv("PROFSYM_NO_GCC") != "" {
			return
		}
		dir, err := os.MkdirTemp("", "elfx-fuzz")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		tiny := elfxtest.CC(t, dir, "tiny", elfxtest.Tiny, "-g", "-Os", "-nostdlib", "-static", "-Wl,--build-id")
		tz := elfxtest.CC(t, dir, "tinyz", elfxtest.Tiny, "-g", "-Os", "-nostdlib", "-static", "-gz=zlib")
		elfxtest.Run(t, "objcopy", "--compress-debug-sections=zstd", tiny, filepath.Join(dir, "tinyzstd"))
		elfxtest.Run(t, "objcopy", "--compress-debug-sections=zlib-gnu", tiny, filepath.Join(dir, "tinygnu"))
		var t32 string
		if exec32(t, dir) {
			t32 = elfxtest.CC(t, dir, "tiny32", elfxtest.Tiny, "-m32", "-g", "-Os", "-nostdlib", "-static")
		}
		for _, p := range []string{tiny, tz, filepath.Join(dir, "tinyzstd"), filepath.Join(dir, "tinygnu"), t32} {
			if p != "" {
				seeds = append(seeds, elfxtest.Read(t, p))
			}
		}
	})
	return seeds
}

// exec32 reports whether gcc can build 32-bit objects here (multilib is optional).
func exec32(t testing.TB, dir string) bool {
	p := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(p, []byte("int x;"), 0o644); err != nil {
		t.Fatal(err)
	}
	return runOK(t.Context(), "gcc", "-m32", "-c", "-o", filepath.Join(dir, "probe.o"), p)
}

func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := Limits{MaxSections: 1000, MaxSectionSize: 1 << 20, MaxDecompressedSize: 1 << 22}
		ef, err := Open(bytes.NewReader(data), int64(len(data)), lim)
		if err != nil {
			return
		}
		// Hostile input may fail anywhere; only a panic, hang or runaway allocation is a bug.
		for _, s := range ef.ELF().Sections {
			_, _ = ef.SectionDataOf(s)
		}
		_, _ = ef.DWARF()
		ef.HasDWARF()
		ef.Loads()
		_, _ = ef.Symbols()
		_, _ = ef.DynamicSymbols()
		for _, p := range ef.ELF().Progs {
			_, _ = ef.ProgData(p)
		}
	})
}
