//go:build linux

// Command demo runs the whole profsym pipeline on this machine for a short while and shows
// a symbolized profile: it builds the three services, compiles a small C workload (stripped
// copy runs, the debug copy is uploaded as CI would), starts the symbolizer on its embedded
// defaults, the gateway and the eBPF collector on loopback ports, samples every process for
// --duration, stops everything in order and prints the top functions with file:line and
// inline frames, the sample totals, two flame graphs (the workload, the whole machine: one
// self-contained HTML file each) and where the OTLP and pprof files are.
//
//	sudo make demo            # or: sudo go run ./demo --duration 30s
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/pprof/profile"

	"github.com/profsym/profsym/demo/pipeline"
)

type cli struct {
	Duration       time.Duration `default:"15s" help:"How long the workload runs while the collector samples."`
	Frequency      int           `default:"99" help:"Sampling frequency per CPU, in Hz (the collector's default is 19; the demo samples more to show more in a short run)."`
	NonInteractive bool          `name:"non-interactive" help:"Plain output for CI: no colours, no countdown."`
	Dir            string        `help:"Where to put binaries, logs and results (default: a new temporary directory, kept afterwards)."`
	Top            int           `default:"10" help:"Rows of the top-functions tables."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Name("demo"),
		kong.Description("Run profsym's collector, gateway and symbolizer on this machine for a short while and show a symbolized profile."),
		kong.UsageOnError())
	os.Exit(run(c))
}

// ui prints one line per step, in colour on a terminal.
type ui struct {
	out   io.Writer
	color bool
	live  bool
	step  int
	total int
}

func (u *ui) paint(code, s string) string {
	if !u.color {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func (u *ui) Step(format string, args ...any) {
	u.step++
	prefix := fmt.Sprintf("[%d/%d]", u.step, u.total)
	fmt.Fprintf(u.out, "%s %s\n", u.paint("1;36", prefix), fmt.Sprintf(format, args...))
}

func (u *ui) Info(format string, args ...any) {
	fmt.Fprintf(u.out, "      %s\n", fmt.Sprintf(format, args...))
}

func (u *ui) Warn(format string, args ...any) {
	fmt.Fprintf(u.out, "      %s %s\n", u.paint("1;33", "!"), fmt.Sprintf(format, args...))
}

func (u *ui) Heading(s string) { fmt.Fprintf(u.out, "\n%s\n", u.paint("1", s)) }

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// children tracks started processes so every exit path stops them, newest first.
type children struct {
	mu    sync.Mutex
	procs []*pipeline.Proc
}

func (c *children) add(p *pipeline.Proc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs = append(c.procs, p)
}

// killAll stops whatever still runs, newest first; used on errors and a second Ctrl-C.
func (c *children) killAll() {
	c.mu.Lock()
	procs := append([]*pipeline.Proc(nil), c.procs...)
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		_ = procs[i].Stop(syscall.SIGTERM, 3*time.Second)
	}
}

func run(c cli) int {
	interactive := !c.NonInteractive && isTerminal(os.Stdout)
	u := &ui{out: os.Stdout, color: interactive, live: interactive, total: 9}

	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "The demo loads eBPF programs to sample CPU stacks of every process, which needs root")
		fmt.Fprintln(os.Stderr, "(or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE). Run it as root:")
		fmt.Fprintln(os.Stderr, "")
		fmt.Fprintln(os.Stderr, "    sudo make demo")
		return 1
	}
	if c.Duration <= 0 || c.Duration > time.Hour {
		fmt.Fprintf(os.Stderr, "--duration %v: want between 1s and 1h\n", c.Duration)
		return 2
	}

	// First Ctrl-C: stop sampling early (or abort a build) and clean up in order. Second:
	// kill every child now.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kids := &children{}
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	go func() {
		<-sigc
		fmt.Fprintln(os.Stderr, "\ninterrupted: stopping every process in order (Ctrl-C again to kill them now)")
		cancel()
		<-sigc
		kids.killAll()
		os.Exit(130)
	}()

	err := demo(ctx, c, u, kids)
	kids.killAll()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "demo interrupted:", err)
			return 130
		}
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		return 1
	}
	return 0
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func demo(ctx context.Context, c cli, u *ui, kids *children) error {
	root, err := pipeline.ModuleRoot()
	if err != nil {
		return err
	}
	dir := c.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "profsym-demo-"); err != nil {
			return fmt.Errorf("work directory: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	logs := filepath.Join(dir, "logs")
	otlpFile := filepath.Join(dir, "otlp", "profiles.otlp.pb")
	pprofDir := filepath.Join(dir, "pprof")
	for _, d := range []string{logs, filepath.Dir(otlpFile), pprofDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	fmt.Fprintf(u.out, "profsym demo: everything goes to %s (service logs in logs/)\n\n", dir)

	// 1. Build.
	u.Step("Building the symbolizer, gateway and collector (go build ./services/...)")
	t0 := time.Now()
	bins, err := pipeline.BuildServices(ctx, root, filepath.Join(dir, "bin"))
	if err != nil {
		return err
	}
	u.Info("built in %.1fs into %s", time.Since(t0).Seconds(), filepath.Dir(bins.Symbolizer))

	// 2. Workload.
	u.Step("Compiling the bundled workload (gcc -O2 -g -fno-omit-frame-pointer), stripping the copy that runs")
	wl, err := pipeline.CompileWorkload(ctx, root, filepath.Join(dir, "workload"))
	if err != nil {
		return err
	}
	u.Info("runs: %s (no symbols)   debuginfo: %s", wl.Stripped, wl.Debug)

	// 3. Symbolizer.
	token, err := randomToken()
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(dir, "upload-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	u.Step("Starting the symbolizer: folder store, in-process caches, no Redis")
	storeDir := filepath.Join(dir, "store")
	sym, ports, err := pipeline.StartService(ctx, "symbolizer", filepath.Join(logs, "symbolizer.log"), bins.Symbolizer, 1, 30*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			// The collector's node-side upload may have sent a distribution's debug file
			// (libc's, from libc6-dbg) whose verification, an index build, is still running
			// when the symbolizer is told to stop: it is finished rather than lost.
			return []string{"serve", "--listen", addr, "--store-dir", storeDir, "--upload-tokens-file", tokenFile,
				"--shutdown-timeout", "30s"}, "http://" + addr + "/readyz"
		})
	if err != nil {
		return err
	}
	kids.add(sym)
	symURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	u.Info("listening on %s (Connect, gRPC, debuginfod paths), store in %s", symURL, storeDir)

	// 4. CI-style upload.
	u.Step("Uploading the workload's debuginfo as a CI pipeline would (symbolizer upload)")
	up := exec.CommandContext(ctx, bins.Symbolizer, "upload", "--server", symURL, "--token-file", tokenFile,
		"--progress", "plain", wl.Debug)
	up.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	upOut, err := up.CombinedOutput()
	if err != nil {
		return fmt.Errorf("symbolizer upload: %w\n%s", err, upOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(upOut)), "\n") {
		if strings.HasPrefix(line, "uploaded") || strings.HasPrefix(line, "skipped") {
			u.Info("%s", line)
		}
	}

	// 5. Gateway.
	u.Step("Starting the gateway: OTLP in, symbolized OTLP file and pprof files out")
	gw, gports, err := pipeline.StartGateway(ctx, bins.Gateway, filepath.Join(dir, "gateway.yaml"), filepath.Join(logs, "gateway.log"),
		pipeline.GatewayConfig{Symbolizer: symURL, OutputFile: otlpFile, PprofDir: pprofDir,
			// The collector gives its last export 5s at shutdown: symbolization must give up
			// (and send the data unsymbolized) well before that.
			Timeout: 3 * time.Second, Deadline: 3 * time.Second}, 60*time.Second)
	if err != nil {
		return err
	}
	kids.add(gw)
	gwAddr := gports.GRPCAddr()
	u.Info("OTLP/gRPC on %s, metrics on %s; its OpenTelemetry Collector config: %s", gwAddr, gports.MetricsURL(), filepath.Join(dir, "gateway.yaml"))

	// 6. Collector.
	u.Step("Starting the eBPF collector: every CPU at %d Hz, node-side upload of binaries with symbols", c.Frequency)
	collectorOut := filepath.Join(dir, "collector-sent.otlp")
	// Several requests in a short run show the pipeline streaming, not one batch at the end.
	interval := min(max((c.Duration/3).Round(time.Second), 2*time.Second), 10*time.Second)
	col, cports, err := pipeline.StartService(ctx, "collector", filepath.Join(logs, "collector.log"), bins.Collector, 1, 60*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{
				"--gateway", gwAddr, "--gateway-insecure",
				"--frequency", strconv.Itoa(c.Frequency), "--interval", interval.String(),
				"--output-file", collectorOut, "--metrics-addr", addr,
				// Loopback: no need to spare bandwidth, and a short run wants symbols soon.
				"--upload-debuginfo", "--symbolizer-url", symURL, "--upload-token-file", tokenFile,
				"--upload-bytes-per-second", strconv.Itoa(256 << 20),
			}, "http://" + addr + "/readyz"
		})
	if err != nil {
		return err
	}
	kids.add(col)
	u.Info("eBPF programs attached; a request to the gateway every %v; metrics on http://127.0.0.1:%d/metrics", interval, cports[0])

	// 7. Workload.
	u.Step("Running the workload for %v beside whatever else this machine runs", c.Duration)
	wlProc, err := pipeline.Start("workload", filepath.Join(logs, "workload.log"), wl.Stripped)
	if err != nil {
		return err
	}
	kids.add(wlProc)
	u.Info("workload pid %d", wlProc.PID())
	interrupted := waitRun(ctx, u, c.Duration, wlProc)

	// 8. Stop in pipeline order: what produces data stops first, so nothing is lost.
	u.Step("Stopping in order: workload, collector (last interval flushed), gateway (queues drained), symbolizer")
	var stopErrs []error
	if err := wlProc.Stop(syscall.SIGTERM, 5*time.Second); err != nil {
		stopErrs = append(stopErrs, fmt.Errorf("workload: %w", err))
	}
	for _, s := range []struct {
		p     *pipeline.Proc
		sig   syscall.Signal
		grace time.Duration
	}{{col, syscall.SIGINT, 30 * time.Second}, {gw, syscall.SIGTERM, 40 * time.Second}, {sym, syscall.SIGTERM, 40 * time.Second}} {
		if err := s.p.Stop(s.sig, s.grace); err != nil {
			stopErrs = append(stopErrs, fmt.Errorf("%w (log: %s)\n%s", err, s.p.LogPath, s.p.Tail(10)))
		}
	}
	if err := errors.Join(stopErrs...); err != nil {
		return err
	}

	// 9. Results.
	u.Step("Reading the gateway's OTLP output")
	if err := report(u, c, dir, otlpFile, pprofDir, collectorOut, wl, wlProc.PID()); err != nil {
		return err
	}
	if interrupted {
		u.Warn("the run was cut short by Ctrl-C; the numbers cover only the time it ran")
	}
	return nil
}

// frameCounts counts the frames of stacks by kind, each stack once, inlined frames not.
type frameCounts struct {
	native, nativeSymbolized, goFrames, goSymbolized, kernel, kernelNamed int
}

func countFrames(stacks []pipeline.Stack) frameCounts {
	var c frameCounts
	for _, s := range stacks {
		for _, f := range s.Frames {
			if f.Inlined {
				continue
			}
			named := 0
			if f.Function != "" {
				named = 1
			}
			switch f.Kind {
			case "go":
				c.goFrames++
				c.goSymbolized += named
			case "kernel":
				c.kernel++
				c.kernelNamed += named
			default:
				c.native++
				c.nativeSymbolized += named
			}
		}
	}
	return c
}

// afterFirst says how many frames later requests had symbolized, when that differs from
// the whole run's share.
func afterFirst(named, total, laterNamed, laterTotal int) string {
	if laterTotal == 0 || named == total || laterTotal == total {
		return ""
	}
	return fmt.Sprintf("; after the first request %d of %d", laterNamed, laterTotal)
}

// waitRun waits for the run's duration, a Ctrl-C or the workload's own end, showing a
// countdown on a terminal. It reports whether the run was interrupted.
func waitRun(ctx context.Context, u *ui, d time.Duration, wl *pipeline.Proc) bool {
	end := time.Now().Add(d)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	defer func() {
		if u.live {
			fmt.Fprint(u.out, "\r\x1b[K")
		}
	}()
	for {
		left := time.Until(end)
		if left <= 0 {
			return false
		}
		if u.live {
			fmt.Fprintf(u.out, "\r      sampling... %2ds left ", int(left.Round(time.Second).Seconds()))
		}
		select {
		case <-ctx.Done():
			return true
		case <-wl.Done():
			u.Warn("the workload exited early: %v (log: %s)", wl.Err(), wl.LogPath)
			return false
		case <-tick.C:
		}
	}
}

func report(u *ui, c cli, dir, otlpFile, pprofDir, collectorOut string, wl pipeline.Workload, wlPID int) error {
	out, err := pipeline.ReadOTLPFile(otlpFile)
	if err != nil {
		return err
	}
	if len(out) == 0 {
		return fmt.Errorf("the gateway wrote no OTLP request to %s; see %s", otlpFile, filepath.Join(dir, "logs"))
	}
	stacks, err := pipeline.Stacks(out)
	if err != nil {
		return fmt.Errorf("gateway output: %w", err)
	}
	sent, err := pipeline.ReadDelimited(collectorOut)
	if err != nil {
		return fmt.Errorf("collector's copy of what it sent: %w", err)
	}
	sentStacks, err := pipeline.Stacks(sent)
	if err != nil {
		return fmt.Errorf("collector's copy of what it sent: %w", err)
	}
	in, outN := pipeline.TotalSamples(sentStacks), pipeline.TotalSamples(stacks)

	pid := strconv.Itoa(wlPID)
	var wlStacks []pipeline.Stack
	procs := map[string]int64{}
	for _, s := range stacks {
		if s.PID == pid {
			wlStacks = append(wlStacks, s)
		}
		name := s.Exe
		if name == "" {
			name = s.Comm
		}
		procs[name+" ("+s.PID+")"] += s.Samples
	}
	all := countFrames(stacks)
	// The node uploads a binary when it first samples it: the frames it sent before that
	// upload finished, mostly in the first request, stay addresses.
	var later frameCounts
	if len(out) > 1 {
		rest, err := pipeline.Stacks(out[1:])
		if err != nil {
			return fmt.Errorf("gateway output: %w", err)
		}
		later = countFrames(rest)
	}

	u.Heading(fmt.Sprintf("The workload (pid %d, stripped binary; symbols from the uploaded debuginfo): %d samples", wlPID, pipeline.TotalSamples(wlStacks)))
	if len(wlStacks) == 0 {
		u.Warn("no samples of the workload: the machine may be very busy; try a longer --duration")
	} else {
		printTop(u, pipeline.TopFunctions(wlStacks, c.Top), pipeline.TotalSamples(wlStacks))
	}

	u.Heading(fmt.Sprintf("The whole machine: %d samples of %d processes", outN, len(procs)))
	printTop(u, pipeline.TopFunctions(stacks, c.Top), outN)
	type pc struct {
		name string
		n    int64
	}
	var pcs []pc
	for k, v := range procs {
		pcs = append(pcs, pc{k, v})
	}
	sort.Slice(pcs, func(i, j int) bool { return pcs[i].n > pcs[j].n || (pcs[i].n == pcs[j].n && pcs[i].name < pcs[j].name) })
	var busiest []string
	for i := 0; i < len(pcs) && i < 5; i++ {
		busiest = append(busiest, fmt.Sprintf("%s %d", pcs[i].name, pcs[i].n))
	}
	fmt.Fprintf(u.out, "  busiest processes: %s\n", strings.Join(busiest, ", "))

	u.Heading("Totals")
	check := "equal"
	if in != outN {
		check = "DIFFERENT"
	}
	fmt.Fprintf(u.out, "  samples: %d sent by the collector, %d written by the gateway (%s)\n", in, outN, check)
	fmt.Fprintf(u.out, "  native frames of the samples symbolized: %d of %d%s (binaries without symbols stay addresses)\n",
		all.nativeSymbolized, all.native, afterFirst(all.nativeSymbolized, all.native, later.nativeSymbolized, later.native))
	if all.goFrames > 0 {
		fmt.Fprintf(u.out, "  Go frames symbolized (from pclntab, for Go binaries the node uploaded): %d of %d%s\n",
			all.goSymbolized, all.goFrames, afterFirst(all.goSymbolized, all.goFrames, later.goSymbolized, later.goFrames))
	}
	fmt.Fprintf(u.out, "  kernel frames named on the node from kallsyms: %d of %d\n", all.kernelNamed, all.kernel)
	if all.goSymbolized < all.goFrames || all.nativeSymbolized < all.native {
		fmt.Fprintf(u.out, "  (the node uploads a binary when it first samples it; frames it sent before that upload finished stay addresses)\n")
	}

	pprofFiles, _ := filepath.Glob(filepath.Join(pprofDir, "*.pb.gz"))
	merged := filepath.Join(dir, "workload.pb.gz")
	mergedOK := false
	if err := mergePprof(pprofFiles, "process.pid="+pid, merged); err != nil {
		u.Warn("could not merge the workload's pprof files: %v", err)
	} else {
		mergedOK = true
	}
	// Flame graphs: one HTML file each, everything inside, for a browser.
	wlFlame, machineFlame := filepath.Join(dir, "flamegraph-workload.html"), filepath.Join(dir, "flamegraph-machine.html")
	if len(wlStacks) > 0 {
		if err := pipeline.FlameGraph(wlStacks, wlFlame, fmt.Sprintf("The demo workload (pid %d), symbolized by profsym", wlPID), false); err != nil {
			u.Warn("could not write the workload's flame graph: %v", err)
			wlFlame = ""
		}
	} else {
		wlFlame = ""
	}
	if err := pipeline.FlameGraph(stacks, machineFlame, "The whole machine, symbolized by profsym", true); err != nil {
		u.Warn("could not write the machine's flame graph: %v", err)
		machineFlame = ""
	}
	u.Heading("Files")
	if wlFlame != "" {
		fmt.Fprintf(u.out, "  flame graph of the workload (open in a browser; self-contained, no network): %s\n", wlFlame)
	}
	if machineFlame != "" {
		fmt.Fprintf(u.out, "  flame graph of the whole machine, by process: %s\n", machineFlame)
	}
	fmt.Fprintf(u.out, "  OTLP (symbolized, full fidelity): %s (%s, each a 4-byte length and the protobuf)\n", otlpFile, plural(len(out), "request"))
	fmt.Fprintf(u.out, "  pprof, one per process and interval: %s (%s)\n", pprofDir, plural(len(pprofFiles), "file"))
	fmt.Fprintf(u.out, "  what the collector sent (unsymbolized): %s\n", collectorOut)
	if mergedOK {
		fmt.Fprintf(u.out, "  the workload's samples merged: %s\n", merged)
		fmt.Fprintf(u.out, "\n  go tool pprof -top %s\n", merged)
	} else if len(pprofFiles) > 0 {
		fmt.Fprintf(u.out, "\n  go tool pprof -top %s\n", pprofFiles[0])
	}
	if in != outN {
		return fmt.Errorf("the gateway wrote %d samples but the collector sent %d", outN, in)
	}
	return nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func printTop(u *ui, top []pipeline.FuncStat, total int64) {
	if total <= 0 {
		return
	}
	fmt.Fprintf(u.out, "  %6s %7s  %-28s %-26s %s\n", "self%", "samples", "function", "file:line", "inlined into")
	for _, f := range top {
		loc := ""
		if f.File != "" {
			loc = filepath.Base(f.File) + ":" + strconv.FormatInt(f.Line, 10)
		} else if f.Kind == "kernel" {
			loc = "[kernel]"
		}
		name := f.Function
		if len(name) > 28 {
			name = name[:27] + "…"
		}
		fmt.Fprintf(u.out, "  %5.1f%% %7d  %-28s %-26s %s\n", 100*float64(f.Self)/float64(total), f.Self, name, loc,
			strings.Join(f.InlinedInto, " <- "))
	}
}

// mergePprof merges the pprof files whose comments hold the marker (the gateway writes the
// resource attributes as comments) into one file.
func mergePprof(files []string, marker, out string) error {
	var ps []*profile.Profile
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("open %s: %w", name, err)
		}
		p, err := profile.Parse(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("parse %s: %w", name, err)
		}
		for _, cm := range p.Comments {
			if cm == marker {
				ps = append(ps, p)
				break
			}
		}
	}
	if len(ps) == 0 {
		return errors.New("no pprof file of the workload")
	}
	m, err := profile.Merge(ps)
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}
	if err := m.Write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", out, err)
	}
	return f.Close()
}
