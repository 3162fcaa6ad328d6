package server_test

import (
	"context"
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

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/services/gateway/internal/dict"
	"github.com/profsym/profsym/services/gateway/internal/otlptest"
	"github.com/profsym/profsym/services/gateway/internal/server"
)

const cSource = `#include <stdio.h>
static inline __attribute__((always_inline)) int leaf(int x) { return x * 3 + (x >> 2); }
static inline __attribute__((always_inline)) int middle(int x) {
	int s = 0;
	for (int i = 0; i < x; i++)
		s += leaf(i ^ x);
	return s;
}
__attribute__((noinline)) int outer(int x) { return middle(x) + middle(x + 1) * 7; }
`

const cMain = `
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

type testBin struct {
	name, path, fn string
	pie            bool
	// debug is the separate debug file of path, if it has one: path is what runs (and what
	// a profiler on the node identifies), debug what has its symbols.
	debug string
}

// symbols is the file with the binary's symbols and DWARF.
func (b testBin) symbols() string {
	if b.debug != "" {
		return b.debug
	}
	return b.path
}

var (
	binsOnce sync.Once
	bins     []testBin
	binsDir  string
)

// TestMain removes what the shared fixtures left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	// The verdict is already in code; a leftover directory only needs to be named.
	for _, dir := range []string{binsDir, symbolizerDir} {
		if dir == "" {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "remove test fixtures: %v\n", err)
		}
	}
	os.Exit(code)
}

// testBinaries compiles the test programs once per run: a non-PIE executable and a PIE shared
// library from C with inlining (-O2 -g), and a Go program.
func testBinaries(t *testing.T) []testBin {
	t.Helper()
	binsOnce.Do(func() {
		var err error
		if binsDir, err = os.MkdirTemp("", "gateway-test-bins-"); err != nil {
			t.Fatal(err)
		}
		bins = []testBin{
			{name: "nonpie-exe", path: compile(t, filepath.Join(binsDir, "exe"), cSource+cMain, "-O2", "-g", "-no-pie", "-fno-pie", "-Wl,--build-id"), fn: "outer"},
			{name: "pie-lib", path: compile(t, filepath.Join(binsDir, "lib"), cSource, "-O2", "-g", "-shared", "-fPIC", "-Wl,--build-id"), fn: "outer", pie: true},
			{name: "go", path: buildGo(t, filepath.Join(binsDir, "go"), goSource), fn: "main.work"},
		}
	})
	if len(bins) == 0 {
		t.Fatal("test binaries failed to build earlier")
	}
	return bins
}

type shape string

const (
	shapeEBPF     shape = "ebpf"      // ELF VA mapping, three IDs, frame types, timestamps only
	shapeEBPFZero shape = "ebpf-zero" // all-zero mapping: addresses are ELF VAs
	shapePprof    shape = "pprof"     // runtime mapping and addresses, GNU/Go build ID only, values
)

// pieBase is where the tests pretend the PIE library was loaded: far from where it is linked.
const pieBase = 0x7f3a12000000

type caseAddr struct {
	bin   testBin
	vaddr uint64
}

// buildRequest makes one request holding every address of every binary, one sample each, with
// a kernel frame (with lines) and a kernel-typed frame without lines under the sample's leaf.
func buildRequest(t *testing.T, sh shape, bins []testBin) (pprofile.Profiles, []caseAddr) {
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
	sp.Scope().SetName("gateway-test")
	prof := sp.Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(str("samples"))
	prof.SampleType().SetUnitStrindex(str("count"))
	prof.SetTime(pcommon.Timestamp(time.Now().UnixNano()))

	var cases []caseAddr
	for _, b := range bins {
		load := execLoad(t, b.path)
		id := ids(t, b.path)
		m := d.MappingTable().AppendEmpty()
		mi := int32(d.MappingTable().Len() - 1)
		m.SetFilenameStrindex(str("/opt/app/" + b.name))
		var base uint64
		switch sh {
		case shapeEBPF:
			m.SetMemoryStart(load.Vaddr)
			m.SetMemoryLimit(load.Vaddr + load.Memsz)
			m.SetFileOffset(load.Off)
		case shapePprof:
			if b.pie {
				base = pieBase
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
		if sh != shapePprof {
			m.AttributeIndices().Append(attr(otlpattr.BuildIDHTLHash, id.HTLHash))
		}
		// A kernel-typed frame under a mapping with a build ID: the gateway must leave it.
		trap := d.LocationTable().AppendEmpty()
		trap.SetMappingIndex(mi)
		trap.SetAddress(base + load.Vaddr)
		trap.AttributeIndices().Append(kernel)
		trapIdx := int32(d.LocationTable().Len() - 1)

		lo, hi := symbolRange(t, b.symbols(), b.fn)
		for va := lo; va < hi; va++ {
			loc := d.LocationTable().AppendEmpty()
			loc.SetMappingIndex(mi)
			loc.SetAddress(base + va)
			if sh != shapePprof {
				loc.AttributeIndices().Append(native)
			}
			stk := d.StackTable().AppendEmpty()
			stk.LocationIndices().Append(int32(d.LocationTable().Len()-1), trapIdx, kernelWithLines)
			s := prof.Samples().AppendEmpty()
			s.SetStackIndex(int32(d.StackTable().Len() - 1))
			if sh == shapePprof {
				s.Values().Append(1)
			} else {
				s.TimestampsUnixNano().Append(uint64(time.Now().UnixNano()), uint64(time.Now().UnixNano()+1))
			}
			cases = append(cases, caseAddr{bin: b, vaddr: va})
		}
	}
	return pd, cases
}

// checkFrames compares the lines the gateway added with llvm-symbolizer's answer for the same
// ELF virtual address.
func checkFrames(t *testing.T, out []otlptest.Sample, cases []caseAddr) {
	t.Helper()
	byBin := map[string][]int{}
	for i, c := range cases {
		byBin[c.bin.symbols()] = append(byBin[c.bin.symbols()], i)
	}
	inlineChains := 0
	for path, idx := range byBin {
		vas := make([]uint64, len(idx))
		for k, i := range idx {
			vas[k] = cases[i].vaddr
		}
		want := llvmSymbolize(t, path, vas)
		for k, i := range idx {
			got := out[i].Stack[0].Lines
			w := want[k]
			if len(got) != len(w) {
				t.Fatalf("%s %#x: %d frames %+v, llvm-symbolizer has %d %+v", cases[i].bin.name, cases[i].vaddr, len(got), got, len(w), w)
			}
			for j := range w {
				if got[j].Function != w[j].FunctionName || got[j].Line != w[j].Line || filepath.Base(got[j].File) != filepath.Base(w[j].FileName) {
					t.Fatalf("%s %#x frame %d: got %s %s:%d, llvm-symbolizer %s %s:%d", cases[i].bin.name, cases[i].vaddr, j,
						got[j].Function, got[j].File, got[j].Line, w[j].FunctionName, w[j].FileName, w[j].Line)
				}
			}
			if len(w) > 1 {
				inlineChains++
			}
			if len(out[i].Stack[1].Lines) != 0 {
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

func TestSymbolizesShapes(t *testing.T) {
	bins := testBinaries(t)
	sym := startSymbolizer(t, "")
	paths := make([]string, len(bins))
	for i, b := range bins {
		paths[i] = b.path
	}
	sym.Upload(t, paths...)
	sk := startSink(t)
	pprofDir := t.TempDir()
	g := startGateway(t, server.Config{SymbolizerURL: sym.URL(), OTLPGRPCEndpoint: sk.addr, PprofDir: pprofDir})

	var total int64
	for _, sh := range []shape{shapeEBPF, shapeEBPFZero, shapePprof} {
		t.Run(string(sh), func(t *testing.T) {
			pd, cases := buildRequest(t, sh, bins)
			in := pprofile.NewProfiles()
			pd.CopyTo(in)
			if err := g.send(context.Background(), pd); err != nil {
				t.Fatal(err)
			}
			total += int64(len(cases))
			sk.waitSamples(t, total, 10*time.Second)
			reqs := sk.received()
			out := otlptest.Resolve(reqs[len(reqs)-1])
			if err := otlptest.Compare(otlptest.Resolve(in), out); err != nil {
				t.Fatal(err)
			}
			if err := dict.Orphans(reqs[len(reqs)-1]); err != nil {
				t.Fatalf("output dictionary: %v", err)
			}
			checkFrames(t, out, cases)
			t.Logf("%s: %d addresses symbolized as llvm-symbolizer does", sh, len(cases))
			for _, s := range out {
				attrs := fmt.Sprint(s.Stack[0].MappingAttrs)
				if !strings.Contains(attrs, otlpattr.MappingHasFunctions) || !strings.Contains(attrs, otlpattr.MappingHasLineNumbers) {
					t.Fatalf("symbolized mapping without has_* attributes: %v", attrs)
				}
			}
		})
	}

	t.Run("pprof-raw", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(pprofDir, "*.pb.gz"))
		deadline := time.Now().Add(5 * time.Second)
		for len(files) < 3 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			files, _ = filepath.Glob(filepath.Join(pprofDir, "*.pb.gz"))
		}
		if len(files) < 3 {
			t.Fatalf("%d pprof files, want 3", len(files))
		}
		cmd := exec.CommandContext(t.Context(), "go", "tool", "pprof", "-raw", files[0])
		cmd.Env = append(os.Environ(), "PPROF_BINARY_PATH="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -raw: %v\n%s", err, out)
		}
		// An inline chain prints as consecutive lines of one location: leaf, then middle, then outer.
		text := string(out)
		i := strings.Index(text, " leaf ")
		if i < 0 || !strings.Contains(text[i:], " middle ") || !strings.Contains(text[i:], " outer ") || !strings.Contains(text, "do_syscall_64") {
			t.Fatalf("pprof -raw output lacks the inline chain leaf/middle/outer:\n%s", text[:min(len(text), 3000)])
		}
		t.Logf("pprof -raw:\n%s", text[:min(len(text), 1500)])
		if !strings.Contains(text, "main.work") {
			t.Fatalf("pprof -raw output lacks the Go frames")
		}
	})
}
