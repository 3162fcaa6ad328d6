//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/services/collector/internal/bpfprog"
	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

// A chain of five functions that keep working after each call (so no call becomes a jump)
// and a busy leaf. Built without frame pointers, the frame-pointer walk loses it.
const chain5C = `
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
#define N __attribute__((noinline))
N unsigned long leaf(unsigned long x) {
	for (int i = 0; i < 4000000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}
N unsigned long f4(unsigned long x) { return leaf(x) ^ (x + 4); }
N unsigned long f3(unsigned long x) { return f4(x) ^ (x + 3); }
N unsigned long f2(unsigned long x) { return f3(x) ^ (x + 2); }
N unsigned long f1(unsigned long x) { return f2(x) ^ (x + 1); }
int main(int argc, char **argv) {
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	unsigned long i = argc;
	while (time(NULL) < end) sink += f1(i++);
	return 0;
}
`

// The same chain, with its inner part in a shared library.
const nofpLibC = `
#define N __attribute__((noinline))
N unsigned long lib_leaf(unsigned long x) {
	for (int i = 0; i < 4000000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}
N unsigned long lib_f2(unsigned long x) { return lib_leaf(x) ^ (x + 2); }
N unsigned long lib_f1(unsigned long x) { return lib_f2(x) ^ (x + 1); }
`

const nofpLibMainC = `
#include <stdlib.h>
#include <time.h>
extern unsigned long lib_f1(unsigned long);
static volatile unsigned long sink;
__attribute__((noinline)) unsigned long caller(unsigned long x) { return lib_f1(x) ^ (x + 7); }
int main(int argc, char **argv) {
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	unsigned long i = argc;
	while (time(NULL) < end) sink += caller(i++);
	return 0;
}
`

// The comparator is the busy leaf; the stack runs through libc's qsort back to main.
const qsortC = `
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
static int cmp(const void *a, const void *b) {
	unsigned long x = *(const unsigned long *)a;
	for (int i = 0; i < 2000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink += x;
	unsigned long p = *(const unsigned long *)a, q = *(const unsigned long *)b;
	return p < q ? -1 : p > q;
}
int main(int argc, char **argv) {
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	static unsigned long v[4096];
	while (time(NULL) < end) {
		for (int i = 0; i < 4096; i++) v[i] = (unsigned long)rand();
		qsort(v, 4096, sizeof v[0], cmp);
	}
	return 0;
}
`

// A signal handler that runs almost all the time: a profiling timer fires every
// millisecond and its handler works for longer than that. The stack runs from the handler
// through the signal trampoline (glibc's __restore_rt; on arm64 the vDSO's sigreturn) into
// the interrupted chain, whose innermost frame is at the interrupted pc, not a return address.
const signalC = `
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
static volatile unsigned long sink;
#define N __attribute__((noinline))
N void spin(void) {
	unsigned long x = sink;
	for (int i = 0; i < 40000000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
}
N void on_prof(int sig) { spin(); sink += sig; }
N unsigned long g3(unsigned long x) { for (int i = 0; i < 1000; i++) x = x * 3 + 1; return x; }
N unsigned long g2(unsigned long x) { return g3(x) ^ (x + 2); }
N unsigned long g1(unsigned long x) { return g2(x) ^ (x + 1); }
int main(int argc, char **argv) {
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	struct sigaction sa = {0};
	sa.sa_handler = on_prof;
	sigaction(SIGPROF, &sa, NULL);
	struct itimerval it = {{0, 1000}, {0, 1000}};
	setitimer(ITIMER_PROF, &it, NULL);
	unsigned long i = argc;
	while (time(NULL) < end) sink += g1(i++);
	return 0;
}
`

