package addrmap

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
)

func TestNormalizeSynthetic(t *testing.T) {
	// A typical x86-64 PIE with -z separate-code: four segments, .bss at the end.
	pie := []Load{
		{Offset: 0, Vaddr: 0, Filesz: 0x5f8, Memsz: 0x5f8},
		{Offset: 0x1000, Vaddr: 0x1000, Filesz: 0x1c5, Memsz: 0x1c5},
		{Offset: 0x2000, Vaddr: 0x2000, Filesz: 0x104, Memsz: 0x104},
		{Offset: 0x2df0, Vaddr: 0x3df0, Filesz: 0x248, Memsz: 0x1250},
	}
	// A non-PIE executable linked at 0x400000.
	exe := []Load{
		{Offset: 0, Vaddr: 0x400000, Filesz: 0x4d8, Memsz: 0x4d8},
		{Offset: 0x1000, Vaddr: 0x401000, Filesz: 0x1a5, Memsz: 0x1a5},
	}
	// A library linked at 0x10000000.
	lib := []Load{
		{Offset: 0, Vaddr: 0x10000000, Filesz: 0x1000, Memsz: 0x1000},
		{Offset: 0x1000, Vaddr: 0x10001000, Filesz: 0x2000, Memsz: 0x2000},
	}
	const base = 0x55d4c8a00000
	cases := []struct {
		name  string
		addr  uint64
		m     Mapping
		loads []Load
		want  uint64
		err   error
	}{
		{"zero mapping passes through", 0x1234, Mapping{}, pie, 0x1234, nil},
		{"non-PIE text", 0x401130, Mapping{Start: 0x401000, Limit: 0x402000, Offset: 0x1000}, exe, 0x401130, nil},
		{"non-PIE first segment", 0x400010, Mapping{Start: 0x400000, Limit: 0x401000}, exe, 0x400010, nil},
		{"PIE text mapped at offset 0x1000", base + 0x1139, Mapping{Start: base + 0x1000, Limit: base + 0x2000, Offset: 0x1000}, pie, 0x1139, nil},
		{"PIE data segment, vaddr != offset", base + 0x3e00, Mapping{Start: base + 0x3000, Limit: base + 0x4000, Offset: 0x2000}, pie, 0x3e00, nil},
		{"PIE .bss beyond filesz", base + 0x4800, Mapping{Start: base + 0x4000, Limit: base + 0x5000, Offset: 0x3000}, pie, 0x4800, nil},
		{"library at 0x10000000 loaded at 0x7f0000000000", 0x7f0000001234, Mapping{Start: 0x7f0000001000, Limit: 0x7f0000003000, Offset: 0x1000}, lib, 0x10001234, nil},
		{"eBPF-profiler style: mapping in vaddr space", 0x10001234, Mapping{Start: 0x10001000, Limit: 0x10003000, Offset: 0x1000}, lib, 0x10001234, nil},
		{"unknown limit", base + 0x1139, Mapping{Start: base + 0x1000, Offset: 0x1000}, pie, 0x1139, nil},
		{"below mapping", base + 0xfff, Mapping{Start: base + 0x1000, Limit: base + 0x2000, Offset: 0x1000}, pie, 0, ErrOutsideMapping},
		{"at limit", base + 0x2000, Mapping{Start: base + 0x1000, Limit: base + 0x2000, Offset: 0x1000}, pie, 0, ErrOutsideMapping},
		{"in no segment", base + 0x1800, Mapping{Start: base + 0x1000, Limit: base + 0x2000, Offset: 0x1000}, pie, 0, ErrNoSegment},
		{"past the file", 0x7f0000005000, Mapping{Start: 0x7f0000001000, Limit: 0x7f0000009000, Offset: 0x1000}, lib, 0, ErrNoSegment},
		{"no loads", base + 0x1139, Mapping{Start: base + 0x1000, Limit: base + 0x2000, Offset: 0x1000}, nil, 0, ErrNoSegment},
		{"offset overflow", 0x2000, Mapping{Start: 0x1000, Limit: 0x3000, Offset: ^uint64(0) - 10}, pie, 0, ErrOverflow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Normalize(c.addr, c.m, c.loads)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("err = %v, want %v", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Normalize(%#x) = %#x, %v; want %#x", c.addr, got, err, c.want)
			}
		})
	}
}

