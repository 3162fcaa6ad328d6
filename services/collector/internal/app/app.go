//go:build linux

// Package app is the collector's command line: flags (each with an environment variable),
// logging, the metrics endpoint, and the wiring of agent, exporter and output file with a
// graceful shutdown.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/tracing"
	"github.com/profsym/profsym/services/collector/internal/agent"
	"github.com/profsym/profsym/services/collector/internal/bpfprog"
	"github.com/profsym/profsym/services/collector/internal/debugupload"
	"github.com/profsym/profsym/services/collector/internal/exporter"
	"github.com/profsym/profsym/services/collector/internal/nodescan"
	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

// CLI holds the collector's flags.
type CLI struct {
	Frequency int           `default:"19" env:"PROFSYM_FREQUENCY" help:"Sampling frequency per CPU, in Hz. Take one like 19 or 99: at 20 Hz the samples fall at the same two points of every 100 ms CPU period of a CPU-limited container, which then gets from none to twice its share of them (the collector warns at such frequencies)."`
	Interval  time.Duration `default:"10s" env:"PROFSYM_INTERVAL" help:"How often a profiles request is reported."`

	Gateway                   string        `env:"PROFSYM_GATEWAY" help:"Gateway OTLP/gRPC endpoint (host:port). Empty: no export (use --output-file)."`
	GatewayInsecure           bool          `env:"PROFSYM_GATEWAY_INSECURE" help:"Talk to the gateway in plain text instead of TLS."`
	GatewayCAFile             string        `name:"gateway-ca-file" env:"PROFSYM_GATEWAY_CA_FILE" help:"PEM CA bundle that signs the gateway's certificate (default: system roots)."`
	GatewayCertFile           string        `env:"PROFSYM_GATEWAY_CERT_FILE" help:"Client certificate (PEM) for mutual TLS."`
	GatewayKeyFile            string        `env:"PROFSYM_GATEWAY_KEY_FILE" help:"Client private key (PEM) for mutual TLS."`
	GatewayServerName         string        `env:"PROFSYM_GATEWAY_SERVER_NAME" help:"Name to verify in the gateway's certificate."`
	GatewayInsecureSkipVerify bool          `env:"PROFSYM_GATEWAY_INSECURE_SKIP_VERIFY" help:"Do not verify the gateway's certificate (testing only)."`
	GatewayTimeout            time.Duration `default:"10s" env:"PROFSYM_GATEWAY_TIMEOUT" help:"Timeout of one export attempt."`
	BufferBytes               int           `default:"8388608" env:"PROFSYM_BUFFER_BYTES" help:"Encoded bytes of requests held while the gateway is away; the oldest are dropped beyond it."`
	BufferRequests            int           `default:"60" env:"PROFSYM_BUFFER_REQUESTS" help:"Requests held while the gateway is away; the oldest are dropped beyond it."`

	PID    []uint32 `name:"pid" sep:"," env:"PROFSYM_PIDS" help:"Profile only these processes (comma-separated pids)."`
	Cgroup []string `name:"cgroup" sep:"," env:"PROFSYM_CGROUPS" help:"Profile only tasks in these cgroup v2 directories and their children (absolute, or relative to /sys/fs/cgroup)."`

	OutputFile string `env:"PROFSYM_OUTPUT_FILE" help:"Also append each request to this file as a length-delimited OTLP ExportProfilesServiceRequest."`

	MetricsAddr string `default:"127.0.0.1:9464" env:"PROFSYM_METRICS_ADDR" help:"Address of the /metrics, /healthz and /readyz endpoint (loopback by default; a DaemonSet names its pod port: --metrics-addr=:9464). Empty: none."`
	LogLevel    string `default:"info" enum:"debug,info,warn,error" env:"PROFSYM_LOG_LEVEL" help:"Log level (debug, info, warn, error)."`
	LogFormat   string `default:"text" enum:"text,json" env:"PROFSYM_LOG_FORMAT" help:"Log format (text, json)."`

	HostName     string `env:"PROFSYM_HOST_NAME" help:"host.name resource attribute (default: the node's hostname)."`
	K8sNodeName  string `name:"k8s-node-name" env:"K8S_NODE_NAME" help:"k8s.node.name resource attribute (downward API: spec.nodeName)."`
	K8sPodName   string `name:"k8s-pod-name" env:"K8S_POD_NAME" help:"k8s.pod.name resource attribute, for a collector that profiles its own pod (a sidecar with shareProcessNamespace)."`
	K8sNamespace string `name:"k8s-namespace" env:"K8S_NAMESPACE" help:"k8s.namespace.name resource attribute, with --k8s-pod-name."`

	Unwinder           string `default:"auto" enum:"auto,cfi,frame-pointers" env:"PROFSYM_UNWINDER" help:"How user stacks are walked: auto (cfi where the kernel accepts it, else frame-pointers with a warning, the mode in the profsym_collector_unwinder metric and on /readyz), cfi (unwind tables from each binary's .eh_frame, frame pointers for Go; needs Linux 5.17; an error where the kernel refuses it) or frame-pointers (the kernel's walk only: stacks through code built without frame pointers come out short; Linux 5.8)."`
	UnwindTableRows    uint32 `default:"4194304" env:"PROFSYM_UNWIND_TABLE_ROWS" help:"Unwind-table rows the kernel holds (16 bytes each; libc needs about 30000): when full, the least recently used tables are evicted (counted)."`
	UnwindMaxFiles     uint32 `default:"4096" env:"PROFSYM_UNWIND_MAX_FILES" help:"Files with an unwind table in the kernel at once."`
	UnwindMaxProcesses uint32 `default:"8192" env:"PROFSYM_UNWIND_MAX_PROCESSES" help:"Processes the kernel unwinder knows at once (about 10 KiB each, allocated on use)."`

	PerfMaps                  bool  `default:"true" negatable:"" env:"PROFSYM_PERF_MAPS" help:"Name frames in JIT code (Node.js with --perf-basic-prof, Java after jcmd PID Compiler.perfmap, Python 3.12+ with -X perf) from the /tmp/perf-PID.map file each process writes in its own file system (--no-perf-maps: such frames stay addresses)."`
	PerfMapMaxBytesPerProcess int64 `default:"16777216" env:"PROFSYM_PERF_MAP_MAX_BYTES_PER_PROCESS" help:"Memory for one process's perf-map symbols; beyond it its earliest symbols are dropped (counted)."`
	PerfMapMaxBytes           int64 `default:"67108864" env:"PROFSYM_PERF_MAP_MAX_BYTES" help:"Memory for all processes' perf-map symbols; beyond it the growing process's earliest symbols are dropped (counted)."`

	KernelBuildIDs bool `default:"true" negatable:"" env:"PROFSYM_KERNEL_BUILD_IDS" help:"Send kernel frames so that the symbolizer can give them files, lines and inlined frames from the kernel's debug image (vmlinux) and modules' debug files, as user frames get: each keeps its /proc/kallsyms name and travels as an address of vmlinux (KASLR undone, read from /proc/kcore's VMCOREINFO) or of the module's .ko, with the file's build ID (/sys/kernel/notes, /sys/module/NAME/notes). Frames whose identity cannot be read keep their name only (--no-kernel-build-ids: all do, with runtime addresses)."`

	MaxSamplesPerInterval int `default:"65536" env:"PROFSYM_MAX_SAMPLES_PER_INTERVAL" help:"Distinct samples held per interval; beyond it samples are dropped and counted."`

	CheckKernel bool `name:"check-kernel" help:"Load each eBPF program on this kernel, print one JSON line per program (name, loaded, the instructions the verifier processed, the kernel's reason for a refusal) and the mode --unwinder=auto would run in, and exit: nothing is sampled. Exit status 1 when no sampling program loads."`

	OffCPU OffCPU `embed:"" group:"Off-CPU profiling"`

	Upload DebuginfoUpload `embed:"" group:"Node-side debuginfo upload"`
}