const chainRust = `
use std::time::{Duration, Instant};
#[inline(never)]
fn leaf(mut x: u64) -> u64 {
    for _ in 0..4_000_000 { x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); }
    std::hint::black_box(x)
}
#[inline(never)] fn f4(x: u64) -> u64 { leaf(x) ^ x.wrapping_add(4) }
#[inline(never)] fn f3(x: u64) -> u64 { f4(x) ^ x.wrapping_add(3) }
#[inline(never)] fn f2(x: u64) -> u64 { f3(x) ^ x.wrapping_add(2) }
#[inline(never)] fn f1(x: u64) -> u64 { f2(x) ^ x.wrapping_add(1) }
fn main() {
    let secs: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut sink = 0u64;
    let mut i = std::env::args().count() as u64;
    while Instant::now() < end { sink ^= f1(std::hint::black_box(i)); i += 1; }
    std::hint::black_box(sink);
}
`

const pythonLoop = `
import sys, time
end = time.time() + float(sys.argv[1])
x = 0
while True:
    for i in range(100000):
        x = (x * 31 + i) % 1000003
    if time.time() > end:
        break
`

// cfiCase is a workload and what its stacks must show.
type cfiCase struct {
	name string
	argv []string
	// chain is the innermost-first sequence of functions a sample must contain, each
	// matched by exact name, name + "." suffix (a compiler clone) or "::" + name (Rust).
	chain []string
	// minShare of the samples must show the whole chain.
	minShare float64
	// allMapped: no user frame may lie outside the process's file mappings.
	allMapped bool
	cmd       *exec.Cmd
}

