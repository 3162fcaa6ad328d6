package procmaps

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
)

func TestLoadBias(t *testing.T) {
	// Typical x86-64 PIE: text segment at file offset 0x1000, vaddr 0x1000.
	pie := []addrmap.Load{
		{Offset: 0, Vaddr: 0, Filesz: 0x600, Memsz: 0x600},
		{Offset: 0x1000, Vaddr: 0x1000, Filesz: 0x1d5, Memsz: 0x1d5},
		{Offset: 0x2000, Vaddr: 0x2000, Filesz: 0x100, Memsz: 0x100},
	}
	// A library linked with -Wl,-Ttext-segment=0x10000000.
	based := []addrmap.Load{
		{Offset: 0, Vaddr: 0x10000000, Filesz: 0x500, Memsz: 0x500},
		{Offset: 0x1000, Vaddr: 0x10001000, Filesz: 0x200, Memsz: 0x200},
	}
	// Segment whose p_offset is not page aligned: the kernel maps from the page below.
	unaligned := []addrmap.Load{
		{Offset: 0, Vaddr: 0x400000, Filesz: 0x1040, Memsz: 0x1040},
		{Offset: 0x1040, Vaddr: 0x402040, Filesz: 0x3000, Memsz: 0x3000},
	}
	tests := []struct {
		name               string
		start, end, offset uint64
		loads              []addrmap.Load
		pc, wantVA         uint64
		wantOK             bool
	}{
		{"PIE loaded high", 0x55550000_1000, 0x55550000_2000, 0x1000, pie, 0x55550000_1123, 0x1123, true},
		{"non-PIE at link address", 0x401000, 0x402000, 0x1000, []addrmap.Load{{Offset: 0x1000, Vaddr: 0x401000, Filesz: 0x800, Memsz: 0x800}}, 0x401234, 0x401234, true},
		{"library with non-zero base loaded above it", 0x7f0000001000, 0x7f0000002000, 0x1000, based, 0x7f0000001010, 0x10001010, true},
		{"library with non-zero base loaded below it", 0x1000, 0x2000, 0x1000, based, 0x1010, 0x10001010, true},
		{"mapping starts a page below p_offset", 0x7f0000401000, 0x7f0000405000, 0x1000, unaligned, 0x7f0000401100, 0x402100, true},
		{"not ELF", 0x7f0000000000, 0x7f0000001000, 0x3000, nil, 0x7f0000000010, 0x3010, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bias, ok := LoadBias(tt.start, tt.end, tt.offset, tt.loads)
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tt.wantOK)
			}
			m := Mapping{Start: tt.start, End: tt.end, Offset: tt.offset, Bias: bias}
			if got := m.ELFAddress(tt.pc); got != tt.wantVA {
				t.Errorf("ELFAddress(%#x) = %#x, want %#x", tt.pc, got, tt.wantVA)
			}
			if !ok {
				return
			}
			// The design's formula gives the same answer from the process-space mapping
			// and from the ELF-space mapping we report.
			viaProc, err := addrmap.Normalize(tt.pc, addrmap.Mapping{Start: tt.start, Limit: tt.end, Offset: tt.offset}, tt.loads)
			if err != nil || viaProc != tt.wantVA {
				t.Errorf("Normalize(process mapping) = %#x, %v; want %#x", viaProc, err, tt.wantVA)
			}
			viaELF, err := addrmap.Normalize(m.ELFAddress(tt.pc), m.ELFMapping(), tt.loads)
			if err != nil || viaELF != tt.wantVA {
				t.Errorf("Normalize(ELF mapping %+v) = %#x, %v; want %#x", m.ELFMapping(), viaELF, err, tt.wantVA)
			}
		})
	}
}