// OffCPU are the flags of the opt-in off-CPU profile.
type OffCPU struct {
	OffCPU            bool          `name:"off-cpu" env:"PROFSYM_OFF_CPU" help:"Also profile where tasks block (locks, I/O, sleeps, page faults): each process gets an off-CPU profile beside its CPU profile, its samples weighted by the nanoseconds the task was off the CPU (sample type events/nanoseconds, as the OpenTelemetry eBPF profiler sends). Hooks every context switch (the sched_switch BTF tracepoint: Linux 5.15, 5.17 with the CFI unwinder)."`
	OffCPUProbability float64       `name:"off-cpu-probability" default:"0.01" env:"PROFSYM_OFF_CPU_PROBABILITY" help:"Share of blocking context switches whose stack is recorded, in (0, 1]: the cost grows with it. Values are not scaled: divide the totals by it to estimate all blocked time."`
	OffCPUMinBlocked  time.Duration `name:"off-cpu-min-blocked" default:"1ms" env:"PROFSYM_OFF_CPU_MIN_BLOCKED" help:"Blockings shorter than this are not sent."`
}

// DebuginfoUpload are the flags of the opt-in node-side debuginfo upload.
type DebuginfoUpload struct {
	UploadDebuginfo   bool    `env:"PROFSYM_UPLOAD_DEBUGINFO" help:"Offer binaries with symbols (DWARF, .symtab, Go pclntab) seen in mappings to the symbolizer, once each, and for a stripped one the separate debug file its process's filesystem holds under /usr/lib/debug/.build-id (a distribution's debug package, with its dwz file); debuginfo from CI always wins."`
	SymbolizerURL     string  `env:"PROFSYM_SYMBOLIZER_URL" help:"Symbolizer base URL for --upload-debuginfo (http://host:7070)."`
	UploadTokenFile   string  `env:"PROFSYM_UPLOAD_TOKEN_FILE" help:"File holding the upload bearer token (re-read for every file, so a rotated Secret applies)."`
	UploadMaxBytes    int64   `default:"268435456" env:"PROFSYM_UPLOAD_MAX_BYTES" help:"Files larger than this are not uploaded."`
	UploadBytesPerSec float64 `name:"upload-bytes-per-second" default:"2097152" env:"PROFSYM_UPLOAD_BYTES_PER_SECOND" help:"Upload bandwidth limit."`
	UploadQueue       int     `default:"64" env:"PROFSYM_UPLOAD_QUEUE" help:"Files waiting for upload; more are dropped (counted) and offered again when seen again."`

	UploadOnly   bool          `env:"PROFSYM_UPLOAD_ONLY" help:"Sample nothing and load no eBPF program: walk the node's processes every --scan-interval and upload what the symbolizer wants of their executables and libraries (beside any profiler, e.g. the OpenTelemetry eBPF profiler). Needs --symbolizer-url; --gateway is not used."`
	ScanInterval time.Duration `default:"30s" env:"PROFSYM_SCAN_INTERVAL" help:"How often --upload-only walks the node's processes."`
}

