//go:build linux

// Package agent ties the collector together: the eBPF sampler feeds samples into a profile
// builder, and every interval the finished OTLP request goes to the exporter and the
// output file.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/services/collector/internal/bpfprog"
	"github.com/profsym/profsym/services/collector/internal/kallsyms"
	"github.com/profsym/profsym/services/collector/internal/kernelid"
	"github.com/profsym/profsym/services/collector/internal/perfmap"
	"github.com/profsym/profsym/services/collector/internal/procmaps"
	"github.com/profsym/profsym/services/collector/internal/profilebuilder"
	"github.com/profsym/profsym/services/collector/internal/unwind"
)

// Config configures an agent.
type Config struct {
	FrequencyHz int
	Interval    time.Duration
	PIDs        []uint32
	CgroupIDs   []uint64
	// HostAttributes are added to every resource (host.name, k8s.node.name, ...).
	HostAttributes map[string]string
	// MaxSamplesPerInterval bounds the distinct samples of one request.
	MaxSamplesPerInterval int
	// MaxFiles bounds the build-ID cache.
	MaxFiles int
	// ProcRoot and KallsymsPath default to /proc and /proc/kallsyms.
	ProcRoot, KallsymsPath string
	// Sinks receive every finished request, encoded as an ExportProfilesServiceRequest.
	Sinks []func(data []byte)
	// OnMappedFile, when set, is called for each executable file mapping found in a
	// process's maps (see procmaps.Table.SetFileHook); it must not block.
	OnMappedFile func(procmaps.MappedFile)
	// Unwinder is how user stacks are walked (bpfprog.UnwindCFI or UnwindFramePointers),
	// and UnwindRows, UnwindFiles, UnwindProcs size the CFI unwinder's maps (zero: defaults).
	Unwinder bpfprog.Unwinder
	// UnwinderFallBack lets a kernel that refuses the CFI unwinder (or off-CPU profiling) give
	// frame-pointer profiles (or CPU profiles only) with the reason logged and in Mode, not
	// an error (--unwinder=auto).
	UnwinderFallBack                     bool
	UnwindRows, UnwindFiles, UnwindProcs uint32
	// PerfMaps names frames in JIT code from the perf-PID.map files runtimes write (see
	// package perfmap), within PerfMapMaxBytesPerProcess and PerfMapMaxBytes (zero:
	// defaults).
	PerfMaps                                   bool
	PerfMapMaxBytesPerProcess, PerfMapMaxBytes int64
	// OffCPU, when set, adds an off-CPU profile per process: where tasks blocked, weighted
	// by how long.
	OffCPU *bpfprog.OffCPUOptions
	// KernelBuildIDs makes kernel frames symbolizable centrally (see package kernelid) where
	// the kernel's and modules' identities can be read.
	KernelBuildIDs bool
	// SysRoot defaults to /sys.
	SysRoot string
	// Registerer receives the agent's metrics (nil: not registered).
	Registerer prometheus.Registerer
	Version    string
}

// Agent is a running collector.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	sampler *bpfprog.Sampler
	unwind  *unwind.Manager // nil with frame-pointer unwinding
	procs   *procmaps.Table
	files   *procmaps.FileCache
	kernel  *kallsyms.Table
	kernID  *kernelid.Kernel // nil without KernelBuildIDs
	jit     *perfmap.Table   // nil without PerfMaps

	mu         sync.Mutex
	builder    *profilebuilder.Builder
	intervalAt time.Time

	// Kernel counters as last read: they stay readable after the sampler is closed.
	countersMu sync.Mutex
	counters   bpfprog.Counters
	closed     bool

	m metrics
}

type metrics struct {
	samples        prometheus.Counter
	builderDropped prometheus.Counter
	requests       prometheus.Counter
	requestBytes   prometheus.Counter
	procEvents     *prometheus.CounterVec
}