const page = 0x1000

// kernelMappings returns the mappings the kernel creates for f loaded at base: one per
// PT_LOAD, page aligned, as /proc/<pid>/maps shows them.
func kernelMappings(loads []Load, base uint64) []Mapping {
	var out []Mapping
	for _, l := range loads {
		start := l.Vaddr &^ (page - 1)
		out = append(out, Mapping{
			Start:  base + start,
			Limit:  base + (l.Vaddr+l.Filesz+page-1)&^(page-1),
			Offset: l.Offset &^ (page - 1),
		})
	}
	return out
}

func loadsOf(t *testing.T, path string) []Load {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return LoadsOf(f)
}

// TestNormalizeCompiled checks the formula on real link layouts at kernel-style bases.
func TestNormalizeCompiled(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		base uint64
	}{
		{"non-PIE at 0x400000", []string{"-no-pie", "-fno-pie"}, 0},
		{"PIE at a random base", []string{"-pie", "-fPIE"}, 0x55d4c8a3e000},
		{"library linked at 0x10000000", []string{"-shared", "-fPIC", "-Wl,-Ttext-segment=0x10000000"}, 0x7f1234500000 - 0x10000000},
		{"no separate code", []string{"-pie", "-fPIE", "-Wl,-z,noseparate-code"}, 0x7f0000000000},
		{"lld PIE", []string{"-pie", "-fPIE", "-fuse-ld=lld"}, 0x55d4c8a3e000},
		{"lld without rosegment", []string{"-pie", "-fPIE", "-fuse-ld=lld", "-Wl,--no-rosegment"}, 0x55d4c8a3e000},
		{"2 MiB pages", []string{"-pie", "-fPIE", "-Wl,-z,max-page-size=0x200000"}, 0x7f0000000000},
		{"gold", []string{"-no-pie", "-fno-pie", "-fuse-ld=gold"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := elfxtest.CC(t, dir, strings.NewReplacer(" ", "_", "-", "_").Replace(c.name), elfxtest.Hello, append([]string{"-g", "-O1"}, c.args...)...)
			loads := loadsOf(t, p)
			sym := elfxtest.SymbolValue(t, p, "middle")
			addr := c.base + sym + 3
			var hit int
			for _, m := range kernelMappings(loads, c.base) {
				got, err := Normalize(addr, m, loads)
				if errors.Is(err, ErrOutsideMapping) {
					continue
				}
				hit++
				if err != nil || got != sym+3 {
					t.Errorf("mapping %+v: %#x, %v; want %#x", m, got, err, sym+3)
				}
			}
			if hit != 1 {
				t.Errorf("address %#x in %d mappings", addr, hit)
			}
		})
	}
}

const liveLib = `static __attribute__((noinline, used)) int lib_impl(int x) { return x * 7; }
void *lib_addr(void) { return (void *)&lib_impl; }
int lib_call(int x) { return lib_impl(x); }
`

// liveLib2 is linked at the same address as liveLib, so the loader must put it elsewhere.
const liveLib2 = `static __attribute__((noinline, used)) int lib2_impl(int x) { return x * 5; }
void *lib2_addr(void) { return (void *)&lib2_impl; }
`

const liveMain = `#include <stdio.h>
#include <unistd.h>
void *lib_addr(void);
void *lib2_addr(void);
int lib_call(int);
__attribute__((noinline)) int main_func(int x) { return x + 1; }
int main(void) {
	printf("%p %p %p\n", (void *)&main_func, lib_addr(), lib2_addr());
	fflush(stdout);
	char c;
	if (read(0, &c, 1) < 0) return 1;
	return main_func(lib_call(1)) == 8 ? 0 : 2;
}
`