func TestCFIUnwinding(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for eBPF")
	}
	if err := bpfprog.CheckCFISupport(); err != nil {
		t.Skip(err)
	}
	// Debian's interpreter itself: a "python3" on PATH may be a version manager's shell shim
	// that execs the interpreter later.
	const debianPython = "/usr/bin/python3"
	for _, tool := range []string{"gcc", "clang", "rustc", debianPython, "sha256sum", "truncate"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (.ci/install-deps installs it)", tool)
		}
	}
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(name string, args ...string) {
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	bin := func(name string) string { return filepath.Join(dir, name) }
	chain5, lib, libMain, qsortSrc, rs := write("chain5.c", chain5C), write("nofp.c", nofpLibC), write("nofpmain.c", nofpLibMainC), write("qsort.c", qsortC), write("chain.rs", chainRust)
	sigSrc := write("signal.c", signalC)
	write("main.go", chainGo)
	py := write("loop.py", pythonLoop)
	// No -fno-omit-frame-pointer: the x86-64 default leaves RBP to the register allocator.
	run("gcc", "-O2", "-g", "-o", bin("chain-gcc"), chain5)
	run("clang", "-O2", "-g", "-o", bin("chain-clang"), chain5)
	// A library linked at 0x20000000 that the dynamic loader places elsewhere.
	run("gcc", "-O2", "-g", "-fomit-frame-pointer", "-fasynchronous-unwind-tables", "-shared", "-fPIC",
		"-Wl,-Ttext-segment=0x20000000", "-o", bin("libnofp.so"), lib)
	run("gcc", "-O2", "-g", "-o", bin("chain-lib"), libMain, "-L"+dir, "-lnofp", "-Wl,-rpath,"+dir)
	run("gcc", "-O2", "-g", "-o", bin("qsort"), qsortSrc)
	run("gcc", "-O2", "-g", "-o", bin("signal"), sigSrc)
	run("rustc", "-C", "opt-level=3", "-C", "debuginfo=line-tables-only", "-o", bin("chain-rust"), rs)
	run(filepath.Join(runtime_GOROOT(t.Context()), "bin", "go"), "build", "-o", bin("chain-go"), "main.go")
	// sha256sum over a sparse file: hashing, not I/O, and a stripped distribution binary.
	big := bin("big")
	run("truncate", "-s", "64G", big)

	const secs = "60"
	libcTail := []string{"main", "__libc_start_call_main"}
	cases := []*cfiCase{
		{name: "gcc -O2", argv: []string{bin("chain-gcc"), secs}, chain: append([]string{"leaf", "f4", "f3", "f2", "f1"}, libcTail...), minShare: 0.95},
		{name: "clang -O2", argv: []string{bin("chain-clang"), secs}, chain: append([]string{"leaf", "f4", "f3", "f2", "f1"}, libcTail...), minShare: 0.95},
		{name: "shared library", argv: []string{bin("chain-lib"), secs}, chain: append([]string{"lib_leaf", "lib_f2", "lib_f1", "caller"}, libcTail...), minShare: 0.95},
		{name: "rust --release", argv: []string{bin("chain-rust"), secs}, chain: []string{"leaf", "f4", "f3", "f2", "f1", "main", "__libc_start_call_main"}, minShare: 0.95},
		{name: "qsort callback", argv: []string{bin("qsort"), secs}, chain: []string{"cmp", "msort_with_tmp", "main", "__libc_start_call_main"}, minShare: 0.90},
		{name: "signal handler", argv: []string{bin("signal"), secs}, chain: append([]string{"spin", "on_prof", "g1"}, libcTail...), minShare: 0.90},
		{name: "stripped sha256sum", argv: []string{"sha256sum", big}, chain: []string{"__libc_start_call_main"}, minShare: 0.95},
		// Python's start-up imports run deeper than 127 frames; its loop does not.
		{name: "python3", argv: []string{debianPython, py, secs}, chain: []string{"__libc_start_call_main"}, minShare: 0.90, allMapped: true},
		{name: "go (frame pointers)", argv: []string{bin("chain-go"), secs}, chain: []string{"main.leaf", "main.middle", "main.main"}, minShare: 0.90},
	}
	// dd copies one byte per read and write: most of its time is in the kernel, whose frames
	// come as before.
	dd := &cfiCase{name: "dd (kernel frames)", argv: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=2000000000"}, chain: []string{"__libc_start_call_main"}, minShare: 0.90}
	cases = append(cases, dd)
	var pids []uint32
	byPID := map[int64]*cfiCase{}
	for _, c := range cases {
		c.cmd = exec.CommandContext(t.Context(), c.argv[0], c.argv[1:]...)
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, uint32(c.cmd.Process.Pid))
		byPID[int64(c.cmd.Process.Pid)] = c
	}
	defer func() {
		for _, c := range cases {
			if err := c.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
				t.Errorf("kill %s: %v", c.name, err)
			}
			_ = c.cmd.Wait() // the kill comes back as an error
		}
	}()
	time.Sleep(300 * time.Millisecond) // let the dynamic loader map the libraries

	var reqs requestLog
	reg := prometheus.NewRegistry()
	a, err := New(Config{
		FrequencyHz: 99, Interval: time.Second, PIDs: pids, Unwinder: bpfprog.UnwindCFI,
		Sinks:      []func([]byte){reqs.add},
		Registerer: reg,
	}, nil)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	// Eight workloads share two CPUs: wait until each has enough samples (at most 45 s).
	started := time.Now()
	for time.Since(started) < 45*time.Second {
		time.Sleep(time.Second)
		counts := samplesPerPID(t, reqs.all())
		enough := true
		for _, c := range cases {
			if counts[int64(c.cmd.Process.Pid)] < 150 {
				enough = false
			}
		}
		if enough && time.Since(started) > 5*time.Second {
			break
		}
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	vdso := map[*cfiCase]procmaps.Range{}
	for _, c := range cases {
		if p := procmaps.NewTable("/proc", procmaps.NewFileCache(64), nil).Process(uint32(c.cmd.Process.Pid)); p.Err == nil {
			vdso[c] = p.Vdso
		}
	}

	sym := &cfiSymbolizer{ixs: map[string]*index.Index{}}
	type tally struct{ total, whole, unmapped, leafOnly int }
	tallies := map[*cfiCase]*tally{}
	examples := map[*cfiCase]string{}
	kernelFrames := 0
	for _, b := range reqs.all() {
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b); err != nil {
			t.Fatalf("request does not decode: %v", err)
		}
		forEachSample(req.Profiles(), func(pid int64, count int, frames []cfiFrame) {
			c := byPID[pid]
			if c == nil {
				return
			}
			tl := tallies[c]
			if tl == nil {
				tl = &tally{}
				tallies[c] = tl
			}
			tl.total += count
			var names []string
			user, unmapped := 0, 0
			for _, f := range frames {
				if f.kernel {
					if c == dd {
						kernelFrames += count
					}
					continue
				}
				user++
				if f.file == "" {
					// The kernel's [vdso] is code outside every file mapping, not garbage.
					if v := vdso[c]; f.addr < v.Start || f.addr >= v.End {
						unmapped += count
						if user > 1 {
							t.Logf("%s: unwound frame %d at %#x outside every mapping", c.name, user, f.addr)
						}
					}
					names = append(names, "?")
					continue
				}
				names = append(names, sym.functions(t, f.file, f.addr)...)
			}
			if user == 1 {
				// The sampled address alone (the process was not known yet): it is the
				// interrupted program counter, not an unwound frame, so it cannot be garbage.
				tl.leafOnly += count
			} else {
				tl.unmapped += unmapped
			}
			if containsChain(names, c.chain) {
				tl.whole += count
			} else if _, ok := examples[c]; !ok || len(names) > strings.Count(examples[c], ";")+1 {
				examples[c] = strings.Join(names, ";")
			}
		})
	}
	for _, c := range cases {
		tl := tallies[c]
		if tl == nil || tl.total < 20 {
			t.Errorf("%s: too few samples (%v)", c.name, tl)
			continue
		}
		share := float64(tl.whole) / float64(tl.total)
		t.Logf("%-20s %4d samples, %5.1f%% whole, %d leaf-only, %d frames outside mappings", c.name, tl.total, 100*share, tl.leafOnly, tl.unmapped)
		if share < c.minShare {
			t.Errorf("%s: %.1f%% of %d samples show %v, want at least %.0f%%; e.g. %s", c.name, 100*share, tl.total, c.chain, 100*c.minShare, examples[c])
		}
		if c.allMapped && tl.unmapped > 0 {
			t.Errorf("%s: %d user frames lie outside every mapping", c.name, tl.unmapped)
		}
	}
	if kernelFrames < 20 {
		t.Errorf("dd's samples carry %d kernel frames, want its read and write paths", kernelFrames)
	}
	if n := testutil.ToFloat64(mustCounter(t, reg, "profsym_collector_unwind_table_builds_total", "cfi")); n < 5 {
		t.Errorf("unwind tables built = %v, want at least one per distinct C, Rust and system binary", n)
	}
	for _, end := range bpfprog.UnwindEnds() {
		t.Logf("unwind end %-16s %d", end, a.kernelCounters().UnwindEnds[end])
	}
	t.Logf("leaf only (process not known yet) %d", a.kernelCounters().LeafOnly)
}