// New loads the eBPF programs and starts sampling; Run must follow to consume the samples.
func New(cfg Config, log *slog.Logger) (*Agent, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("interval %v must be positive", cfg.Interval)
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.KallsymsPath == "" {
		cfg.KallsymsPath = "/proc/kallsyms"
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = 4096
	}
	a := &Agent{cfg: cfg, log: log, files: procmaps.NewFileCache(cfg.MaxFiles)}
	a.procs = procmaps.NewTable(cfg.ProcRoot, a.files, log)
	if cfg.PerfMaps {
		a.jit = perfmap.NewTable(perfmap.Options{ProcRoot: cfg.ProcRoot, MaxBytesPerProcess: cfg.PerfMapMaxBytesPerProcess,
			MaxBytes: cfg.PerfMapMaxBytes, MinRefresh: time.Second, Log: log})
	}
	if cfg.OnMappedFile != nil {
		a.procs.SetFileHook(cfg.OnMappedFile)
	}
	k, err := kallsyms.Load(cfg.KallsymsPath)
	if err != nil {
		// Kernel frames then go out with addresses only; user stacks are what matters most.
		log.Warn("kernel frames will not be symbolized", "err", err)
	} else {
		a.kernel = k
	}
	if cfg.KernelBuildIDs && a.kernel != nil {
		a.kernID = a.loadKernelID()
	}
	a.registerMetrics()
	a.builder = a.newBuilder()
	a.intervalAt = time.Now()
	a.sampler, err = bpfprog.Open(bpfprog.Options{FrequencyHz: cfg.FrequencyHz, PIDs: cfg.PIDs, CgroupIDs: cfg.CgroupIDs,
		Unwinder: cfg.Unwinder, UnwindRows: cfg.UnwindRows, UnwindFiles: cfg.UnwindFiles, UnwindProcs: cfg.UnwindProcs,
		Paused: cfg.Unwinder == bpfprog.UnwindCFI, OffCPU: cfg.OffCPU, FallBack: cfg.UnwinderFallBack}, log)
	if err != nil {
		return nil, err
	}
	a.registerModeMetrics()
	if !a.sampler.CFI() && cfg.Unwinder == bpfprog.UnwindCFI {
		// Opened paused for a CFI unwinder that fell back to frame pointers: nothing to preload.
		if err := a.sampler.Start(); err != nil {
			a.closeSampler()
			return nil, err
		}
	}
	if a.sampler.CFI() {
		a.unwind, err = unwind.New(unwind.Config{Maps: a.sampler.Unwind(), Registerer: cfg.Registerer, Log: log})
		if err != nil {
			a.closeSampler()
			return nil, err
		}
		// Every maps read (a new process, an exec, a dlopen found by an address outside the
		// known mappings) reaches the kernel unwinder.
		a.procs.SetProcessHook(a.unwind.Update)
		// The processes running now are known to the unwinder before the first sample, so
		// their stacks are whole from the start.
		began := time.Now()
		n := a.preload()
		a.unwind.Flush()
		st := a.unwind.Stats()
		log.Info("unwind tables loaded", "processes", n, "tables", st.FilesLoaded, "rows", st.RowsUsed, "took", time.Since(began).Round(time.Millisecond))
		if err := a.sampler.Start(); err != nil {
			a.closeSampler()
			return nil, err
		}
	}
	return a, nil
}

// Mode says how user stacks are walked ("cfi", "frame-pointers", "frame-pointers-compat") and,
// when the kernel refused what was asked, why.
func (a *Agent) Mode() (string, error) { return a.sampler.Mode() }

// OffCPUOff says why off-CPU profiling, asked for, is off on this kernel (nil otherwise).
func (a *Agent) OffCPUOff() error { return a.sampler.OffCPUOff() }

