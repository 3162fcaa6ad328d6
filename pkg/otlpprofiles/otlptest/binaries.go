package otlptest

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/testsupport"
)

// CSource has a noinline function, outer, with two levels of forced inlining under it.
const CSource = `#include <stdio.h>
static inline __attribute__((always_inline)) int leaf(int x) { return x * 3 + (x >> 2); }
static inline __attribute__((always_inline)) int middle(int x) {
	int s = 0;
	for (int i = 0; i < x; i++)
		s += leaf(i ^ x);
	return s;
}
__attribute__((noinline)) int outer(int x) { return middle(x) + middle(x + 1) * 7; }
`

// CMain makes CSource a program.
const CMain = `
int main(int argc, char **argv) { printf("%d\n", outer(argc + 100)); return 0; }
`

const goSource = `package main

import "fmt"

//go:noinline
func work(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += step(i)
	}
	return s
}

func step(i int) int { return i*i + 3 }

func main() { fmt.Println(work(1000)) }
`

// Binary is a test program: Fn is a function of it whose every address a request carries.
type Binary struct {
	Name, Path, Fn string
	PIE            bool
	// Debug is the separate debug file of Path, if it has one: Path is what runs (and what
	// a profiler on the node identifies), Debug what has its symbols.
	Debug string
}

// Symbols is the file with the binary's symbols and DWARF.
func (b Binary) Symbols() string {
	if b.Debug != "" {
		return b.Debug
	}
	return b.Path
}

var (
	binsOnce sync.Once
	bins     []Binary
	binsDir  string
)

// Binaries compiles the test programs once per test binary (RemoveFixtures deletes them): a non-PIE executable and a PIE shared
// library from C with inlining (-O2 -g), and a Go program.
func Binaries(t testing.TB) []Binary {
	t.Helper()
	binsOnce.Do(func() {
		fixturesDir(t)
		bins = []Binary{
			{Name: "nonpie-exe", Path: compile(t, filepath.Join(binsDir, "exe"), CSource+CMain, "-O2", "-g", "-no-pie", "-fno-pie", "-Wl,--build-id"), Fn: "outer"},
			{Name: "pie-lib", Path: compile(t, filepath.Join(binsDir, "lib"), CSource, "-O2", "-g", "-shared", "-fPIC", "-Wl,--build-id"), Fn: "outer", PIE: true},
			{Name: "go", Path: testsupport.BuildGo(t, filepath.Join(binsDir, "go"), goSource, "CGO_ENABLED=0"), Fn: "main.work"},
		}
	})
	if len(bins) == 0 {
		t.Fatal("test binaries failed to build earlier")
	}
	return bins
}

var (
	// binsDirMu guards binsDir, which Binaries and ARM64Binaries share.
	binsDirMu sync.Mutex
	arm64Once sync.Once
	arm64Bins []Binary
)

// ARM64Binaries compiles arm64 builds of the test programs once per test binary, in the
// directory RemoveFixtures deletes: PIE executables from C with inlining (-O2 -g) by the cross
// gcc (aarch64-linux-gnu-gcc) and by clang for aarch64-linux-gnu linked with lld, and the Go
// program (GOARCH=arm64).
func ARM64Binaries(t testing.TB) []Binary {
	t.Helper()
	arm64Once.Do(func() {
		fixturesDir(t)
		arm64Bins = []Binary{
			{Name: "arm64-pie-exe", Path: compileWith(t, "aarch64-linux-gnu-gcc", filepath.Join(binsDir, "arm64-exe"), CSource+CMain, "-O2", "-g", "-fPIE", "-pie", "-Wl,--build-id"), Fn: "outer", PIE: true},
			// lld places the code at a virtual address 64 KiB beyond its file offset: addresses are
			// normalized with the segment's p_vaddr and p_offset, not by assuming they match.
			{Name: "arm64-clang-lld-exe", Path: compileWith(t, "clang", filepath.Join(binsDir, "arm64-clang-exe"), CSource+CMain, "--target=aarch64-linux-gnu", "-fuse-ld=lld", "-O2", "-g", "-fPIE", "-pie", "-Wl,--build-id"), Fn: "outer", PIE: true},
			{Name: "arm64-go", Path: testsupport.BuildGo(t, filepath.Join(binsDir, "arm64-go"), goSource, "CGO_ENABLED=0", "GOARCH=arm64"), Fn: "main.work"},
		}
	})
	if len(arm64Bins) == 0 {
		t.Fatal("arm64 test binaries failed to build earlier")
	}
	return arm64Bins
}