// Validate checks flag combinations kong cannot.
func (c *CLI) Validate() error {
	if c.CheckKernel {
		return nil
	}
	if c.Frequency < 1 || c.Frequency > 10000 {
		return fmt.Errorf("--frequency %d out of range 1..10000", c.Frequency)
	}
	if c.Interval < time.Second {
		return fmt.Errorf("--interval %v below 1s", c.Interval)
	}
	if c.Upload.UploadOnly {
		if c.Upload.SymbolizerURL == "" {
			return errors.New("--upload-only needs --symbolizer-url")
		}
		if c.Upload.ScanInterval < time.Second {
			return fmt.Errorf("--scan-interval %v below 1s", c.Upload.ScanInterval)
		}
		return nil
	}
	// Zero (a CLI built in code) means the defaults.
	if per, all := c.PerfMapMaxBytesPerProcess, c.PerfMapMaxBytes; per < 0 || all < 0 || (per > 0 && per < 1<<10) || (per > 0 && all > 0 && all < per) {
		return fmt.Errorf("--perf-map-max-bytes-per-process %d must be at least 1024 and at most --perf-map-max-bytes %d", per, all)
	}
	if c.Gateway == "" && c.OutputFile == "" {
		return errors.New("nowhere to send profiles: set --gateway, --output-file or both")
	}
	if c.OffCPU.OffCPU {
		if p := c.OffCPU.OffCPUProbability; !(p > 0 && p <= 1) {
			return fmt.Errorf("--off-cpu-probability %v out of range (0, 1]", p)
		}
		if c.OffCPU.OffCPUMinBlocked < 0 {
			return fmt.Errorf("--off-cpu-min-blocked %v is negative", c.OffCPU.OffCPUMinBlocked)
		}
	}
	if c.Upload.UploadDebuginfo && c.Upload.SymbolizerURL == "" {
		return errors.New("--upload-debuginfo needs --symbolizer-url")
	}
	return nil
}

