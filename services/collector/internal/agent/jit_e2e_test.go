//go:build linux

package agent

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/services/collector/internal/bpfprog"
	"github.com/profsym/profsym/services/collector/internal/perfmap"
)

// A hot JavaScript function V8 compiles (Sparkplug, then TurboFan): its code lives in
// anonymous memory and only --perf-basic-prof names it. --no-turbo-inlining keeps it out of
// the loop that calls it, which V8 compiles too.
const jitNodeScript = `'use strict';
const end = Date.now() + 1000 * Number(process.argv[2] || 30);
function profsymJitLeaf(n) {
	let x = 0;
	for (let i = 0; i < n; i++) x = (x * 31 + i) % 1000003;
	return x;
}
function profsymJitCaller(n) { return profsymJitLeaf(n) ^ n; }
let sink = 0;
while (Date.now() < end) sink ^= profsymJitCaller(200000);
console.log(sink);
`

// A hot Java method, kept out of its caller (CompileCommand=dontinline) so it has a frame
// of its own; once the file args[1] exists, a second one runs too, compiled after the first
// perf map was written.
const jitJavaSource = `public class ProfsymJit {
	static long profsymHotMethod(long x) {
		for (int i = 0; i < 200000; i++) x = x * 6364136223846793005L + 1442695040888963407L;
		return x;
	}
	static long profsymLaterMethod(long x) {
		for (int i = 0; i < 200000; i++) x = x * 2862933555777941757L + 3037000493L;
		return x;
	}
	public static void main(String[] args) {
		long end = System.currentTimeMillis() + 1000L * Long.parseLong(args[0]);
		java.io.File trigger = new java.io.File(args[1]);
		boolean later = false;
		long sink = 0;
		for (int n = 1; System.currentTimeMillis() < end; n++) {
			sink ^= profsymHotMethod(sink);
			if (!later && n % 16 == 0) later = trigger.exists();
			if (later) sink ^= profsymLaterMethod(sink);
		}
		System.out.println(sink);
	}
}
`

// jitRuntime is one JIT workload and what its stacks must show.
type jitRuntime struct {
	name string
	cmd  *exec.Cmd
	// thread is the thread running the hot code (other threads compile and collect).
	thread string
	// jit is part of the perf-map name of the hot functions.
	jit string
	// later is part of the name of a function that starts running after the first perf map
	// was written ("": none).
	later string
	// kind is the frame type its JIT frames carry.
	kind string
	// native tells the runtime's own frames below the JIT code: frames of the executable
	// and libraries, named from their symbol tables.
	native func(file, sym string) bool
}

// jitTally counts one runtime's samples in one phase.
type jitTally struct {
	// named: a frame names the hot function; below: and the runtime's native frames are
	// below it; reach: the stack reaches those native frames, named or not.
	total, named, below, reach, anonUnnamed, wrongKind, later int
	example                                                   string
}

func TestJITFramesFromPerfMaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for eBPF")
	}
	if err := bpfprog.CheckCFISupport(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"node", "java", "javac", "jcmd"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not installed (.ci/install-deps installs nodejs and openjdk-17-jdk-headless)", tool)
			}
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "jit.js")
	if err := os.WriteFile(script, []byte(jitNodeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ProfsymJit.java"), []byte(jitJavaSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), "javac", "-d", dir, filepath.Join(dir, "ProfsymJit.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}

	const secs = "120"
	trigger := filepath.Join(dir, "later")
	node := &jitRuntime{
		name: "node", thread: "node", jit: "profsymJitLeaf", kind: perfmap.FrameTypeV8JS,
		cmd: exec.CommandContext(t.Context(), "node", "--perf-basic-prof", "--interpreted-frames-native-stack", "--no-turbo-inlining", script, secs),
		// node::Start is in the node executable or, as Debian builds it, in libnode.so.
		native: func(file, sym string) bool {
			return sym == "main" || strings.HasPrefix(sym, "_ZN4node5Start") || sym == "__libc_start_call_main"
		},
	}
	java := &jitRuntime{
		name: "java", thread: "java", jit: "ProfsymJit.profsym", later: "ProfsymJit.profsymLaterMethod", kind: perfmap.FrameTypeJVM,
		cmd: exec.CommandContext(t.Context(), "java", "-XX:+PreserveFramePointer", "-XX:CompileCommand=quiet",
			"-XX:CompileCommand=dontinline,ProfsymJit::profsym*", "-cp", dir, "ProfsymJit", secs, trigger),
		native: func(file, sym string) bool {
			return filepath.Base(file) == "libjli.so" && (sym == "JavaMain" || sym == "ThreadJavaMain")
		},
	}
	runtimes := []*jitRuntime{node, java}
	var pids []uint32
	for _, r := range runtimes {
		r.cmd.Dir = dir // V8 may write its log (isolate-*-v8.log) where it runs
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := r.cmd.Process.Pid
		pids = append(pids, uint32(pid))
		t.Cleanup(func() {
			if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
				t.Errorf("kill %s: %v", r.name, err)
			}
			_ = r.cmd.Wait() // the kill comes back as an error
			// The runtimes' perf maps (the processes share the test's /tmp).
			_ = os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid))
		})
	}
	// The JVM writes its perf map when asked, once its method is compiled; asked again
	// later, it rewrites the file in place, which the collector must read again.
	perfmapNow := func() {
		out, err := exec.CommandContext(t.Context(), "jcmd", fmt.Sprint(java.cmd.Process.Pid), "Compiler.perfmap").CombinedOutput()
		if err != nil {
			t.Errorf("jcmd Compiler.perfmap: %v\n%s", err, out)
		}
	}
	time.Sleep(3 * time.Second) // the hot code is compiled, and the JVM's attach listener answers
	perfmapNow()

	sym := &symtabSymbolizer{files: map[string]*symtab{}}
	phases := []struct {
		name     string
		unwinder bpfprog.Unwinder
		perfMaps bool
	}{
		{"cfi", bpfprog.UnwindCFI, true},
		{"frame-pointers", bpfprog.UnwindFramePointers, true},
		{"cfi without perf maps", bpfprog.UnwindCFI, false},
	}
	for i, ph := range phases {
		if i > 0 {
			perfmapNow() // code the JVM compiled since
		}
		var reqs requestLog
		reg := prometheus.NewRegistry()
		a, err := New(Config{
			FrequencyHz: 99, Interval: time.Second, PIDs: pids, Unwinder: ph.unwinder, PerfMaps: ph.perfMaps,
			Sinks: []func([]byte){reqs.add}, Registerer: reg,
		}, nil)
		if err != nil {
			t.Fatalf("%s: agent: %v", ph.name, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		runErr := make(chan error, 1)
		go func() { runErr <- a.Run(ctx) }()
		if i == 0 {
			// While the collector runs, the JVM starts a second method, compiles it and
			// writes its perf map again: the collector must read the new one.
			time.AfterFunc(2*time.Second, func() {
				if err := os.WriteFile(trigger, nil, 0o644); err != nil {
					t.Error(err)
				}
			})
			time.AfterFunc(3*time.Second, perfmapNow)
		}
		// Both runtimes share two CPUs with the rest of the machine: wait for enough samples
		// of each (at most 40 s). The first phase runs longer: its JVM runs a second method
		// unnamed until its perf map is written again.
		minRun := 6 * time.Second
		if i == 0 {
			minRun = 12 * time.Second
		}
		started := time.Now()
		for time.Since(started) < 40*time.Second {
			time.Sleep(time.Second)
			counts := samplesPerPID(t, reqs.all())
			if time.Since(started) > minRun && counts[int64(node.cmd.Process.Pid)] >= 250 && counts[int64(java.cmd.Process.Pid)] >= 250 {
				break
			}
		}
		cancel()
		if err := <-runErr; err != nil {
			t.Fatalf("%s: Run: %v", ph.name, err)
		}
		tallies := tallyJIT(t, reqs.all(), runtimes, sym)
		for _, r := range runtimes {
			tl := tallies[r]
			if tl.total < 50 {
				t.Errorf("%s, %s: %d samples of its %s thread, too few", ph.name, r.name, tl.total, r.thread)
				continue
			}
			named := float64(tl.named) / float64(tl.total)
			below := float64(tl.below) / float64(tl.total)
			t.Logf("%-22s %-4s %4d samples: %5.1f%% name %s, %5.1f%% with the runtime's native frames below it; %5.1f%% reach those native frames; %5.1f%% have unnamed frames in anonymous memory",
				ph.name, r.name, tl.total, 100*named, r.jit, 100*below, 100*float64(tl.reach)/float64(tl.total), 100*float64(tl.anonUnnamed)/float64(tl.total))
			if r.later != "" && i == 0 {
				t.Logf("%-22s %-4s %4d samples name %s, compiled after the first perf map", ph.name, r.name, tl.later, r.later)
				if tl.later < 20 {
					t.Errorf("%s, %s: %d samples name %s: the rewritten perf map was not read", ph.name, r.name, tl.later, r.later)
				}
			}
			if tl.wrongKind > 0 {
				t.Errorf("%s, %s: %d JIT frames without frame type %s", ph.name, r.name, tl.wrongKind, r.kind)
			}
			switch {
			case !ph.perfMaps:
				if tl.named > 0 {
					t.Errorf("%s, %s: %d samples name %s without perf maps", ph.name, r.name, tl.named, r.jit)
				}
				if tl.anonUnnamed < tl.total/2 {
					t.Errorf("%s, %s: %d of %d samples have frames in anonymous memory, want most", ph.name, r.name, tl.anonUnnamed, tl.total)
				}
			case ph.unwinder == bpfprog.UnwindCFI:
				if named < 0.8 || below < 0.8 {
					t.Errorf("%s, %s: %.1f%% of %d samples name %s and %.1f%% have the native frames below it, want 80%% each; e.g. %s",
						ph.name, r.name, 100*named, tl.total, r.jit, 100*below, tl.example)
				}
			default:
				// The kernel's frame-pointer walk goes through the JIT code; below it, the
				// runtime's own code may have no frame pointers.
				if named < 0.8 {
					t.Errorf("%s, %s: %.1f%% of %d samples name %s, want 80%%; e.g. %s", ph.name, r.name, 100*named, tl.total, r.jit, tl.example)
				}
			}
		}
		if ph.perfMaps {
			read := testutil.ToFloat64(mustCounterNoLabel(t, reg, "profsym_collector_perf_map_symbols_read_total"))
			whole := testutil.ToFloat64(mustCounter(t, reg, "profsym_collector_perf_map_reads_total", "whole"))
			appends := testutil.ToFloat64(mustCounter(t, reg, "profsym_collector_perf_map_reads_total", "append"))
			malformed := testutil.ToFloat64(mustCounter(t, reg, "profsym_collector_perf_map_symbols_dropped_total", "malformed"))
			t.Logf("%-22s perf maps: %v symbols read, %v whole reads, %v appends, %v malformed lines", ph.name, read, whole, appends, malformed)
			if read < 100 || malformed > 0 {
				t.Errorf("%s: %v perf-map symbols read, %v malformed lines; want the runtimes' maps read whole", ph.name, read, malformed)
			}
			if whole < 2 {
				t.Errorf("%s: %v whole reads of perf maps, want node's and java's", ph.name, whole)
			}
		}
	}
}

// mustCounterNoLabel reads an unlabelled counter of reg.
func mustCounterNoLabel(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
			c.Add(mf.GetMetric()[0].GetCounter().GetValue())
			return c
		}
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}

