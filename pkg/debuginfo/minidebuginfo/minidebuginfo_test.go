package minidebuginfo

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
)

const prog = `#include <stdio.h>
static __attribute__((noinline)) int hidden_static(int x) { return x * 5; }
__attribute__((noinline, visibility("hidden"))) int local_global(int x) { return hidden_static(x) + 1; }
__attribute__((visibility("default"))) int exported(int x) { return local_global(x); }
int main(int argc, char **argv) { (void)argv; printf("%d\n", exported(argc)); return 0; }
`

// nmNames runs nm with args and returns the defined symbols whose type is in types.
func nmNames(t testing.TB, types string, args ...string) []string {
	out := elfxtest.Run(t, "nm", append([]string{"--format=posix", "--defined-only"}, args...)...)
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (types == "" || strings.Contains(types, f[1])) {
			names = append(names, f[0])
		}
	}
	sort.Strings(names)
	return names
}

// buildMini applies the MiniDebugInfo recipe of Fedora's find-debuginfo to a fresh build of
// src and returns the final binary and the function symbols it was meant to keep.
func buildMini(t testing.TB, dir, src string, gccArgs ...string) (string, []string) {
	elfxtest.Need(t, "gcc", "nm", "objcopy", "strip", "xz")
	bin := elfxtest.CC(t, dir, "prog", src, append([]string{"-g", "-O1"}, gccArgs...)...)
	dyn := map[string]bool{}
	for _, n := range nmNames(t, "", "-D", bin) {
		dyn[n] = true
	}
	var keep []string
	for _, n := range nmNames(t, "TtD", bin) {
		if !dyn[n] {
			keep = append(keep, n)
		}
	}
	keepFile := filepath.Join(dir, "keep_symbols")
	if err := os.WriteFile(keepFile, []byte(strings.Join(keep, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	debug := filepath.Join(dir, "debug")
	mini := filepath.Join(dir, "mini_debuginfo")
	elfxtest.Run(t, "objcopy", "--only-keep-debug", bin, debug)
	elfxtest.Run(t, "objcopy", "-S", "--remove-section", ".gdb_index", "--remove-section", ".comment", "--keep-symbols="+keepFile, debug, mini)
	elfxtest.Run(t, "strip", "--strip-all", "-R", ".comment", bin)
	elfxtest.Run(t, "xz", "-f", mini)
	elfxtest.Run(t, "objcopy", "--add-section", ".gnu_debugdata="+mini+".xz", bin)
	return bin, keep
}

func TestExtractFedoraRecipe(t *testing.T) {
	dir := t.TempDir()
	bin, keep := buildMini(t, dir, prog, "-rdynamic")
	for _, want := range []string{"hidden_static", "local_global"} {
		if !contains(keep, want) {
			t.Fatalf("recipe kept %v, expected %s among them", keep, want)
		}
	}
	f, c, err := elfx.OpenPath(bin, elfx.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := f.Symbols(); !errors.Is(err, elf.ErrNoSymbols) {
		t.Fatalf("outer binary still has .symtab: %v", err)
	}
	inner, err := Extract(f, elfx.DefaultLimits())
	if err != nil || inner == nil {
		t.Fatalf("Extract: %v, %v", inner, err)
	}
	syms, err := inner.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC || elf.ST_TYPE(s.Info) == elf.STT_OBJECT {
			got = append(got, s.Name)
		}
	}
	sort.Strings(got)
	for _, k := range keep {
		if !contains(got, k) {
			t.Errorf("inner .symtab lacks %s (has %v)", k, got)
		}
	}
	if contains(got, "exported") {
		t.Error("exported is in .dynsym and should not be in the MiniDebugInfo")
	}
	if !contains(got, "hidden_static") {
		t.Errorf("inner .symtab %v lacks hidden_static", got)
	}
	// The inner symbols carry the addresses of the full build (kept in dir/debug).
	full, err := elf.Open(filepath.Join(dir, "debug"))
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	fullSyms, err := full.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{}
	for _, s := range fullSyms {
		want[s.Name] = s.Value
	}
	for _, s := range syms {
		if w, ok := want[s.Name]; ok && s.Name != "" && w != s.Value {
			t.Errorf("%s: inner value %#x, full build %#x", s.Name, s.Value, w)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestExtractAbsent(t *testing.T) {
	dir := t.TempDir()
	p := elfxtest.CC(t, dir, "plain", prog)
	f, c, err := elfx.OpenPath(p, elfx.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if inner, err := Extract(f, elfx.DefaultLimits()); inner != nil || err != nil {
		t.Fatalf("Extract = %v, %v; want nil, nil", inner, err)
	}
}

func xzBytes(t *testing.T, data []byte, args ...string) []byte {
	elfxtest.Need(t, "xz")
	cmd := exec.CommandContext(t.Context(), "xz", append([]string{"-c"}, args...)...)
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// setDict rewrites the LZMA2 dictionary byte of the first block header and fixes its CRC.
func setDict(t *testing.T, s []byte, code byte) []byte {
	b := append([]byte(nil), s...)
	h := b[12:]
	hsize := (int(h[0]) + 1) * 4
	// Layout written by xz for one LZMA2 filter: size, flags, id 0x21, props size 1, dict.
	i := bytes.Index(h[:hsize], []byte{0x21, 0x01})
	if i < 0 {
		t.Fatal("no LZMA2 filter in block header")
	}
	h[i+2] = code
	binary.LittleEndian.PutUint32(h[hsize-4:], crc32.ChecksumIEEE(h[:hsize-4]))
	return b
}

func TestDecompressHostile(t *testing.T) {
	payload := bytes.Repeat([]byte("minidebuginfo "), 10000)
	good := xzBytes(t, payload)
	if got, err := Decompress(good, 1<<20); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("good stream: %d bytes, %v", len(got), err)
	}
	padded := append(append([]byte(nil), good...), 0, 0, 0, 0)
	if _, err := Decompress(padded, 1<<20); err != nil {
		t.Errorf("stream padding: %v", err)
	}
	bomb := xzBytes(t, make([]byte, 8<<20))
	cases := []struct {
		name string
		data []byte
		max  int64
		want error
	}{
		{"over the size limit (index checked first)", bomb, 1 << 20, elfx.ErrLimit},
		{"4 GiB dictionary", setDict(t, good, 40), 1 << 20, ErrCorrupt},
		{"1 GiB dictionary", setDict(t, good, 36), 1 << 20, ErrCorrupt},
		{"empty", nil, 1 << 20, ErrCorrupt},
		{"truncated", good[:len(good)-5], 1 << 20, ErrCorrupt},
		{"no footer", good[:len(good)/2], 1 << 20, ErrCorrupt},
		{"bit flip in data", flip(good, 40), 1 << 20, ErrCorrupt},
		{"bit flip in index", flip(good, len(good)-16), 1 << 20, ErrCorrupt},
		{"not xz", payload[:100], 1 << 20, ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Decompress(c.data, c.max); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	// A small dictionary that xz itself chose is fine.
	small := xzBytes(t, payload, "--lzma2=dict=4KiB")
	if _, err := Decompress(small, 1<<20); err != nil {
		t.Errorf("4 KiB dictionary: %v", err)
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x10
	return c
}

func FuzzExtract(f *testing.F) {
	if _, err := exec.LookPath("xz"); err == nil {
		if _, err := exec.LookPath("gcc"); err == nil {
			dir := f.TempDir()
			bin, _ := buildMini(f, dir, elfxtest.Tiny, "-Os", "-nostdlib", "-static")
			f.Add(elfxtest.Read(f, bin))
			f.Add(elfxtest.Read(f, filepath.Join(dir, "mini_debuginfo.xz")))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The input is tried both as a bare xz stream and as an ELF file holding one, so the
		// xz checks get fuzzed without the ELF layer in the way.
		if out, err := Decompress(data, 1<<22); err == nil && len(out) > 1<<22 {
			t.Fatalf("Decompress gave %d bytes over the limit", len(out))
		}
		lim := elfx.Limits{MaxSections: 1000, MaxSectionSize: 1 << 20, MaxDecompressedSize: 1 << 22}
		outer, err := elfx.Open(bytes.NewReader(data), int64(len(data)), lim)
		if err != nil {
			return
		}
		inner, err := Extract(outer, lim)
		if err != nil || inner == nil {
			return
		}
		// Hostile input may fail to decode; only a panic, hang or runaway allocation is a bug.
		_, _ = inner.Symbols()
		_, _ = inner.DWARFSections()
	})
}