// mustCounter finds one labelled series of a counter vector in reg.
func mustCounter(t *testing.T, reg *prometheus.Registry, name, label string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == label {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("metric %s{%s} not registered", name, label)
	return nil
}

// containsChain reports whether want appears in names in order (other frames may sit
// between: libc's qsort runs through several of its own).
func containsChain(names, want []string) bool {
	i := 0
	for _, n := range names {
		if i < len(want) && nameMatches(n, want[i]) {
			i++
		}
	}
	return i == len(want)
}

func nameMatches(name, want string) bool {
	if name == want || strings.HasPrefix(name, want+".") || strings.HasSuffix(name, "::"+want) {
		return true
	}
	// A legacy Rust name keeps its hash: "chain::leaf::h02287b427d27bee8".
	if i := strings.LastIndex(name, "::h"); i >= 0 {
		return strings.HasSuffix(name[:i], "::"+want)
	}
	return false
}

type cfiFrame struct {
	kernel bool
	file   string
	addr   uint64
}

// forEachSample calls fn with each sample's process, count and frames (innermost first).
func forEachSample(p pprofile.Profiles, fn func(pid int64, count int, frames []cfiFrame)) {
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	for r := 0; r < p.ResourceProfiles().Len(); r++ {
		rp := p.ResourceProfiles().At(r)
		pidV, _ := rp.Resource().Attributes().Get(otlpattr.ProcessPID)
		prof := rp.ScopeProfiles().At(0).Profiles().At(0)
		for s := 0; s < prof.Samples().Len(); s++ {
			smp := prof.Samples().At(s)
			count := 0
			for v := 0; v < smp.Values().Len(); v++ {
				count += int(smp.Values().At(v))
			}
			locs := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
			frames := make([]cfiFrame, 0, locs.Len())
			for l := 0; l < locs.Len(); l++ {
				loc := d.LocationTable().At(int(locs.At(l)))
				f := cfiFrame{addr: loc.Address()}
				for a := 0; a < loc.AttributeIndices().Len(); a++ {
					kv := d.AttributeTable().At(int(loc.AttributeIndices().At(a)))
					if str(kv.KeyStrindex()) == otlpattr.FrameType && kv.Value().AsString() == otlpattr.FrameTypeKernel {
						f.kernel = true
					}
				}
				if !f.kernel && loc.MappingIndex() != 0 {
					f.file = str(d.MappingTable().At(int(loc.MappingIndex())).FilenameStrindex())
				}
				frames = append(frames, f)
			}
			fn(pidV.Int(), count, frames)
		}
	}
}

// cfiSymbolizer names ELF virtual addresses of the workloads' files; distribution files are
// read through their debug files (libc6-dbg), found by build ID.
type cfiSymbolizer struct {
	mu  sync.Mutex
	ixs map[string]*index.Index
}

func (s *cfiSymbolizer) functions(t *testing.T, path string, addr uint64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ix, ok := s.ixs[path]
	if !ok {
		ix = openWithDebugFile(t, path)
		s.ixs[path] = ix
	}
	if ix == nil {
		return []string{fmt.Sprintf("%s+%#x", filepath.Base(path), addr)}
	}
	var names []string
	for _, f := range ix.Lookup(addr) {
		names = append(names, f.Function)
	}
	if len(names) == 0 {
		return []string{fmt.Sprintf("%s+%#x", filepath.Base(path), addr)}
	}
	return names
}

func openWithDebugFile(t *testing.T, path string) *index.Index {
	candidates := []string{path}
	if ids, err := buildid.FromFile(path); err == nil && len(ids.GNU) > 2 {
		candidates = slices.Insert(candidates, 0, filepath.Join("/usr/lib/debug/.build-id", ids.GNU[:2], ids.GNU[2:]+".debug"))
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err != nil {
			continue
		}
		b, err := debuginfo.Open(c, debuginfo.Options{})
		if err != nil {
			t.Logf("debuginfo.Open(%s): %v", c, err)
			continue
		}
		ix, err := b.Index()
		if err != nil {
			t.Logf("index %s: %v", c, err)
			continue
		}
		return ix
	}
	return nil
}

// dlopenMainC waits for the file argv[3], then loads a library built without frame pointers and spins in it: the
// unwinder must learn the new mapping from the first addresses in it.
const dlopenMainC = `
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static volatile unsigned long sink;
int main(int argc, char **argv) {
	while (access(argv[3], F_OK) != 0) usleep(10000);
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
	unsigned long (*f1)(unsigned long) = (unsigned long (*)(unsigned long))dlsym(h, "lib_f1");
	time_t end = time(NULL) + atoi(argv[2]);
	unsigned long i = argc;
	while (time(NULL) < end) sink += f1(i++);
	return 0;
}
`

// execMainC spins in its own chain until the file argv[1] exists, then replaces itself with
// another program: the unwinder's entry for the old image must not be applied to the new one.
const execMainC = `
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static volatile unsigned long sink;
__attribute__((noinline)) unsigned long spin(unsigned long x) {
	for (int i = 0; i < 4000000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}
int main(int argc, char **argv) {
	unsigned long i = argc;
	while (access(argv[1], F_OK) != 0) sink += spin(i++);
	execv(argv[2], argv + 2);
	return 1;
}
`

// TestCFIUnwindingFollowsProcesses: a library loaded after start (dlopen), an exec into
// another program, and unwind tables evicted for lack of room. Stacks may end early where a
// table is missing, but no frame is ever wrong.
func TestCFIUnwindingFollowsProcesses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for eBPF")
	}
	if err := bpfprog.CheckCFISupport(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	bin := func(name string) string { return filepath.Join(dir, name) }
	write := func(name, src string) string {
		if err := os.WriteFile(bin(name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return bin(name)
	}
	run := func(name string, args ...string) {
		if out, err := exec.CommandContext(t.Context(), name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("gcc", "-O2", "-g", "-fomit-frame-pointer", "-shared", "-fPIC", "-o", bin("libnofp.so"), write("nofp.c", nofpLibC))
	run("gcc", "-O2", "-g", "-o", bin("dlopen"), write("dlopen.c", dlopenMainC), "-ldl")
	run("gcc", "-O2", "-g", "-o", bin("exec"), write("exec.c", execMainC))
	run("gcc", "-O2", "-g", "-o", bin("chain-gcc"), write("chain5.c", chain5C))

	const secs = "12"
	goDlopen := bin("go-dlopen")
	dl := exec.CommandContext(t.Context(), bin("dlopen"), bin("libnofp.so"), secs, goDlopen)
	goExec := bin("go-exec")
	ex := exec.CommandContext(t.Context(), bin("exec"), goExec, bin("chain-gcc"), secs)
	for _, c := range []*exec.Cmd{dl, ex} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	}
	launched := time.Now()
	time.Sleep(300 * time.Millisecond)

	var reqs requestLog
	reg := prometheus.NewRegistry()
	a, err := New(Config{
		FrequencyHz: 99, Interval: time.Second, PIDs: []uint32{uint32(dl.Process.Pid), uint32(ex.Process.Pid)},
		Unwinder:   bpfprog.UnwindCFI,
		Sinks:      []func([]byte){reqs.add},
		Registerer: reg,
	}, nil)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	t.Logf("sampling from %v after the start", time.Since(launched))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Both changes happen while sampling runs.
	time.AfterFunc(2*time.Second, func() {
		if err := os.WriteFile(goDlopen, nil, 0o644); err != nil {
			t.Error(err)
		}
	})
	time.AfterFunc(4*time.Second, func() {
		if err := os.WriteFile(goExec, nil, 0o644); err != nil {
			t.Error(err)
		}
	})
	if err := a.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}

	sym := &cfiSymbolizer{ixs: map[string]*index.Index{}}
	dlWhole, dlLib, exWhole, exNew, exOld := 0, 0, 0, 0, 0
	for _, b := range reqs.all() {
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b); err != nil {
			t.Fatal(err)
		}
		forEachSample(req.Profiles(), func(pid int64, count int, frames []cfiFrame) {
			var names []string
			for _, f := range frames {
				if f.kernel {
					continue
				}
				if f.file == "" {
					names = append(names, "?")
					continue
				}
				names = append(names, sym.functions(t, f.file, f.addr)...)
			}
			if len(names) == 0 {
				return
			}
			switch pid {
			case int64(dl.Process.Pid):
				if nameMatches(names[0], "lib_leaf") {
					dlLib += count
					if containsChain(names, []string{"lib_leaf", "lib_f2", "lib_f1", "main", "__libc_start_call_main"}) {
						dlWhole += count
					}
				}
			case int64(ex.Process.Pid):
				switch {
				case nameMatches(names[0], "leaf"):
					exNew += count
					if containsChain(names, []string{"leaf", "f4", "f3", "f2", "f1", "main", "__libc_start_call_main"}) {
						exWhole += count
					}
				case nameMatches(names[0], "spin"):
					exOld += count
				}
				for _, n := range names {
					if nameMatches(n, "spin") && !nameMatches(names[0], "spin") {
						t.Errorf("a frame of the program before exec in a stack after it: %v", names)
					}
				}
			}
		})
	}
	t.Logf("dlopen: %d of %d samples in the library whole; exec: %d before, %d of %d after whole", dlWhole, dlLib, exOld, exWhole, exNew)
	if dlLib < 20 || float64(dlWhole) < 0.9*float64(dlLib) {
		t.Errorf("dlopen: %d of %d samples in the loaded library show the whole chain, want at least 90%%", dlWhole, dlLib)
	}
	if exOld == 0 || exNew < 20 || float64(exWhole) < 0.9*float64(exNew) {
		t.Errorf("exec: %d samples before, %d of %d after show the whole chain, want some before and at least 90%% after", exOld, exWhole, exNew)
	}
}
