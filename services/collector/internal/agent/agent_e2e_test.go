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
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/services/collector/internal/exporter"
	"github.com/profsym/profsym/services/collector/internal/otlpsinktest"
)

// The hot chain is leaf <- middle <- main. middle works on leaf's result after the call so
// the call is not turned into a jump, and leaf's loop holds nearly all the time.
const chainC = `
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
__attribute__((noinline)) unsigned long leaf(unsigned long x) {
	for (int i = 0; i < 2000000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}
__attribute__((noinline)) unsigned long middle(unsigned long x) {
	unsigned long r = leaf(x);
	return r ^ (x + 1);
}
int main(int argc, char **argv) {
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	unsigned long i = 0;
	while (time(NULL) < end) sink += middle(i++);
	return 0;
}
`

const libC = `
__attribute__((noinline)) unsigned long lib_leaf(unsigned long x) {
	for (int i = 0; i < 2000000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}
__attribute__((noinline)) unsigned long lib_middle(unsigned long x) {
	unsigned long r = lib_leaf(x);
	return r ^ (x + 1);
}
`

const libMainC = `
#include <stdlib.h>
#include <time.h>
extern unsigned long lib_middle(unsigned long);
static volatile unsigned long sink;
int main(int argc, char **argv) {
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	unsigned long i = 0;
	while (time(NULL) < end) sink += lib_middle(i++);
	return 0;
}
`

const chainGo = `package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func leaf(x uint64) uint64 {
	for i := 0; i < 2000000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func middle(x uint64) uint64 {
	r := leaf(x)
	return r ^ (x + 1)
}

func main() {
	secs := 30
	if len(os.Args) > 1 {
		secs, _ = strconv.Atoi(os.Args[1])
	}
	end := time.Now().Add(time.Duration(secs) * time.Second)
	for i := uint64(0); time.Now().Before(end); i++ {
		sink += middle(i)
	}
}
`

type workload struct {
	name  string
	bin   string
	chain []string // expected innermost-first function names
	files []string // binaries whose build IDs must appear
	kind  string   // frame type of the chain's frames
	cmd   *exec.Cmd
}

func build(t *testing.T, dir string) []*workload {
	t.Helper()
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
	chain := write("chain.c", chainC)
	lib := write("lib.c", libC)
	libMain := write("libmain.c", libMainC)
	write("main.go", chainGo)
	cflags := []string{"-fno-omit-frame-pointer", "-O1", "-g", "-Wl,--build-id"}
	pie, nopie := filepath.Join(dir, "chain-pie"), filepath.Join(dir, "chain-nopie")
	libSO, libBin := filepath.Join(dir, "libchain.so"), filepath.Join(dir, "chain-lib")
	goBin := filepath.Join(dir, "chain-go")
	run("gcc", append(cflags, "-fPIE", "-pie", "-o", pie, chain)...)
	run("gcc", append(cflags, "-fno-pie", "-no-pie", "-o", nopie, chain)...)
	// A library whose link base is 0x10000000; the dynamic loader puts it elsewhere.
	run("gcc", append(cflags, "-shared", "-fPIC", "-Wl,-Ttext-segment=0x10000000", "-o", libSO, lib)...)
	run("gcc", append(cflags, "-o", libBin, libMain, "-L"+dir, "-lchain", "-Wl,-rpath,"+dir)...)
	run(filepath.Join(runtime_GOROOT(t.Context()), "bin", "go"), "build", "-o", goBin, "main.go")
	c := []string{"leaf", "middle", "main"}
	return []*workload{
		{name: "pie", bin: pie, chain: c, files: []string{pie}, kind: otlpattr.FrameTypeNative},
		{name: "nopie", bin: nopie, chain: c, files: []string{nopie}, kind: otlpattr.FrameTypeNative},
		{name: "lib", bin: libBin, chain: []string{"lib_leaf", "lib_middle", "main"}, files: []string{libSO, libBin}, kind: otlpattr.FrameTypeNative},
		{name: "go", bin: goBin, chain: []string{"main.leaf", "main.middle", "main.main"}, files: []string{goBin}, kind: otlpattr.FrameTypeGo},
	}
}

// runtime_GOROOT finds the Go toolchain that runs the test.
func runtime_GOROOT(ctx context.Context) string {
	if out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return "/usr/local/go"
}

// symbolizer resolves ELF virtual addresses of our workload binaries with the engine.
type symbolizer struct {
	mu  sync.Mutex
	ixs map[string]*index.Index
}

func (s *symbolizer) functions(t *testing.T, path string, addr uint64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ix, ok := s.ixs[path]
	if !ok {
		b, err := debuginfo.Open(path, debuginfo.Options{})
		if err != nil {
			t.Fatalf("debuginfo.Open(%s): %v", path, err)
		}
		ix, err = b.Index()
		if err != nil {
			t.Fatalf("index %s: %v", path, err)
		}
		s.ixs[path] = ix
	}
	var names []string
	for _, f := range ix.Lookup(addr) {
		names = append(names, f.Function)
	}
	return names
}