// registerModeMetrics exports the unwinder the kernel accepted and whether off-CPU
// profiling, asked for, runs, each as a gauge of 1 with the reason as a label.
func (a *Agent) registerModeMetrics() {
	reg := a.cfg.Registerer
	if reg == nil {
		return
	}
	mode, fellBack := a.sampler.Mode()
	reason := "as_configured"
	if fellBack != nil {
		reason = "cfi_refused_by_kernel"
	}
	unwinder := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "profsym_collector", Name: "unwinder",
		Help: "How user stacks are walked (mode: cfi, frame-pointers, frame-pointers-compat), with why when it is not what was configured (reason: as_configured, cfi_refused_by_kernel; the log has the kernel's words): 1."},
		[]string{"mode", "reason"})
	unwinder.WithLabelValues(mode, reason).Set(1)
	reg.MustRegister(unwinder)
	if a.cfg.OffCPU != nil {
		state, why := "on", "as_configured"
		if a.sampler.OffCPUOff() != nil {
			state, why = "off", "refused_by_kernel"
		}
		offCPU := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "profsym_collector", Name: "off_cpu",
			Help: "Whether off-CPU profiling, configured, runs (state: on, off), with why (reason: as_configured, refused_by_kernel): 1."},
			[]string{"state", "reason"})
		offCPU.WithLabelValues(state, why).Set(1)
		reg.MustRegister(offCPU)
	}
}

func (a *Agent) newBuilder() *profilebuilder.Builder {
	opts := profilebuilder.Options{
		FrequencyHz:    a.cfg.FrequencyHz,
		HostAttributes: a.cfg.HostAttributes,
		MaxSamples:     a.cfg.MaxSamplesPerInterval,
		ScopeName:      "profsym-collector",
		ScopeVersion:   a.cfg.Version,
	}
	if a.jit != nil {
		opts.JIT = a.jit
	}
	opts.KernelID = a.kernID
	return profilebuilder.New(opts, a.procs, a.kernel)
}

func (a *Agent) registerMetrics() {
	const ns = "profsym_collector"
	a.m = metrics{
		samples: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "samples_total",
			Help: "Stack samples received from the kernel."}),
		builderDropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "samples_dropped_total",
			Help: "Samples dropped because an interval held the maximum number of distinct samples."}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "profiles_requests_total",
			Help: "OTLP requests built (one per non-empty interval)."}),
		requestBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "profiles_request_bytes_total",
			Help: "Encoded bytes of the OTLP requests built."}),
		procEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "process_events_total",
			Help: "Process exec and exit notifications."}, []string{"event"}),
	}
	reg := a.cfg.Registerer
	if reg == nil {
		return
	}
	kernelCounter := func(name, help string, pick func(bpfprog.Counters) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, func() float64 {
			return float64(pick(a.kernelCounters()))
		})
	}
	for _, end := range bpfprog.UnwindEnds() {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "unwind_stacks_total",
			Help:        "User stacks walked by the CFI unwinder, by how the walk ended (outermost, zero and depth are whole stacks; the others end where a frame could not be unwound).",
			ConstLabels: prometheus.Labels{"end": end.String()}},
			func() float64 { return float64(a.kernelCounters().UnwindEnds[end]) }))
	}
	if a.jit != nil {
		a.registerPerfMapMetrics(reg)
	}
	reg.MustRegister(a.m.samples, a.m.builderDropped, a.m.requests, a.m.requestBytes, a.m.procEvents,
		kernelCounter("kernel_samples_total", "Samples the eBPF program wrote to the ring buffer.",
			func(c bpfprog.Counters) uint64 { return c.Samples }),
		kernelCounter("lost_samples_total", "Samples lost in the kernel because the ring buffer was full.",
			func(c bpfprog.Counters) uint64 { return c.Lost }),
		kernelCounter("filtered_samples_total", "Samples of processes excluded by the pid or cgroup filters.",
			func(c bpfprog.Counters) uint64 { return c.Filtered }),
		kernelCounter("lost_process_events_total", "Exec or exit notifications lost because the ring buffer was full.",
			func(c bpfprog.Counters) uint64 { return c.ProcLost }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "unwind_leaf_only_total",
			Help: "Samples of processes whose mappings the CFI unwinder did not know yet: their user stack is the sampled address only."},
			func() float64 { return float64(a.kernelCounters().LeafOnly) }),
		kernelCounter("off_cpu_recorded_total", "Blocking context switches whose stack was recorded (a sampled share of them, --off-cpu-probability).",
			func(c bpfprog.Counters) uint64 { return c.OffCPURecorded }),
		kernelCounter("off_cpu_samples_total", "Off-CPU stacks sent when their task ran again.",
			func(c bpfprog.Counters) uint64 { return c.OffCPUSent }),
		kernelCounter("off_cpu_short_total", "Recorded off-CPU stacks dropped because the task ran again sooner than --off-cpu-min-blocked.",
			func(c bpfprog.Counters) uint64 { return c.OffCPUShort }),
		kernelCounter("off_cpu_lost_total", "Off-CPU blockings lost: no task storage could be had, or the ring buffer was full.",
			func(c bpfprog.Counters) uint64 { return c.OffCPULost }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "processes_tracked",
			Help: "Processes whose mappings are cached."}, func() float64 { return float64(a.procs.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "files_cached",
			Help: "Mapped files whose build IDs are cached."}, func() float64 { return float64(a.files.Len()) }),
	)
}