// fixturesDir makes the directory the test programs are built in, once.
func fixturesDir(t testing.TB) {
	t.Helper()
	binsDirMu.Lock()
	defer binsDirMu.Unlock()
	if binsDir != "" {
		return
	}
	var err error
	if binsDir, err = os.MkdirTemp("", "otlptest-bins-"); err != nil {
		t.Fatal(err)
	}
}

// Shape is how a producer lays out mappings and addresses.
type Shape string

const (
	ShapeEBPF     Shape = "ebpf"      // ELF VA mapping, three IDs, frame types, timestamps only
	ShapeEBPFZero Shape = "ebpf-zero" // all-zero mapping: addresses are ELF VAs
	ShapePprof    Shape = "pprof"     // runtime mapping and addresses, GNU/Go build ID only, values
)

// PIEBase is where the tests pretend the PIE library was loaded: far from where it is linked.
const PIEBase = 0x7f3a12000000

// Case is one address of a request BuildRequest made: one sample each, in order.
type Case struct {
	Bin   Binary
	VAddr uint64
}

// TrapFunction names the located kernel frame BuildRequest puts under every sample of
// ShapeEBPFZero.
const TrapFunction = "trap_located_kernel_frame"

// BuildRequest makes one request holding every address of every binary, one sample each, with
// a kernel frame (with lines) and a kernel-typed frame without lines under the sample's leaf.
func BuildRequest(t testing.TB, sh Shape, bins []Binary) (pprofile.Profiles, []Case) {
	t.Helper()
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	st := d.StringTable()
	st.Append("")
	strs := map[string]int32{"": 0}
	str := func(s string) int32 {
		if i, ok := strs[s]; ok {
			return i
		}
		st.Append(s)
		strs[s] = int32(st.Len() - 1)
		return strs[s]
	}
	at := d.AttributeTable()
	at.AppendEmpty()
	attr := func(k, v string) int32 {
		kv := at.AppendEmpty()
		kv.SetKeyStrindex(str(k))
		kv.Value().SetStr(v)
		return int32(at.Len() - 1)
	}
	native := attr(otlpattr.FrameType, otlpattr.FrameTypeNative)
	kernel := attr(otlpattr.FrameType, otlpattr.FrameTypeKernel)
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()

	kf := d.FunctionTable().AppendEmpty()
	kf.SetNameStrindex(str("do_syscall_64"))
	kloc := d.LocationTable().AppendEmpty()
	kloc.SetAddress(0xffffffff81000010)
	kloc.AttributeIndices().Append(kernel)
	kl := kloc.Lines().AppendEmpty()
	kl.SetFunctionIndex(int32(d.FunctionTable().Len() - 1))
	kernelWithLines := int32(d.LocationTable().Len() - 1)

	p := pd.ResourceProfiles().AppendEmpty()
	p.Resource().Attributes().PutStr("host.name", "node-1")
	p.Resource().Attributes().PutInt("process.pid", 4242)
	sp := p.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName("otlptest")
	prof := sp.Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(str("samples"))
	prof.SampleType().SetUnitStrindex(str("count"))
	prof.SetTime(pcommon.Timestamp(time.Now().UnixNano()))

	var cases []Case
	for _, b := range bins {
		load := ExecLoad(t, b.Path)
		id := BinaryIDs(t, b.Path)
		m := d.MappingTable().AppendEmpty()
		mi := int32(d.MappingTable().Len() - 1)
		m.SetFilenameStrindex(str("/opt/app/" + b.Name))
		var base uint64
		switch sh {
		case ShapeEBPF:
			m.SetMemoryStart(load.Vaddr)
			m.SetMemoryLimit(load.Vaddr + load.Memsz)
			m.SetFileOffset(load.Off)
		case ShapePprof:
			if b.PIE {
				base = PIEBase
			}
			m.SetMemoryStart(base + load.Vaddr&^0xfff)
			m.SetMemoryLimit(base + (load.Vaddr+load.Memsz+0xfff)&^0xfff)
			m.SetFileOffset(load.Off &^ 0xfff)
		}
		if id.GNU != "" {
			m.AttributeIndices().Append(attr(otlpattr.BuildIDGNU, id.GNU))
		}
		if id.Go != "" {
			m.AttributeIndices().Append(attr(otlpattr.BuildIDGo, id.Go))
		}
		if sh != ShapePprof {
			m.AttributeIndices().Append(attr(otlpattr.BuildIDHTLHash, id.HTLHash))
		}
		// A kernel-typed frame under a mapping with a build ID: symbolization must leave it.
		// Under an all-zero mapping a kernel frame is an address of the file its build ID
		// names (vmlinux, a module), which is symbolized: there the trap is a located kernel
		// frame, whose lines are its own.
		trap := d.LocationTable().AppendEmpty()
		trap.SetMappingIndex(mi)
		trap.SetAddress(base + load.Vaddr)
		trap.AttributeIndices().Append(kernel)
		if sh == ShapeEBPFZero {
			tf := d.FunctionTable().AppendEmpty()
			tf.SetNameStrindex(str(TrapFunction))
			tf.SetFilenameStrindex(str("kernel/trap.c"))
			tl := trap.Lines().AppendEmpty()
			tl.SetFunctionIndex(int32(d.FunctionTable().Len() - 1))
			tl.SetLine(7)
		}
		trapIdx := int32(d.LocationTable().Len() - 1)

		lo, hi := SymbolRange(t, b.Symbols(), b.Fn)
		for va := lo; va < hi; va++ {
			loc := d.LocationTable().AppendEmpty()
			loc.SetMappingIndex(mi)
			loc.SetAddress(base + va)
			if sh != ShapePprof {
				loc.AttributeIndices().Append(native)
			}
			stk := d.StackTable().AppendEmpty()
			stk.LocationIndices().Append(int32(d.LocationTable().Len()-1), trapIdx, kernelWithLines)
			s := prof.Samples().AppendEmpty()
			s.SetStackIndex(int32(d.StackTable().Len() - 1))
			if sh == ShapePprof {
				s.Values().Append(1)
			} else {
				s.TimestampsUnixNano().Append(uint64(time.Now().UnixNano()), uint64(time.Now().UnixNano()+1))
			}
			cases = append(cases, Case{Bin: b, VAddr: va})
		}
	}
	return pd, cases
}