func TestContainerIDFromCgroup(t *testing.T) {
	id := strings.Repeat("ab12", 16)
	tests := map[string]string{
		"/system.slice/docker-" + id + ".scope":                                        id,
		"/kubepods/burstable/pod1234/" + id:                                            id,
		"/kubepods.slice/kubepods-pod1.slice/cri-containerd-" + id + ".scope":          id,
		"/user.slice/user-1000.slice/session-2.scope":                                  "",
		"/process_api/df8eeb6c1b276a23ae0e18318d0ce862":                                "",
		"/kubepods/pod" + strings.Repeat("1", 64) + "/crio-" + id + ".scope/container": id,
	}
	for in, want := range tests {
		if got := ContainerIDFromCgroup(in); got != want {
			t.Errorf("ContainerIDFromCgroup(%q) = %q, want %q", in, got, want)
		}
	}
	if got := cgroupPath("12:pids:/docker/" + id + "\n0::/system.slice/x.scope\n"); got != "/system.slice/x.scope" {
		t.Errorf("cgroupPath prefers v2: got %q", got)
	}
	if got := cgroupPath("4:memory:/docker/" + id + "\n0::/\n"); got != "/docker/"+id {
		t.Errorf("cgroupPath falls back to a v1 container path: got %q", got)
	}
}