// tallyJIT counts, per runtime, its hot thread's samples, those that name its hot JIT
// function, and those that also reach the runtime's native frames below that function.
func tallyJIT(t *testing.T, raw [][]byte, runtimes []*jitRuntime, sym *symtabSymbolizer) map[*jitRuntime]*jitTally {
	byPID := map[int64]*jitRuntime{}
	out := map[*jitRuntime]*jitTally{}
	for _, r := range runtimes {
		byPID[int64(r.cmd.Process.Pid)] = r
		out[r] = &jitTally{}
	}
	for _, b := range raw {
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b); err != nil {
			t.Fatalf("request does not decode: %v", err)
		}
		forEachJITSample(t, req.Profiles(), func(pid int64, thread string, count int, frames []jitFrame) {
			r := byPID[pid]
			if r == nil || thread != r.thread {
				return
			}
			tl := out[r]
			tl.total += count
			named, below, reach, anon, later := false, false, false, false, false
			var names []string
			for _, f := range frames {
				switch {
				case f.kernel:
					continue
				case f.name != "":
					names = append(names, f.name)
					if f.kind != r.kind {
						tl.wrongKind += count
					}
					if strings.Contains(f.name, r.jit) {
						named = true
					}
					if r.later != "" && strings.Contains(f.name, r.later) {
						later = true
					}
				case f.file == "":
					names = append(names, fmt.Sprintf("?@%#x", f.addr))
					anon = true
				default:
					s := sym.name(f.file, f.addr)
					names = append(names, filepath.Base(f.file)+":"+s)
					if r.native(f.file, s) {
						reach = true
						below = below || named
					}
				}
			}
			if named {
				tl.named += count
			}
			if below {
				tl.below += count
			}
			if reach {
				tl.reach += count
			}
			if anon {
				tl.anonUnnamed += count
			}
			if later {
				tl.later += count
			}
			if !below && (tl.example == "" || len(names) > strings.Count(tl.example, ";")+1) {
				tl.example = strings.Join(names, ";")
			}
		})
	}
	return out
}