// CheckFrames compares the lines symbolization added (out, resolved from the request
// BuildRequest made, after symbolization) with llvm-symbolizer's answer for the same
// ELF virtual address.
func CheckFrames(t testing.TB, out []Sample, cases []Case) {
	t.Helper()
	byBin := map[string][]int{}
	for i, c := range cases {
		byBin[c.Bin.Symbols()] = append(byBin[c.Bin.Symbols()], i)
	}
	inlineChains := 0
	for path, idx := range byBin {
		vas := make([]uint64, len(idx))
		for k, i := range idx {
			vas[k] = cases[i].VAddr
		}
		want := LLVMSymbolize(t, path, vas)
		for k, i := range idx {
			got := out[i].Stack[0].Lines
			w := want[k]
			if len(got) != len(w) {
				t.Fatalf("%s %#x: %d frames %+v, llvm-symbolizer has %d %+v", cases[i].Bin.Name, cases[i].VAddr, len(got), got, len(w), w)
			}
			for j := range w {
				if got[j].Function != w[j].FunctionName || got[j].Line != w[j].Line || filepath.Base(got[j].File) != filepath.Base(w[j].FileName) {
					t.Fatalf("%s %#x frame %d: got %s %s:%d, llvm-symbolizer %s %s:%d", cases[i].Bin.Name, cases[i].VAddr, j,
						got[j].Function, got[j].File, got[j].Line, w[j].FunctionName, w[j].FileName, w[j].Line)
				}
			}
			if len(w) > 1 {
				inlineChains++
			}
			if l := out[i].Stack[1].Lines; len(l) > 1 || len(l) == 1 && l[0].Function != TrapFunction {
				t.Fatalf("kernel-typed frame was symbolized: %+v", out[i].Stack[1])
			}
			if f := out[i].Stack[2]; len(f.Lines) != 1 || f.Lines[0].Function != "do_syscall_64" {
				t.Fatalf("kernel frame changed: %+v", f)
			}
		}
	}
	if inlineChains == 0 {
		t.Fatal("no address with an inline chain: the test binaries do not exercise inlining")
	}
}