// kernelCounters reads the kernel-side counters, or returns their last value once the
// sampler is closed.
func (a *Agent) kernelCounters() bpfprog.Counters {
	a.countersMu.Lock()
	defer a.countersMu.Unlock()
	if !a.closed && a.sampler != nil {
		if c, err := a.sampler.Counters(); err == nil {
			a.counters = c
		}
	}
	return a.counters
}

func (a *Agent) closeSampler() {
	a.kernelCounters()
	a.countersMu.Lock()
	defer a.countersMu.Unlock()
	a.closed = true
	if err := a.sampler.Close(); err != nil {
		a.log.Warn("detach eBPF programs", "err", err)
	}
}

// HandleSample implements bpfprog.Handler.
func (a *Agent) HandleSample(s *bpfprog.Sample) {
	a.m.samples.Inc()
	a.mu.Lock()
	defer a.mu.Unlock()
	before := a.builder.Dropped()
	a.builder.Add(&profilebuilder.Sample{Time: s.Time, PID: s.TGID, TID: s.TID, Comm: s.Comm, Kernel: s.Kernel, User: s.User, LeafReturn: s.LeafReturn, OffCPU: s.OffCPU})
	if a.builder.Dropped() > before {
		a.m.builderDropped.Inc()
	}
}

// HandleProcEvent implements bpfprog.Handler.
func (a *Agent) HandleProcEvent(e bpfprog.ProcEvent) {
	switch e.Kind {
	case bpfprog.ProcExec:
		a.m.procEvents.WithLabelValues("exec").Inc()
		a.procs.MarkExec(e.TGID)
		if a.jit != nil {
			a.jit.MarkExec(e.TGID)
		}
	case bpfprog.ProcExit:
		a.m.procEvents.WithLabelValues("exit").Inc()
		a.procs.MarkExit(e.TGID)
		if a.jit != nil {
			a.jit.MarkExit(e.TGID)
		}
		if a.unwind != nil {
			a.unwind.Forget(e.TGID)
		}
	}
}

// Run consumes samples and reports every interval until ctx ends, then reports what the
// last partial interval holds and detaches.
func (a *Agent) Run(ctx context.Context) error {
	defer a.closeSampler()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.sampler.Run(runCtx, a) }()
	if a.unwind != nil {
		done := make(chan struct{})
		go func() { defer close(done); a.unwind.Run(runCtx) }()
		defer func() { cancel(); <-done }()
	}
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			a.Flush()
		case err := <-errc:
			a.Flush()
			if err != nil {
				return fmt.Errorf("sampler: %w", err)
			}
			// The sampler also ends when ctx does, and select may take this case first.
			if ctx.Err() != nil {
				return nil
			}
			return errors.New("sampler stopped")
		case <-ctx.Done():
			cancel()
			err := <-errc
			a.Flush()
			return err
		}
	}
}

