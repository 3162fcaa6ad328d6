//go:build linux

package agent

import (
	"context"
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/collector/internal/bpfprog"
)

// blockC runs one thread per way of blocking, each blocking in a function of its own: a
// sleep, a futex wait (a condition variable with a timeout), a read on an idle pipe (fed a
// byte every 40 ms by another thread) and an fsync.
//
//go:embed testdata/block.c
var blockC string

// offCPUSample is one off-CPU sample: its thread, its blocked nanoseconds, and its stack's
// frames (kernel frames by name, user frames as file and address).
type offCPUSample struct {
	pid     int64
	thread  string
	nanos   int64
	kernel  []string
	user    []cfiFrame
	samples int
}

// forEachOffCPUSample calls fn for every sample of every off-CPU profile (sample type
// events/nanoseconds) in p.
func forEachOffCPUSample(p pprofile.Profiles, fn func(offCPUSample)) {
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	for r := 0; r < p.ResourceProfiles().Len(); r++ {
		rp := p.ResourceProfiles().At(r)
		pidV, _ := rp.Resource().Attributes().Get(otlpattr.ProcessPID)
		for sc := 0; sc < rp.ScopeProfiles().Len(); sc++ {
			profs := rp.ScopeProfiles().At(sc).Profiles()
			for k := 0; k < profs.Len(); k++ {
				prof := profs.At(k)
				if str(prof.SampleType().TypeStrindex()) != "events" || str(prof.SampleType().UnitStrindex()) != "nanoseconds" {
					continue
				}
				for s := 0; s < prof.Samples().Len(); s++ {
					smp := prof.Samples().At(s)
					o := offCPUSample{pid: pidV.Int(), samples: smp.Values().Len()}
					for v := 0; v < smp.Values().Len(); v++ {
						o.nanos += smp.Values().At(v)
					}
					for a := 0; a < smp.AttributeIndices().Len(); a++ {
						kv := d.AttributeTable().At(int(smp.AttributeIndices().At(a)))
						if str(kv.KeyStrindex()) == otlpattr.ThreadName {
							o.thread = kv.Value().AsString()
						}
					}
					locs := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
					for l := 0; l < locs.Len(); l++ {
						loc := d.LocationTable().At(int(locs.At(l)))
						kernel := false
						for a := 0; a < loc.AttributeIndices().Len(); a++ {
							kv := d.AttributeTable().At(int(loc.AttributeIndices().At(a)))
							if str(kv.KeyStrindex()) == otlpattr.FrameType && kv.Value().AsString() == otlpattr.FrameTypeKernel {
								kernel = true
							}
						}
						if kernel {
							for ln := 0; ln < loc.Lines().Len(); ln++ {
								o.kernel = append(o.kernel, str(d.FunctionTable().At(int(loc.Lines().At(ln).FunctionIndex())).NameStrindex()))
							}
							continue
						}
						f := cfiFrame{addr: loc.Address()}
						if loc.MappingIndex() != 0 {
							f.file = str(d.MappingTable().At(int(loc.MappingIndex())).FilenameStrindex())
						}
						o.user = append(o.user, f)
					}
					fn(o)
				}
			}
		}
	}
}