// Logger builds the slog logger the flags ask for.
func (c *CLI) Logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// Run runs the collector until ctx ends.
func (c *CLI) Run(ctx context.Context, log *slog.Logger, version string) (retErr error) {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.CheckKernel {
		return checkKernel(os.Stdout)
	}
	// Traces of exports and uploads, when OTEL_EXPORTER_OTLP_ENDPOINT says where; off by default.
	stopTraces, err := tracing.Install(ctx, "profsym-collector", log)
	if err != nil {
		return err
	}
	defer stopTraces()
	cgroupIDs := make([]uint64, 0, len(c.Cgroup))
	for _, p := range c.Cgroup {
		id, err := CgroupID(p)
		if err != nil {
			return err
		}
		cgroupIDs = append(cgroupIDs, id)
	}
	host := c.HostName
	if host == "" {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if c.Upload.UploadOnly {
		return c.runUploadOnly(ctx, reg, log)
	}
	if p := cpuPeriodPoints(c.Frequency); p < 10 {
		log.Warn("the sampling frequency meets the 100 ms CPU period of CPU-limited containers at few points of it: "+
			"a container held to its limit is sampled where its runs fall against those points, from none of its samples "+
			"to twice its share, for as long as both run; take a frequency like 19 or 99",
			"frequency_hz", c.Frequency, "points", p)
	}

	var sinks []func([]byte)
	var exp *exporter.Exporter
	if c.Gateway != "" {
		var err error
		exp, err = exporter.New(exporter.Options{
			Endpoint: c.Gateway, Insecure: c.GatewayInsecure, CAFile: c.GatewayCAFile,
			CertFile: c.GatewayCertFile, KeyFile: c.GatewayKeyFile, ServerName: c.GatewayServerName,
			InsecureSkipVerify: c.GatewayInsecureSkipVerify, Timeout: c.GatewayTimeout,
			MaxBufferBytes: c.BufferBytes, MaxBufferRequests: c.BufferRequests,
		}, exporter.NewMetrics(reg), log)
		if err != nil {
			return err
		}
		sinks = append(sinks, exp.Enqueue)
	}
	if c.OutputFile != "" {
		fw, err := exporter.NewFileWriter(c.OutputFile)
		if err != nil {
			return err
		}
		// The file was written to: a failed close can mean records that never reached the disk.
		defer func() {
			if err := fw.Close(); err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("close output file %s: %w", c.OutputFile, err))
			}
		}()
		sinks = append(sinks, func(b []byte) {
			if err := fw.Write(b); err != nil {
				log.Error("write output file", "err", err)
			}
		})
	}

	var ready readiness
	srv, err := c.serveMetrics(ctx, reg, &ready, "eBPF programs not attached yet", log)
	if err != nil {
		return err
	}

	var uploader *debugupload.Uploader
	var onMappedFile func(procmaps.MappedFile)
	if c.Upload.UploadDebuginfo {
		if uploader, err = c.uploader(reg, log); err != nil {
			return err
		}
		onMappedFile = uploadHook(uploader)
	}

	unwinder := bpfprog.UnwindCFI
	if c.Unwinder == "frame-pointers" {
		unwinder = bpfprog.UnwindFramePointers
	}
	// A CLI built in code leaves it empty: that is the default, auto.
	fallBack := c.Unwinder == "auto" || c.Unwinder == ""
	var offCPU *bpfprog.OffCPUOptions
	if c.OffCPU.OffCPU {
		offCPU = &bpfprog.OffCPUOptions{Probability: c.OffCPU.OffCPUProbability, MinBlocked: c.OffCPU.OffCPUMinBlocked}
	}
	a, err := agent.New(agent.Config{
		FrequencyHz: c.Frequency, Interval: c.Interval, PIDs: c.PID, CgroupIDs: cgroupIDs,
		HostAttributes: map[string]string{
			otlpattr.HostName: host, otlpattr.K8sNodeName: c.K8sNodeName,
			otlpattr.K8sPodName: c.K8sPodName, otlpattr.K8sNamespaceName: c.K8sNamespace,
		},
		MaxSamplesPerInterval: c.MaxSamplesPerInterval,
		Unwinder:              unwinder, UnwinderFallBack: fallBack, UnwindRows: c.UnwindTableRows, UnwindFiles: c.UnwindMaxFiles, UnwindProcs: c.UnwindMaxProcesses,
		PerfMaps: c.PerfMaps, PerfMapMaxBytesPerProcess: c.PerfMapMaxBytesPerProcess, PerfMapMaxBytes: c.PerfMapMaxBytes,
		OffCPU: offCPU, KernelBuildIDs: c.KernelBuildIDs,
		Sinks: sinks, Registerer: reg, Version: version,
		OnMappedFile: onMappedFile,
	}, log)
	if err != nil {
		if srv != nil {
			if cerr := srv.Close(); cerr != nil {
				log.Warn("close metrics endpoint", "err", cerr)
			}
		}
		return err
	}
	ready.set(modeReport(a))

	expCtx, expCancel := context.WithCancel(context.Background())
	expDone := make(chan struct{})
	if exp != nil {
		go func() { exp.Run(expCtx); close(expDone) }()
	} else {
		close(expDone)
	}
	upCtx, upCancel := context.WithCancel(context.Background())
	upDone := make(chan struct{})
	if uploader != nil {
		go func() { uploader.Run(upCtx); close(upDone) }()
	} else {
		close(upDone)
	}
	runErr := a.Run(ctx)
	log.Info("shutting down")
	upCancel()
	<-upDone
	expCancel()
	<-expDone
	if exp != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		exp.Shutdown(sctx)
		cancel()
	}
	stopMetrics(srv, log)
	return runErr
}

