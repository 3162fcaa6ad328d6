package gopclntab

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

func TestParseMagic(t *testing.T) {
	tests := []struct {
		name    string
		hdr     []byte
		want    format
		wantErr bool
	}{
		{"go1.20 little endian", []byte{0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8}, ver120, false},
		{"go1.18 big endian", []byte{0xff, 0xff, 0xff, 0xf0, 0, 0, 4, 8}, ver118, false},
		{"go1.16", []byte{0xfa, 0xff, 0xff, 0xff, 0, 0, 2, 4}, ver116, false},
		{"go1.2", []byte{0xfb, 0xff, 0xff, 0xff, 0, 0, 1, 8}, ver12, false},
		{"unknown magic", []byte{0xf2, 0xff, 0xff, 0xff, 0, 0, 1, 8}, 0, true},
		{"bad padding", []byte{0xf1, 0xff, 0xff, 0xff, 1, 0, 1, 8}, 0, true},
		{"bad quantum", []byte{0xf1, 0xff, 0xff, 0xff, 0, 0, 3, 8}, 0, true},
		{"bad pointer size", []byte{0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 2}, 0, true},
		{"short", []byte{0xf1, 0xff}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := parseMagic(tc.hdr)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("parseMagic = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
		})
	}
}

// pcvalue encodes (value, pc delta) steps the way the Go linker does.
func pcvalue(quantum uint32, steps ...[2]int32) []byte {
	var out []byte
	prev := int32(-1)
	for _, s := range steps {
		d := s[0] - prev
		prev = s[0]
		u := uint32(d) << 1
		if d < 0 {
			u = uint32(^d)<<1 | 1
		}
		out = binary.AppendUvarint(out, uint64(u))
		out = binary.AppendUvarint(out, uint64(uint32(s[1])/quantum))
	}
	return append(out, 0)
}

func TestDecodePCValue(t *testing.T) {
	tests := []struct {
		name    string
		tab     []byte
		limit   uint64
		want    []run
		wantEnd uint64
		wantErr bool
	}{
		{
			name:  "three runs",
			tab:   pcvalue(1, [2]int32{10, 4}, [2]int32{12, 6}, [2]int32{9, 2}),
			limit: 0x1100, want: []run{{0x1000, 10}, {0x1004, 12}, {0x100a, 9}}, wantEnd: 0x100c,
		},
		{
			name:  "negative value",
			tab:   pcvalue(1, [2]int32{-1, 3}, [2]int32{0, 5}),
			limit: 0x1100, want: []run{{0x1000, -1}, {0x1003, 0}}, wantEnd: 0x1008,
		},
		{name: "runs past the limit", tab: pcvalue(1, [2]int32{1, 0x200}), limit: 0x1100, wantErr: true},
		{name: "truncated varint", tab: []byte{0x80}, limit: 0x1100, wantErr: true},
		{name: "unterminated", tab: pcvalue(1, [2]int32{1, 4})[:2], limit: 0x1100, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := &table{quantum: 1, pctab: tc.tab, steps: 1 << 20}
			got, end, err := tb.decodePCValue(nil, 0, 0x1000, tc.limit)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if !reflect.DeepEqual(got, tc.want) || end != tc.wantEnd {
				t.Fatalf("got %v end %#x, want %v end %#x", got, end, tc.want, tc.wantEnd)
			}
			for _, r := range tc.want {
				if v := valueAt(got, end, r.pc); v != r.val {
					t.Errorf("valueAt(%#x) = %d, want %d", r.pc, v, r.val)
				}
			}
			if v := valueAt(got, end, end); v != -1 {
				t.Errorf("valueAt(end) = %d, want -1", v)
			}
		})
	}
}

// TestCorruptHeaders patches one field of a real pclntab at a time: each gives an error that
// wraps ErrCorrupt, never a panic.
func TestCorruptHeaders(t *testing.T) {
	_, stripped := buildTestProgram(t)
	raw, err := os.ReadFile(stripped)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	s := pclntabSection(f)
	base := int(s.Offset)
	tests := []struct {
		name string
		off  int // in the pclntab
		val  uint64
	}{
		{"function count", 8, 1 << 40},
		{"function count just too big", 8, 1 << 21},
		{"funcname offset", 8 + 3*8, 1 << 40},
		{"cutab offset", 8 + 4*8, s.Size + 1},
		{"pctab offset", 8 + 6*8, s.Size - 1},
		{"pclntable offset", 8 + 7*8, s.Size - 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf := bytes.Clone(raw)
			binary.LittleEndian.PutUint64(buf[base+tc.off:], tc.val)
			ef, err := elf.NewFile(bytes.NewReader(buf))
			if err != nil {
				t.Fatal(err)
			}
			b := index.NewBuilder()
			if _, err := Load(ef, b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load = %v, want ErrCorrupt", err)
			}
			if b.NumNodes() != 0 {
				t.Fatalf("a failed Load added %d nodes", b.NumNodes())
			}
		})
	}
}