func TestOffCPUProfile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for eBPF")
	}
	if err := bpfprog.CheckCFISupport(); err != nil {
		t.Skip(err)
	}
	testsupport.RequireTools(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "block.c")
	if err := os.WriteFile(src, []byte(blockC), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(out, src string, args ...string) {
		cmd := exec.CommandContext(t.Context(), "gcc", append([]string{"-O2", "-g", "-o", out, src}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, b)
		}
	}
	block, busy := filepath.Join(dir, "block"), filepath.Join(dir, "busy")
	build(block, src, "-pthread")
	busySrc := filepath.Join(dir, "busy.c")
	if err := os.WriteFile(busySrc, []byte(chain5C), 0o644); err != nil {
		t.Fatal(err)
	}
	build(busy, busySrc)

	const secs = 20
	started := time.Now()
	blockCmd := exec.CommandContext(t.Context(), block, "40", dir)
	busyCmd := exec.CommandContext(t.Context(), busy, "40")
	for _, c := range []*exec.Cmd{blockCmd, busyCmd} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = c.Process.Kill()
			_ = c.Wait() // the kill comes back as an error
		}()
	}
	time.Sleep(300 * time.Millisecond) // let the dynamic loader map the libraries

	var reqs requestLog
	reg := prometheus.NewRegistry()
	a, err := New(Config{
		FrequencyHz: 19, Interval: time.Second, Unwinder: bpfprog.UnwindCFI,
		PIDs: []uint32{uint32(blockCmd.Process.Pid), uint32(busyCmd.Process.Pid)},
		// Every blocking counts: an fsync on a fast disk may block for less than a millisecond.
		OffCPU: &bpfprog.OffCPUOptions{Probability: 1},
		Sinks:  []func([]byte){reqs.add}, Registerer: reg,
	}, nil)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	time.Sleep(secs * time.Second)
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	elapsed := time.Since(started)

	// Per thread: the function it blocks in (user) and the kernel functions any of which
	// its kernel stack shows (names differ between kernel versions).
	want := map[string]struct {
		user   string
		kernel []string
	}{
		"t_sleep": {"sleeper", []string{"do_nanosleep", "hrtimer_nanosleep"}},
		"t_futex": {"waiter", []string{"futex_wait", "futex_wait_queue", "__futex_wait", "futex_wait_queue_me"}},
		"t_pipe":  {"reader", []string{"pipe_read", "anon_pipe_read"}},
		"t_fsync": {"syncer", []string{"do_fsync", "vfs_fsync_range", "__x64_sys_fsync", "__arm64_sys_fsync"}},
	}
	type tally struct{ total, user, kernel int64 }
	tallies := map[string]*tally{}
	var busyNanos int64
	examples := map[string]string{}
	sym := &cfiSymbolizer{ixs: map[string]*index.Index{}}
	for _, b := range reqs.all() {
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b); err != nil {
			t.Fatalf("request does not decode: %v", err)
		}
		forEachOffCPUSample(req.Profiles(), func(o offCPUSample) {
			if o.pid == int64(busyCmd.Process.Pid) {
				busyNanos += o.nanos
				return
			}
			w, ok := want[o.thread]
			if !ok {
				return
			}
			tl := tallies[o.thread]
			if tl == nil {
				tl = &tally{}
				tallies[o.thread] = tl
			}
			tl.total += o.nanos
			var names []string
			for _, f := range o.user {
				if f.file == "" {
					names = append(names, "?")
					continue
				}
				names = append(names, sym.functions(t, f.file, f.addr)...)
			}
			if containsChain(names, []string{w.user, "__libc_start_call_main"}) || containsChain(names, []string{w.user, "start_thread"}) {
				tl.user += o.nanos
			} else if _, seen := examples[o.thread]; !seen {
				examples[o.thread] = strings.Join(names, ";")
			}
			if slices.ContainsFunc(o.kernel, func(k string) bool { return slices.Contains(w.kernel, k) }) {
				tl.kernel += o.nanos
			}
		})
	}
	for thread, w := range want {
		tl := tallies[thread]
		if tl == nil || tl.total == 0 {
			t.Errorf("%s: no off-CPU time", thread)
			continue
		}
		userShare, kernelShare := float64(tl.user)/float64(tl.total), float64(tl.kernel)/float64(tl.total)
		t.Logf("%-8s %6.2f s off the CPU, %5.1f%% in %s, %5.1f%% with the kernel's %v", thread, float64(tl.total)/1e9, 100*userShare, w.user, 100*kernelShare, w.kernel)
		if userShare < 0.9 {
			t.Errorf("%s: %.1f%% of its blocked time in %s, want at least 90%%; e.g. %s", thread, 100*userShare, w.user, examples[thread])
		}
		if kernelShare < 0.9 {
			t.Errorf("%s: %.1f%% of its blocked time with a kernel frame of %v, want at least 90%%", thread, 100*kernelShare, w.kernel)
		}
	}
	// The CPU-bound process blocks only where its start-up and the machine make it.
	t.Logf("CPU-bound process: %.3f s off the CPU in %.1f s", float64(busyNanos)/1e9, elapsed.Seconds())
	if busyNanos > int64(elapsed/50) {
		t.Errorf("CPU-bound process off the CPU for %v of %v: more than 2%%", time.Duration(busyNanos), elapsed)
	}
}