// jitFrame is one frame of a sample as the collector sent it.
type jitFrame struct {
	kernel bool
	file   string // the mapping's file name ("" for none)
	addr   uint64
	name   string // the function of a frame sent symbolized (kernel or JIT)
	kind   string // profile.frame.type
}

// forEachJITSample calls fn with each sample's process, thread name, count and frames
// (innermost first). It checks the shape of frames sent symbolized: one line, and a mapping
// without build IDs, so the gateway's symbolizer passes them through.
func forEachJITSample(t *testing.T, p pprofile.Profiles, fn func(pid int64, thread string, count int, frames []jitFrame)) {
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	attr := func(idx interface {
		Len() int
		At(int) int32
	}, key string) string {
		for a := 0; a < idx.Len(); a++ {
			kv := d.AttributeTable().At(int(idx.At(a)))
			if str(kv.KeyStrindex()) == key {
				return kv.Value().AsString()
			}
		}
		return ""
	}
	for r := 0; r < p.ResourceProfiles().Len(); r++ {
		rp := p.ResourceProfiles().At(r)
		pidV, _ := rp.Resource().Attributes().Get(otlpattr.ProcessPID)
		prof := rp.ScopeProfiles().At(0).Profiles().At(0)
		for s := 0; s < prof.Samples().Len(); s++ {
			smp := prof.Samples().At(s)
			locs := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
			frames := make([]jitFrame, 0, locs.Len())
			for l := 0; l < locs.Len(); l++ {
				loc := d.LocationTable().At(int(locs.At(l)))
				f := jitFrame{addr: loc.Address(), kind: attr(loc.AttributeIndices(), otlpattr.FrameType)}
				f.kernel = f.kind == otlpattr.FrameTypeKernel
				if mi := loc.MappingIndex(); mi != 0 {
					m := d.MappingTable().At(int(mi))
					f.file = str(m.FilenameStrindex())
					if loc.Lines().Len() > 0 && !f.kernel {
						for _, key := range []string{otlpattr.BuildIDGNU, otlpattr.BuildIDGo, otlpattr.BuildIDHTLHash} {
							if attr(m.AttributeIndices(), key) != "" {
								t.Errorf("JIT frame %#x in a mapping with a build ID (%s)", f.addr, f.file)
							}
						}
					}
				}
				if n := loc.Lines().Len(); n > 0 {
					if n != 1 && !f.kernel {
						t.Errorf("JIT frame %#x with %d lines, want 1", f.addr, n)
					}
					f.name = str(d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex())).NameStrindex())
				}
				frames = append(frames, f)
			}
			fn(pidV.Int(), attr(smp.AttributeIndices(), otlpattr.ThreadName), smp.Values().Len(), frames)
		}
	}
}

// symtabSymbolizer names ELF virtual addresses from symbol tables (the file's, and its
// separate debug file's when the system has one): the runtimes' binaries carry theirs, and
// reading a 100 MB binary's DWARF is not needed to tell main from the rest.
type symtabSymbolizer struct {
	mu    sync.Mutex
	files map[string]*symtab
}

type symtab struct {
	addrs []uint64
	ends  []uint64
	names []string
}

func (s *symtabSymbolizer) name(path string, addr uint64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.files[path]
	if !ok {
		st = loadSymtab(path)
		s.files[path] = st
	}
	i := sort.Search(len(st.addrs), func(i int) bool { return st.addrs[i] > addr }) - 1
	if i >= 0 && addr < st.ends[i] {
		return st.names[i]
	}
	return fmt.Sprintf("%#x", addr)
}

func loadSymtab(path string) *symtab {
	type fn struct {
		addr, end uint64
		name      string
	}
	var fns []fn
	files := []string{path}
	if ids, err := buildid.FromFile(path); err == nil && len(ids.GNU) > 2 {
		files = append(files, filepath.Join("/usr/lib/debug/.build-id", ids.GNU[:2], ids.GNU[2:]+".debug"))
	}
	for _, p := range files {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		syms, _ := f.Symbols()
		dyn, _ := f.DynamicSymbols()
		for _, sy := range append(syms, dyn...) {
			if elf.ST_TYPE(sy.Info) == elf.STT_FUNC && sy.Value != 0 && sy.Size > 0 {
				fns = append(fns, fn{sy.Value, sy.Value + sy.Size, sy.Name})
			}
		}
		f.Close()
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].addr < fns[j].addr })
	st := &symtab{}
	for _, f := range fns {
		st.addrs, st.ends, st.names = append(st.addrs, f.addr), append(st.ends, f.end), append(st.names, f.name)
	}
	return st
}