// procMapping finds the /proc/<pid>/maps line that holds addr.
func procMapping(t *testing.T, pid int, addr uint64) (Mapping, string) {
	t.Helper()
	fh, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		limit, _ := strconv.ParseUint(hi, 16, 64)
		off, _ := strconv.ParseUint(fields[2], 16, 64)
		if start <= addr && addr < limit {
			return Mapping{Start: start, Limit: limit, Offset: off}, fields[5]
		}
	}
	t.Fatalf("address %#x in no mapping of pid %d", addr, pid)
	return Mapping{}, ""
}

// TestNormalizeLiveProcess runs compiled programs and checks Normalize of the runtime
// addresses of functions, with the mappings of /proc/<pid>/maps, against st_value.
func TestNormalizeLiveProcess(t *testing.T) {
	dir := t.TempDir()
	lib := elfxtest.CC(t, dir, "liblive.so", liveLib, "-shared", "-fPIC", "-O1", "-Wl,-Ttext-segment=0x10000000")
	lib2 := elfxtest.CC(t, dir, "liblive2.so", liveLib2, "-shared", "-fPIC", "-O1", "-Wl,-Ttext-segment=0x10000000")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"pie", []string{"-pie", "-fPIE"}},
		{"nopie", []string{"-no-pie", "-fno-pie"}},
		{"pie-lld", []string{"-pie", "-fPIE", "-fuse-ld=lld"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			exe := elfxtest.CC(t, dir, c.name, liveMain, append(c.args, "-O1", lib, lib2, "-Wl,-rpath,"+dir)...)
			cmd := exec.CommandContext(t.Context(), exe)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				// EOF on stdin is the program's signal to exit.
				if err := stdin.Close(); err != nil {
					t.Errorf("close program stdin: %v", err)
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("program: %v", err)
					}
				case <-time.After(10 * time.Second):
					if err := cmd.Process.Kill(); err != nil {
						t.Errorf("kill program: %v", err)
					}
					t.Error("program did not exit")
				}
			}()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			relocated := 0
			defer func() {
				// PIE main and the second library at least run away from their link addresses.
				if want := map[string]int{"pie": 2, "nopie": 1, "pie-lld": 2}[c.name]; relocated < want {
					t.Errorf("%d objects loaded away from their link address, want >= %d", relocated, want)
				}
			}()
			var mainAddr, libAddr, lib2Addr uint64
			if _, err := fmt.Sscanf(line, "0x%x 0x%x 0x%x", &mainAddr, &libAddr, &lib2Addr); err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			for _, fn := range []struct {
				addr uint64
				file string
				sym  string
			}{{mainAddr, exe, "main_func"}, {libAddr, lib, "lib_impl"}, {lib2Addr, lib2, "lib2_impl"}} {
				m, path := procMapping(t, cmd.Process.Pid, fn.addr)
				if filepath.Base(path) != filepath.Base(fn.file) {
					t.Fatalf("%s at %#x mapped from %s", fn.sym, fn.addr, path)
				}
				got, err := Normalize(fn.addr, m, loadsOf(t, fn.file))
				if err != nil {
					t.Fatal(err)
				}
				if want := elfxtest.SymbolValue(t, fn.file, fn.sym); got != want {
					t.Errorf("%s: runtime %#x in %+v -> %#x, st_value %#x", fn.sym, fn.addr, m, got, want)
				}
				if fn.addr != got {
					relocated++
				}
				t.Logf("%s: runtime %#x, mapping [%#x,%#x) off %#x -> %#x", fn.sym, fn.addr, m.Start, m.Limit, m.Offset, got)
			}
		})
	}
}