func TestFileCacheKeyedByIdentity(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("not an ELF file, just bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewFileCache(2)
	opens := 0
	open := func() (*os.File, error) { opens++; return os.Open(path) }
	key := func() FileKey {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		k, err := KeyOf(st)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k1 := key()
	a := c.Get(k1, open)
	b := c.Get(k1, open)
	if a != b || opens != 1 || a.IDs.HTLHash == "" || a.Err != nil {
		t.Fatalf("same key: opens=%d same=%v info=%+v", opens, a == b, a)
	}
	want, _ := buildid.FromFile(path)
	if a.IDs != want {
		t.Errorf("IDs = %+v, want %+v", a.IDs, want)
	}

	// Same inode, new mtime: another version of the file.
	if err := os.Chtimes(path, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	k2 := key()
	if k2 == k1 {
		t.Fatal("mtime change did not change the key")
	}
	c.Get(k2, open)
	// Same size and mtime, other inode: a replaced file.
	k3 := k2
	k3.Inode++
	c.Get(k3, open)
	if opens != 3 {
		t.Errorf("opens = %d after three distinct keys, want 3", opens)
	}
	// Capacity 2: k1 was evicted.
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}
	c.Get(k1, open)
	if opens != 4 {
		t.Errorf("evicted key not recomputed: opens = %d", opens)
	}
	hits, computes := c.Stats()
	if hits != 1 || computes != 4 {
		t.Errorf("Stats = %d hits, %d computes; want 1, 4", hits, computes)
	}

	// An unreadable file: an error, not a panic, and the key is remembered.
	bad := c.Get(FileKey{Inode: 99, Size: 10}, func() (*os.File, error) { return nil, os.ErrPermission })
	if bad.Err == nil {
		t.Error("no error for an unopenable file")
	}
	// A lying size (larger than the file): an error naming the read.
	lying := k1
	lying.Size = 1 << 40
	if fi := c.Get(lying, open); fi.Err == nil {
		t.Error("no error for a size larger than the file")
	}
}

const libSrc = `
__attribute__((noinline)) unsigned long lib_func(unsigned long x) { return x * 3 + 1; }
`

const mainSrc = `
#include <stdio.h>
#include <unistd.h>
extern unsigned long lib_func(unsigned long);
__attribute__((noinline)) unsigned long main_func(unsigned long x) { return x + 7; }
int main(void) {
	printf("%p %p\n", (void *)main_func, (void *)lib_func);
	fflush(stdout);
	sleep(30);
	return (int)(main_func(1) + lib_func(2));
}
`

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.CommandContext(t.Context(), name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestResolveRealProcess runs a program linked against a library whose link base is
// 0x10000000 (the dynamic loader puts it elsewhere) and checks that the runtime addresses
// the program prints convert to the symbols' ELF virtual addresses, for a PIE and a non-PIE
// main program.
func TestResolveRealProcess(t *testing.T) {
	need(t, "gcc")
	dir := t.TempDir()
	lib := filepath.Join(dir, "libbased.so")
	if err := os.WriteFile(filepath.Join(dir, "lib.c"), []byte(libSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.c"), []byte(mainSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "gcc", "-O1", "-g", "-shared", "-fPIC", "-Wl,--build-id", "-Wl,-Ttext-segment=0x10000000",
		"-o", lib, filepath.Join(dir, "lib.c"))
	if v := elfxtest.SymbolValue(t, lib, "lib_func"); v < 0x10000000 {
		t.Fatalf("lib_func at %#x: the library is not linked at 0x10000000", v)
	}
	for _, mode := range []struct{ name, flag string }{{"pie", "-pie"}, {"nopie", "-no-pie"}} {
		t.Run(mode.name, func(t *testing.T) {
			bin := filepath.Join(dir, "main-"+mode.name)
			run(t, "gcc", "-O1", "-g", mode.flag, "-Wl,--build-id", "-o", bin, filepath.Join(dir, "main.c"),
				"-L"+dir, "-lbased", "-Wl,-rpath,"+dir)
			cmd := exec.CommandContext(t.Context(), bin)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			var addrs []uint64
			for _, f := range strings.Fields(line) {
				v, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 64)
				if err != nil {
					t.Fatalf("bad address %q", f)
				}
				addrs = append(addrs, v)
			}
			tab := NewTable("/proc", NewFileCache(64), nil)
			pid := uint32(cmd.Process.Pid)
			for i, want := range []struct {
				file, sym string
			}{{bin, "main_func"}, {lib, "lib_func"}} {
				p, m := tab.Resolve(pid, addrs[i])
				if m == nil {
					t.Fatalf("%s at %#x: no mapping (process %+v)", want.sym, addrs[i], p)
				}
				wantVA := elfxtest.SymbolValue(t, want.file, want.sym)
				if got := m.ELFAddress(addrs[i]); got != wantVA {
					t.Errorf("%s: runtime %#x -> ELF VA %#x, want %#x (mapping %+v)", want.sym, addrs[i], got, wantVA, m)
				}
				ids, err := buildid.FromFile(want.file)
				if err != nil {
					t.Fatal(err)
				}
				if m.File == nil || m.File.IDs != ids || ids.GNU == "" {
					t.Errorf("%s: file info %+v, want IDs %+v", want.sym, m.File, ids)
				}
				if m.File != nil && m.File.IsGo {
					t.Errorf("%s: C binary marked as Go", want.file)
				}
				el := m.ELFMapping()
				if va := m.ELFAddress(addrs[i]); va < el.Start || va >= el.Limit {
					t.Errorf("%s: ELF VA %#x outside reported mapping %+v", want.sym, va, el)
				}
			}
			p := tab.Process(pid)
			if len(p.Anonymous) == 0 {
				t.Errorf("no anonymous executable mapping ([vdso]) recorded")
			} else {
				reads := tab.MapsReads()
				tab.minRefresh = 0
				if _, m := tab.Resolve(pid, p.Anonymous[0].Start); m != nil || tab.MapsReads() != reads {
					t.Errorf("an address in [vdso] resolved to %+v or re-read the maps", m)
				}
				tab.minRefresh = time.Second
			}
			if p.ExePath != bin || p.ExeName != filepath.Base(bin) {
				t.Errorf("exe = %q (%q), want %q", p.ExePath, p.ExeName, bin)
			}
			// Process knowledge survives the exit until the sweep.
			if err := cmd.Process.Kill(); err != nil {
				t.Fatalf("kill: %v", err)
			}
			// Wait only reaps: after the kill it always reports "signal: killed".
			_ = cmd.Wait()
			tab.MarkExec(pid)
			p2, m := tab.Resolve(pid, addrs[0])
			if m == nil || p2.Err != nil {
				t.Errorf("exited process lost its mappings: %+v", p2)
			}
			if n := tab.Sweep(); n != 1 || tab.Len() != 0 {
				t.Errorf("Sweep dropped %d, %d left", n, tab.Len())
			}
		})
	}
}