// runUploadOnly is --upload-only: the node's processes are walked and their files offered to
// the symbolizer; nothing is sampled.
func (c *CLI) runUploadOnly(ctx context.Context, reg *prometheus.Registry, log *slog.Logger) error {
	uploader, err := c.uploader(reg, log)
	if err != nil {
		return err
	}
	var ready readiness
	srv, err := c.serveMetrics(ctx, reg, &ready, "no walk of the processes finished yet", log)
	if err != nil {
		return err
	}
	scanner := nodescan.New("/proc", procmaps.NewFileCache(1<<16), uploadHook(uploader), reg, log)
	upCtx, upCancel := context.WithCancel(context.Background())
	upDone := make(chan struct{})
	go func() { uploader.Run(upCtx); close(upDone) }()
	log.Info("upload-only: walking the node's processes", "interval", c.Upload.ScanInterval, "symbolizer", c.Upload.SymbolizerURL)
	scanner.Run(ctx, c.Upload.ScanInterval, func() { ready.set("") })
	log.Info("shutting down")
	upCancel()
	<-upDone
	stopMetrics(srv, log)
	return nil
}

func (c *CLI) uploader(reg prometheus.Registerer, log *slog.Logger) (*debugupload.Uploader, error) {
	return debugupload.New(debugupload.Options{
		SymbolizerURL: c.Upload.SymbolizerURL, TokenFile: c.Upload.UploadTokenFile,
		MaxFileBytes: c.Upload.UploadMaxBytes, BytesPerSecond: c.Upload.UploadBytesPerSec,
		QueueSize: c.Upload.UploadQueue, Registerer: reg,
	}, log)
}

// uploadHook offers every mapped ELF file to u.
func uploadHook(u *debugupload.Uploader) func(procmaps.MappedFile) {
	return func(m procmaps.MappedFile) {
		if fi := m.Info; fi != nil && fi.Err == nil && len(fi.Loads) > 0 {
			u.Offer(m.Path, m.Mapped, m.Root, fi.IDs)
		}
	}
}

// serveMetrics serves /metrics, /healthz and /readyz when --metrics-addr is set; /readyz
// answers notReady until ready is set.
func (c *CLI) serveMetrics(ctx context.Context, reg *prometheus.Registry, ready *readiness, notReady string, log *slog.Logger) (*http.Server, error) {
	if c.MetricsAddr == "" {
		return nil, nil
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", c.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: %w", err)
	}
	srv := &http.Server{Handler: handler(reg, ready, notReady, log), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint", "err", err)
		}
	}()
	log.Info("metrics endpoint listening", "addr", lis.Addr().String())
	return srv, nil
}

func stopMetrics(srv *http.Server, log *slog.Logger) {
	if srv == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shut down metrics endpoint", "err", err)
	}
}

// readiness is closed once the collector runs, with what /readyz says besides "ok".
type readiness struct {
	ch     chan struct{}
	detail string
}

func (r *readiness) set(detail string) {
	if r.ch != nil {
		r.detail = detail
		close(r.ch)
	}
}

// modeReport is what /readyz says of how the collector runs on this kernel: the unwinder and
// off-CPU profiling, with the kernel's reason where it refused what was configured.
func modeReport(a *agent.Agent) string {
	mode, fellBack := a.Mode()
	out := "unwinder: " + mode + "\n"
	if fellBack != nil {
		out = "unwinder: " + mode + " (the kernel refused the CFI unwinder: " + fellBack.Error() + ")\n"
	}
	if off := a.OffCPUOff(); off != nil {
		out += "off-cpu: off (" + off.Error() + ")\n"
	}
	return out
}