// preload reads the mappings of the processes running at start (a process the unwinder
// does not know yet gets its leaf frame only); later processes are learnt from their first
// samples. It returns how many processes it read.
func (a *Agent) preload() int {
	pids := a.cfg.PIDs
	if len(pids) == 0 {
		entries, err := os.ReadDir(a.cfg.ProcRoot)
		if err != nil {
			a.log.Warn("list processes", "err", err)
			return 0
		}
		for _, e := range entries {
			if pid, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
				pids = append(pids, uint32(pid))
			}
		}
	}
	// A table of its own, without the file hook: a process running now offers its files for
	// upload when it is sampled, as any process does, not all at start.
	pre := procmaps.NewTable(a.cfg.ProcRoot, a.files, a.log)
	pre.SetProcessHook(a.unwind.Update)
	for _, pid := range pids {
		pre.Process(pid)
	}
	return len(pids)
}

// Flush finishes the current interval and hands its request to the sinks.
func (a *Agent) Flush() {
	now := time.Now()
	a.mu.Lock()
	b, start := a.builder, a.intervalAt
	a.builder, a.intervalAt = a.newBuilder(), now
	a.mu.Unlock()

	n := b.Len()
	if n > 0 {
		prof := b.Finish(start, now)
		// Marshaling rewrites attributes in place; the builder's data is not used after.
		data, err := pprofileotlp.NewExportRequestFromProfiles(prof).MarshalProto()
		if err != nil {
			a.log.Error("encode profiles request", "err", err)
		} else {
			a.m.requests.Inc()
			a.m.requestBytes.Add(float64(len(data)))
			for _, sink := range a.cfg.Sinks {
				sink(data)
			}
			a.log.Debug("interval reported", "samples", n, "bytes", len(data), "dropped", b.Dropped())
		}
	}
	// Exited processes are forgotten only now, so their last samples had their mappings.
	a.procs.Sweep()
	if a.jit != nil {
		a.jit.Sweep()
	}
}

// loadKernelID reads the kernel's identity for symbolizable kernel frames, and says in the
// log and in profsym_collector_kernel_frames what kernel frames carry.
func (a *Agent) loadKernelID() *kernelid.Kernel {
	k, err := kernelid.Load(kernelid.Options{ProcRoot: a.cfg.ProcRoot, SysRoot: a.cfg.SysRoot}, a.kernel)
	state, reason := "symbolizable", ""
	switch {
	case err != nil:
		a.log.Warn("kernel frames carry names only", "err", err)
		state, reason = "names_only", "no_release"
		k = nil
	case k.BuildID == "":
		a.log.Warn("kernel frames carry names only: /sys/kernel/notes has no GNU build ID", "release", k.Release)
		state, reason = "names_only", "no_build_id"
	case !k.Normalizable():
		a.log.Warn("kernel image frames carry names only (module frames are still symbolizable)", "release", k.Release, "build_id", k.BuildID, "err", k.OffsetErr)
		state, reason = "names_only", "kaslr_offset_unknown"
	default:
		reason = k.Source
		a.log.Info("kernel frames symbolizable", "release", k.Release, "build_id", k.BuildID, "kaslr_offset_from", k.Source)
	}
	if reg := a.cfg.Registerer; reg != nil {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "profsym_collector", Name: "kernel_frames",
			Help: "What kernel image frames carry (state: symbolizable, an address of vmlinux with its build ID; names_only, the kallsyms name), with where the KASLR offset came from or why they cannot be (reason: vmcoreinfo, xen_entry_note, nokaslr, default_base; no_release, no_build_id, kaslr_offset_unknown): 1."},
			[]string{"state", "reason"})
		g.WithLabelValues(state, reason).Set(1)
		reg.MustRegister(g)
	}
	return k
}