func TestPresent(t *testing.T) {
	full, stripped := buildTestProgram(t)
	for _, p := range []string{full, stripped} {
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if !Present(f) {
			t.Errorf("%s: Present = false", p)
		}
		f.Close()
	}
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "c.c")
	if err := os.WriteFile(src, []byte("int main(void){return 0;}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "c")
	if b, err := exec.CommandContext(t.Context(), "cc", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if Present(f) {
		t.Error("a C binary has no pclntab")
	}
	if _, err := Load(f, index.NewBuilder()); err == nil {
		t.Error("Load of a C binary succeeded")
	}
}

// TestLinkModes checks binaries from every linker layout: internal and external linking,
// position-dependent and independent. Each stripped binary must agree with its DWARF twin.
func TestLinkModes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds eight binaries")
	}
	haveCC := exec.CommandContext(t.Context(), "cc", "--version").Run() == nil
	tests := []struct {
		name      string
		flags     []string
		cgo       bool
		toolchain string
	}{
		{"pie internal", []string{"-buildmode=pie"}, false, ""},
		{"exe external", []string{"-ldflags=-linkmode=external"}, true, ""},
		{"pie external", []string{"-buildmode=pie", "-ldflags=-linkmode=external"}, true, ""},
		// Releases before 1.26 keep moduledata in .noptrdata and textStart in the header.
		{"go1.24 exe", nil, false, "go1.24.0"},
		{"go1.24 pie", []string{"-buildmode=pie"}, false, "go1.24.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cgo && !haveCC {
				t.Skip("no C compiler for external linking")
			}
			var env []string
			if tc.toolchain != "" {
				// Only a toolchain already in the module cache: tests do not download.
				env = []string{"GOTOOLCHAIN=" + tc.toolchain, "GOPROXY=off"}
				cmd := exec.CommandContext(t.Context(), "go", "version")
				cmd.Env = append(os.Environ(), env...)
				if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), tc.toolchain+" ") {
					t.Skipf("toolchain %s not in the module cache", tc.toolchain)
				}
			}
			full, stripped := buildVariant(t, tc.flags, tc.cgo, env...)
			chainRate, lineRate := compareBinaries(t, full, stripped, 2000, "main.")
			if chainRate < 0.999 || lineRate < 0.995 {
				t.Errorf("agreement %.4f chains, %.4f file:line", chainRate, lineRate)
			}
		})
	}
}

// buildVariant builds testProgram with flags, once as is and once with -s -w added to the
// linker flags.
func buildVariant(t *testing.T, flags []string, cgo bool, env ...string) (full, stripped string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(testProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/pcltest\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cgoEnv := "CGO_ENABLED=0"
	if cgo {
		cgoEnv = "CGO_ENABLED=1"
	}
	build := func(out string, strip bool) {
		var args []string
		ld := ""
		for _, f := range flags {
			if v, ok := strings.CutPrefix(f, "-ldflags="); ok {
				ld = v
				continue
			}
			args = append(args, f)
		}
		if strip {
			ld = strings.TrimSpace(ld + " -s -w")
		}
		if ld != "" {
			args = append(args, "-ldflags="+ld)
		}
		cmd := exec.CommandContext(t.Context(), "go", append(append([]string{"build", "-o", out}, args...), ".")...)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), "GOWORK=off", cgoEnv), env...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", args, err, b)
		}
	}
	full, stripped = filepath.Join(dir, "full"), filepath.Join(dir, "stripped")
	build(full, false)
	build(stripped, true)
	return full, stripped
}

// TestLargeBinaryCost measures Load+Build on a large binary (see TestLargeBinary).
func TestLargeBinaryCost(t *testing.T) {
	stripped := os.Getenv("PROFSYM_GOPCLNTAB_LARGE_STRIPPED")
	if stripped == "" {
		t.Skip("PROFSYM_GOPCLNTAB_LARGE_STRIPPED not set")
	}
	fi, err := os.Stat(stripped)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	ix, st := loadIndex(t, stripped)
	elapsed := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	runtime.ReadMemStats(&after)
	runtime.GC()
	var kept runtime.MemStats
	runtime.ReadMemStats(&kept)
	is := ix.Stats()
	t.Logf("%s (%d MB): %+v; Load+Build %v wall, %v CPU (GC included), allocated %d MB, heap kept with the index %d MB; index %+v",
		filepath.Base(stripped), fi.Size()>>20, st, elapsed.Round(time.Millisecond), cpu.Round(time.Millisecond),
		(after.TotalAlloc-before.TotalAlloc)>>20, int64(kept.HeapAlloc-before.HeapAlloc)>>20, is)
	runtime.KeepAlive(ix)
}

// TestRandomPatches overwrites a few bytes at random places of the structures Load reads,
// with a fixed seed: every result is an error or an index that builds, in bounded time.
func TestRandomPatches(t *testing.T) {
	_, stripped := buildTestProgram(t)
	raw, err := os.ReadFile(stripped)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var regions [][2]uint64
	for _, name := range []string{".gopclntab", ".go.module", ".rodata"} {
		if s := ef.Section(name); s != nil {
			regions = append(regions, [2]uint64{s.Offset, s.Size})
		}
	}
	iterations := 300
	if testing.Short() {
		iterations = 30
	}
	r := rand.New(rand.NewPCG(3, 4))
	var failed int
	for i := 0; i < iterations; i++ {
		reg := regions[r.IntN(len(regions))]
		at := reg[0] + r.Uint64N(reg[1])
		patch := make([]byte, 1+r.IntN(8))
		for j := range patch {
			switch r.IntN(3) {
			case 0:
				patch[j] = 0xff
			case 1:
				patch[j] = 0
			default:
				patch[j] = byte(r.Uint32())
			}
		}
		buf := bytes.Clone(raw)
		copy(buf[at:], patch)
		pf, err := elf.NewFile(bytes.NewReader(buf))
		if err != nil {
			continue
		}
		start := time.Now()
		b := index.NewBuilder()
		if _, err := Load(pf, b); err != nil {
			failed++
		} else if _, err := b.Build(); err != nil {
			t.Errorf("patch %x at %#x: Build after a successful Load: %v", patch, at, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("patch %x at %#x: Load took %v", patch, at, d)
		}
	}
	t.Logf("%d of %d patched binaries were rejected", failed, iterations)
}