func handler(reg *prometheus.Registry, ready *readiness, notReady string, log *slog.Logger) http.Handler {
	ready.ch = make(chan struct{})
	// A probe that hung up before reading its answer has nobody left to tell.
	ok := func(w http.ResponseWriter, r *http.Request) {
		if _, err := w.Write([]byte("ok\n")); err != nil {
			log.Debug("answer probe", "path", r.URL.Path, "err", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-ready.ch:
			ok(w, r)
			if ready.detail != "" {
				if _, err := w.Write([]byte(ready.detail)); err != nil {
					log.Debug("answer probe", "path", r.URL.Path, "err", err)
				}
			}
		default:
			http.Error(w, notReady, http.StatusServiceUnavailable)
		}
	})
	return mux
}

// cgroup2Magic is CGROUP2_SUPER_MAGIC.
const cgroup2Magic = 0x63677270

// CgroupID returns the cgroup v2 ID (the directory's inode) of a cgroup path, absolute or
// relative to the cgroup v2 mount (/sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid
// hosts).
func CgroupID(path string) (uint64, error) {
	candidates := []string{path}
	if !filepath.IsAbs(path) {
		rel := strings.TrimPrefix(path, "/")
		candidates = []string{filepath.Join("/sys/fs/cgroup", rel), filepath.Join("/sys/fs/cgroup/unified", rel)}
	}
	var lastErr error
	for _, p := range candidates {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(p, &fs); err != nil {
			lastErr = fmt.Errorf("cgroup %s: %w", p, err)
			continue
		}
		if fs.Type != cgroup2Magic {
			lastErr = fmt.Errorf("cgroup %s: not on a cgroup v2 file system", p)
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			lastErr = fmt.Errorf("cgroup %s: %w", p, err)
			continue
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			lastErr = fmt.Errorf("cgroup %s: not a directory", p)
			continue
		}
		return st.Ino, nil
	}
	return 0, lastErr
}

// checkKernel is --check-kernel: what the running kernel's verifier says of each program, as
// JSON lines, then the kernel's line with the mode --unwinder=auto picks.
func checkKernel(w io.Writer) error {
	if err := bpfprog.CheckKernel(); err != nil {
		return err
	}
	checks, err := bpfprog.CheckPrograms()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	loaded := map[string]bool{}
	for _, c := range checks {
		loaded[c.Name] = c.Loaded
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	mode := "none"
	switch {
	case loaded["profile_cpu_cfi"]:
		mode = "cfi"
	case loaded["profile_cpu"]:
		mode = "frame-pointers"
	case loaded["profile_cpu_compat"]:
		mode = "frame-pointers-compat"
	}
	offCPU := "none"
	switch {
	case mode == "cfi" && loaded["off_cpu_switch_cfi"]:
		offCPU = "cfi"
	case loaded["off_cpu_switch"]:
		offCPU = "frame-pointers"
	}
	if err := enc.Encode(struct {
		Kernel string `json:"kernel"`
		Arch   string `json:"arch"`
		Mode   string `json:"auto_mode"`
		OffCPU string `json:"off_cpu"`
	}{bpfprog.KernelRelease(), runtime.GOARCH, mode, offCPU}); err != nil {
		return err
	}
	if mode == "none" {
		return errors.New("no sampling program loads on this kernel")
	}
	return nil
}

// IsPrivilegeError reports whether err comes from missing privileges.
func IsPrivilegeError(err error) bool { return errors.Is(err, bpfprog.ErrPrivileges) }

// cpuPeriodPoints is how many points of a container's CPU period sampling at hz falls on: the
// kubelet's CPU limits are CFS quotas per 100 ms period, whose timer runs on a fixed grid, and
// the kernel runs a per-CPU cpu-clock event's timer at a fixed NSEC_PER_SEC/hz (it turns a
// frequency into a period), so the two keep their phase for as long as both run. The samples
// fall at hz/gcd(hz, 10) evenly spaced points of the period: at 20 Hz two, 50 ms apart, and a
// container that runs its 50 ms between them is never sampled (seen with the OpenTelemetry
// eBPF profiler at its default 20 Hz: 92 s of a workload's CPU in 3 minutes, no sample of it).
func cpuPeriodPoints(hz int) int {
	a, b := hz, 10
	for b != 0 {
		a, b = b, a%b
	}
	return hz / a
}