// LLVMFrame is one frame of llvm-symbolizer's JSON output.
type LLVMFrame struct {
	FunctionName string
	FileName     string
	Line         int64
	Column       int64
}

// LLVMSymbolize runs llvm-symbolizer (the reference) on ELF virtual addresses of path.
func LLVMSymbolize(t testing.TB, path string, vaddrs []uint64) [][]LLVMFrame {
	t.Helper()
	var in strings.Builder
	for _, a := range vaddrs {
		fmt.Fprintf(&in, "0x%x\n", a)
	}
	cmd := exec.CommandContext(t.Context(), "llvm-symbolizer", "--output-style=JSON", "--inlining", "--obj="+path)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	var res [][]LLVMFrame
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct{ Symbol []LLVMFrame }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("llvm-symbolizer output %q: %v", line, err)
		}
		var fr []LLVMFrame
		for _, f := range r.Symbol {
			if f.FunctionName != "" || f.Line != 0 {
				fr = append(fr, f)
			}
		}
		res = append(res, fr)
	}
	if len(res) != len(vaddrs) {
		t.Fatalf("llvm-symbolizer answered %d of %d addresses", len(res), len(vaddrs))
	}
	return res
}

// SymbolRange returns the ELF virtual address range of a function symbol.
func SymbolRange(t testing.TB, path, name string) (uint64, uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 {
			return s.Value, s.Value + s.Size
		}
	}
	t.Fatalf("%s: no function symbol %s", path, name)
	return 0, 0
}

// ExecLoad returns the executable PT_LOAD segment of path.
func ExecLoad(t testing.TB, path string) elf.ProgHeader {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return p.ProgHeader
		}
	}
	t.Fatalf("%s: no executable PT_LOAD", path)
	return elf.ProgHeader{}
}

// BinaryIDs computes the IDs a profiler reports for the file at path.
func BinaryIDs(t testing.TB, path string) buildid.IDs {
	t.Helper()
	ids, err := buildid.FromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func compile(t testing.TB, dir, src string, args ...string) string {
	t.Helper()
	return compileWith(t, "gcc", dir, src, args...)
}

func compileWith(t testing.TB, cc, dir, src string, args ...string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srcPath := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "prog")
	cmd := exec.CommandContext(t.Context(), cc, append([]string{"-o", out, srcPath}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, b)
	}
	return out
}

// RemoveFixtures removes the binaries Binaries and ARM64Binaries built; a TestMain calls it after m.Run.
func RemoveFixtures() error {
	if binsDir == "" {
		return nil
	}
	return os.RemoveAll(binsDir)
}