// requestLog keeps a copy of every encoded request an agent reports.
type requestLog struct {
	mu  sync.Mutex
	raw [][]byte
}

func (l *requestLog) add(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raw = append(l.raw, append([]byte(nil), b...))
}

// all returns the requests reported so far.
func (l *requestLog) all() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.raw)
}

// samplesPerPID counts the samples of each process.pid in encoded requests.
func samplesPerPID(t *testing.T, raw [][]byte) map[int64]int {
	out := map[int64]int{}
	for _, b := range raw {
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b); err != nil {
			t.Errorf("request does not decode: %v", err)
			continue
		}
		rps := req.Profiles().ResourceProfiles()
		for r := 0; r < rps.Len(); r++ {
			pid, _ := rps.At(r).Resource().Attributes().Get(otlpattr.ProcessPID)
			profs := rps.At(r).ScopeProfiles().At(0).Profiles()
			for k := 0; k < profs.Len(); k++ {
				smps := profs.At(k).Samples()
				for j := 0; j < smps.Len(); j++ {
					out[pid.Int()] += smps.At(j).Values().Len()
				}
			}
		}
	}
	return out
}

func TestCollectorEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for eBPF")
	}
	for _, tool := range []string{"gcc", "dd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	wls := build(t, dir)

	var pids []uint32
	byPID := map[int64]*workload{}
	for _, w := range wls {
		w.cmd = exec.CommandContext(t.Context(), w.bin, "40")
		if err := w.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, uint32(w.cmd.Process.Pid))
		byPID[int64(w.cmd.Process.Pid)] = w
	}
	// dd copies one byte per read and write: most of its time is in the kernel.
	dd := exec.CommandContext(t.Context(), "dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=2000000000")
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	pids = append(pids, uint32(dd.Process.Pid))
	// A workload that cannot be killed or reaped outlives the test and loads the machine for
	// the tests after it: report it.
	stop := func(cmd *exec.Cmd) {
		if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("kill %s: %v", cmd.Path, err)
		}
		if err := cmd.Wait(); err != nil {
			// The kill itself comes back as an *exec.ExitError.
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) {
				t.Errorf("wait for %s: %v", cmd.Path, err)
			}
		}
	}
	defer func() {
		for _, w := range wls {
			stop(w.cmd)
		}
		stop(dd)
	}()
	time.Sleep(200 * time.Millisecond) // let the dynamic loader map the library

	sink, err := otlpsinktest.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Stop()
	exp, err := exporter.New(exporter.Options{Endpoint: sink.Addr, Insecure: true}, exporter.NewMetrics(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	expCtx, expCancel := context.WithCancel(context.Background())
	go exp.Run(expCtx)

	var reqs requestLog
	reg := prometheus.NewRegistry()
	a, err := New(Config{
		FrequencyHz: 99, Interval: time.Second, PIDs: pids,
		HostAttributes: map[string]string{otlpattr.HostName: "test-node"},
		Sinks:          []func([]byte){exp.Enqueue, reqs.add},
		Registerer:     reg,
	}, nil)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	// Sample until every workload has enough samples: at least 4 s, at most 20 s (a
	// loaded host, or the race detector, gives the workloads little CPU).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	started := time.Now()
	for {
		time.Sleep(500 * time.Millisecond)
		counts := samplesPerPID(t, reqs.all())
		enough := true
		for _, w := range wls {
			if counts[int64(w.cmd.Process.Pid)] < 25 {
				enough = false
			}
		}
		if (enough && time.Since(started) > 4*time.Second) || time.Since(started) > 20*time.Second {
			break
		}
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	expCancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	exp.Shutdown(sctx)
	scancel()

	received := sink.Received()
	if len(received) == 0 {
		t.Fatal("the sink received nothing")
	}
	raw := reqs.all()
	// Delivery is at least once: a retry after a lost answer may repeat a request.
	if len(received) < len(raw) {
		t.Errorf("built %d requests, sink received %d", len(raw), len(received))
	}
	for i, b := range raw {
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b); err != nil {
			t.Fatalf("request %d does not decode: %v", i, err)
		}
	}

	wantIDs := map[string]buildid.IDs{}
	for _, w := range wls {
		for _, f := range w.files {
			ids, err := buildid.FromFile(f)
			if err != nil {
				t.Fatal(err)
			}
			wantIDs[f] = ids
		}
	}
	sym := &symbolizer{ixs: map[string]*index.Index{}}
	type tally struct{ total, chain int }
	tallies := map[string]*tally{}
	seenFiles := map[string]bool{}
	kernelFrames, namedKernelFrames, ddSamples := 0, 0, 0
	for ri, p := range received {
		if err := otlpprofiles.ValidateStrict(p); err != nil {
			t.Errorf("request %d fails validation: %v", ri, err)
			continue
		}
		d := p.Dictionary()
		str := func(i int32) string { return d.StringTable().At(int(i)) }
		attrs := func(idx interface {
			Len() int
			At(int) int32
		}) map[string]string {
			m := map[string]string{}
			for i := 0; i < idx.Len(); i++ {
				kv := d.AttributeTable().At(int(idx.At(i)))
				m[str(kv.KeyStrindex())] = kv.Value().AsString()
			}
			return m
		}
		for i := 1; i < d.MappingTable().Len(); i++ {
			m := d.MappingTable().At(i)
			name := str(m.FilenameStrindex())
			want, ok := wantIDs[name]
			if !ok {
				continue
			}
			seenFiles[name] = true
			a := attrs(m.AttributeIndices())
			if a[otlpattr.BuildIDHTLHash] != want.HTLHash || a[otlpattr.BuildIDGNU] != want.GNU || a[otlpattr.BuildIDGo] != want.Go {
				t.Errorf("mapping of %s: build IDs %v, want %+v", name, a, want)
			}
		}
		for r := 0; r < p.ResourceProfiles().Len(); r++ {
			rp := p.ResourceProfiles().At(r)
			pidV, _ := rp.Resource().Attributes().Get(otlpattr.ProcessPID)
			if host, _ := rp.Resource().Attributes().Get(otlpattr.HostName); host.Str() != "test-node" {
				t.Errorf("resource without host.name: %v", rp.Resource().Attributes().AsRaw())
			}
			w := byPID[pidV.Int()]
			isDD := pidV.Int() == int64(dd.Process.Pid)
			prof := rp.ScopeProfiles().At(0).Profiles().At(0)
			for s := 0; s < prof.Samples().Len(); s++ {
				smp := prof.Samples().At(s)
				count := 0
				for v := 0; v < smp.Values().Len(); v++ {
					count += int(smp.Values().At(v))
				}
				locs := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
				var user []string
				for l := 0; l < locs.Len(); l++ {
					loc := d.LocationTable().At(int(locs.At(l)))
					ft := attrs(loc.AttributeIndices())[otlpattr.FrameType]
					if ft == otlpattr.FrameTypeKernel {
						kernelFrames++
						if loc.Lines().Len() == 1 && str(d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex())).NameStrindex()) != "" {
							namedKernelFrames++
						}
						continue
					}
					if loc.MappingIndex() == 0 {
						user = append(user, "?")
						continue
					}
					path := str(d.MappingTable().At(int(loc.MappingIndex())).FilenameStrindex())
					if _, ours := wantIDs[path]; !ours {
						user = append(user, filepath.Base(path))
						continue
					}
					if w != nil && ft != w.kind {
						t.Errorf("%s: frame type %q, want %q", w.name, ft, w.kind)
					}
					fns := sym.functions(t, path, loc.Address())
					if len(fns) == 0 {
						user = append(user, fmt.Sprintf("%s+%#x", filepath.Base(path), loc.Address()))
					}
					user = append(user, fns...)
				}
				if isDD {
					ddSamples += count
				}
				if w == nil {
					continue
				}
				tl := tallies[w.name]
				if tl == nil {
					tl = &tally{}
					tallies[w.name] = tl
				}
				tl.total += count
				if len(user) >= 3 && user[0] == w.chain[0] && user[1] == w.chain[1] && user[2] == w.chain[2] {
					tl.chain += count
				} else if testing.Verbose() {
					t.Logf("%s: other stack %v", w.name, user)
				}
			}
		}
	}
	for _, w := range wls {
		tl := tallies[w.name]
		// The machine may be shared: a few dozen samples per workload is what a loaded
		// host gives in the run.
		if tl == nil || tl.total < 15 {
			t.Errorf("%s: too few samples: %+v", w.name, tl)
			continue
		}
		if frac := float64(tl.chain) / float64(tl.total); frac < 0.7 {
			t.Errorf("%s: %d of %d samples have the chain %v (%.0f%%), want >= 70%%", w.name, tl.chain, tl.total, w.chain, 100*frac)
		}
		t.Logf("%s: %d of %d samples with chain %v", w.name, tl.chain, tl.total, w.chain)
		for _, f := range w.files {
			if !seenFiles[f] {
				t.Errorf("%s: no mapping for %s", w.name, f)
			}
		}
	}
	if ddSamples == 0 || kernelFrames == 0 {
		t.Errorf("dd: %d samples, %d kernel frames", ddSamples, kernelFrames)
	} else if namedKernelFrames < kernelFrames*9/10 {
		t.Errorf("only %d of %d kernel frames have function names", namedKernelFrames, kernelFrames)
	}
	t.Logf("dd: %d samples, %d kernel frames (%d named)", ddSamples, kernelFrames, namedKernelFrames)

	// The metrics endpoint's view of the run.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.Counter != nil {
				got[mf.GetName()] += m.Counter.GetValue()
			}
			if m.Gauge != nil {
				got[mf.GetName()] += m.Gauge.GetValue()
			}
		}
	}
	if got["profsym_collector_samples_total"] == 0 || got["profsym_collector_kernel_samples_total"] < got["profsym_collector_samples_total"] {
		t.Errorf("sample counters: %v", got)
	}
	if got["profsym_collector_profiles_requests_total"] != float64(len(raw)) {
		t.Errorf("requests counter %v, built %d", got["profsym_collector_profiles_requests_total"], len(raw))
	}
}
