//go:build linux

package kernels

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/e2e/guest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// Guest parameters. The collector samples for sampleSecs once its programs are attached, at
// sampleHz per CPU: the emulated CPUs run many times slower than the host's, so a node's
// rate would leave too few samples to judge a share by.
const (
	sampleSecs = 15
	sampleHz   = 250
	// guestDeadline bounds one run of qemu: a guest that hangs is killed and its subtest
	// fails with the console. On a busy 2-core machine a check takes 15 to 40 s and a full
	// run 60 to 80 s; the verifier's work on the CFI programs is most of it.
	guestDeadline = 8 * time.Minute
	// parallelGuests is how many kernels are under way at once: as many as guest.Boot lets
	// run on the machine, so that none waits holding its place in the order.
	parallelGuests = guest.MaxGuests
	// minSamples is the least a workload must be sampled on a full run: at sampleHz for
	// sampleSecs an emulated guest gives thousands.
	minSamples = 100
	// minWhole is the least share of a workload's samples whose stack must be whole where the
	// CFI unwinder runs.
	minWhole = 0.95
)

// kernel is one kernel of the matrix.
type kernel struct {
	id   string // as fetch-kernels.sh names it: ARCH-SERIES
	arch string // GOARCH
	// full: the collector also samples the workloads, and their stacks are checked; other
	// kernels only answer --check-kernel.
	full bool
}

// kernels, in the order they take a guest slot: the full runs (the longest) first, so that the
// last to finish are short checks and the two slots end close together. The full runs: the
// newest kernel of each architecture, the oldest (frame pointers only), and Debian stable's
// 6.1, the kernel most nodes of these releases run. arm64's 6.1 runs in full in e2e/arm64.
var kernels = []kernel{
	{"amd64-7.2", "amd64", true},
	{"arm64-7.2", "arm64", true},
	{"amd64-6.1", "amd64", true},
	{"amd64-5.10", "amd64", true},
	{"arm64-6.12", "arm64", false},
	{"arm64-6.1", "arm64", false},
	{"amd64-6.12", "amd64", false},
	{"arm64-5.10", "arm64", false},
}

// tools the test needs; .ci/install-deps installs them.
var tools = []string{
	"qemu-system-x86_64", "qemu-system-aarch64", "gcc", "aarch64-linux-gnu-gcc", "cpio", "readelf",
	"apt-get", "apt-cache", "dpkg-deb", "tar", "flock",
}

// files the test needs besides the tools: the amd64 guest's busybox (busybox-static) and the
// BIOS qemu boots an amd64 kernel with (seabios).
var files = []string{"/bin/busybox", "/usr/share/seabios/bios-256k.bin"}

// requireHarness skips on a developer's machine without the tools (saying which) and fails
// under CI, where a pipeline must not pass by skipping.
func requireHarness(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots 8 kernels under emulation (minutes); skipped in -short mode")
	}
	var missing []string
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("kernel matrix needs %v (bash .ci/install-deps sets them up)", missing)
	}
	t.Skipf("kernel matrix needs %v (bash .ci/install-deps installs them)", missing)
}

func runScript(ctx context.Context, script string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	var stderr testsupport.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %v: %w\n%s", filepath.Base(script), args, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// fetched is one line of fetch-kernels.sh's output.
type fetched struct {
	pkg  string // PACKAGE:ARCH=VERSION
	path string
}

func parseFetched(out string) (map[string]fetched, error) {
	m := map[string]fetched{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("fetch-kernels.sh: bad line %q", line)
		}
		m[f[0]] = fetched{pkg: f[1], path: f[2]}
	}
	for _, k := range kernels {
		if _, ok := m[k.id]; !ok {
			return nil, fmt.Errorf("fetch-kernels.sh did not fetch %s", k.id)
		}
	}
	if _, ok := m["busybox-arm64"]; !ok {
		return nil, fmt.Errorf("fetch-kernels.sh did not fetch the arm64 busybox")
	}
	return m, nil
}

// row is what the matrix observed on one kernel.
type row struct {
	id      string // "host" or a kernel of the matrix
	version string // the Debian package's version
	check   *checkReport
	// sampled says how a full run went: the whole-stack share of each workload and the
	// unwinder the collector ran, or why there are none; empty on a check alone.
	sampled string
}

// TestKernelMatrix runs the collector's --check-kernel on each kernel of the matrix and on
// the host's own, and on a few also samples a workload built without frame pointers; it logs
// the table docs/kernels.md shows.
func TestKernelMatrix(t *testing.T) {
	requireHarness(t)
	ctx := t.Context()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()

	// The download waits on the network, the builds on the CPU: both at once.
	type fetchResult struct {
		out string
		err error
	}
	fetchDone := make(chan fetchResult, 1)
	go func() {
		out, err := runScript(ctx, filepath.Join(here, "fetch-kernels.sh"))
		fetchDone <- fetchResult{out, err}
	}()
	out := t.TempDir()
	trees := map[string]string{}
	initrds := map[string]string{}
	build := func(arch, busybox string) {
		start := time.Now()
		dir := filepath.Join(out, arch)
		initrd, err := runScript(ctx, filepath.Join(here, "build-guest.sh"), arch, dir, busybox)
		if err != nil {
			t.Fatal(err)
		}
		trees[arch], initrds[arch] = filepath.Join(dir, "tree"), initrd
		t.Logf("%s guest built in %v", arch, time.Since(start).Round(time.Millisecond))
	}
	build("amd64", "/bin/busybox")
	fr := <-fetchDone
	if fr.err != nil {
		t.Fatal(fr.err)
	}
	got, err := parseFetched(fr.out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernels ready %v after the start", time.Since(begin).Round(time.Millisecond))
	build("arm64", got["busybox-arm64"].path)

	var mu sync.Mutex
	rows := map[string]*row{}
	record := func(r *row) {
		mu.Lock()
		defer mu.Unlock()
		rows[r.id] = r
	}

	t.Run("host", func(t *testing.T) {
		r, err := checkHost(ctx, trees)
		if err != nil {
			if os.Getenv("CI") == "" && os.Geteuid() != 0 {
				t.Skipf("the host's kernel: %v (needs root)", err)
			}
			t.Fatal(err)
		}
		record(&row{id: "host", check: r})
		for _, e := range checkErrors(r, runtime.GOARCH) {
			t.Error(e)
		}
		logPrograms(t, r)
	})

	guestsStart := time.Now()
	t.Run("guests", func(t *testing.T) {
		// parallelGuests workers take the kernels in order; t.Parallel would leave the order
		// and the count to -parallel.
		queue := make(chan kernel, len(kernels))
		for _, k := range kernels {
			queue <- k
		}
		close(queue)
		var wg sync.WaitGroup
		for range parallelGuests {
			wg.Go(func() {
				for k := range queue {
					t.Run(k.id, func(t *testing.T) {
						if r := runGuest(t, ctx, k, got[k.id], initrds[k.arch], trees[k.arch]); r != nil {
							record(r)
						}
					})
				}
			})
		}
		wg.Wait()
	})
	t.Logf("guests ran in %v; the matrix took %v", time.Since(guestsStart).Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	t.Logf("kernel matrix (%s, %d CPUs, %s):\n%s", time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), hostName(), table(rows))
}

func hostName() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown host"
	}
	return h
}

// checkHost runs the collector's --check-kernel on the machine's own kernel.
func checkHost(ctx context.Context, trees map[string]string) (*checkReport, error) {
	tree, ok := trees[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("no collector built for this machine's %s", runtime.GOARCH)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(tree, "w", "collector"), "--check-kernel")
	var stderr testsupport.Buffer
	cmd.Stderr = &stderr
	// Exit status 1 says no sampling program loads: the lines tell which and why.
	stdout, runErr := cmd.Output()
	r, err := parseCheck(strings.Split(strings.TrimSpace(string(stdout)), "\n"))
	if err != nil {
		return nil, fmt.Errorf("collector --check-kernel: %w\n%s", errors.Join(err, runErr), stderr.String())
	}
	return r, nil
}

// runGuest boots one kernel with its architecture's initramfs and checks what the guest
// reports; it returns the row for the table, or nil when the guest reported nothing usable.
func runGuest(t *testing.T, ctx context.Context, k kernel, f fetched, initrd, tree string) *row {
	var qemu string
	var args []string
	full := 0
	if k.full {
		full = 1
	}
	params := fmt.Sprintf("panic=-1 quiet e2e_full=%d e2e_secs=%d e2e_hz=%d", full, sampleSecs, sampleHz)
	switch k.arch {
	case "amd64":
		// q35 and -cpu max: a machine with every feature TCG emulates, so no program is refused
		// for want of a CPU feature a node would have.
		qemu = "qemu-system-x86_64"
		args = []string{"-M", "q35", "-cpu", "max", "-append", "console=ttyS0 " + params}
	case "arm64":
		// As e2e/arm64: pointer authentication with the implementation-defined algorithm,
		// much cheaper to emulate than QARMA.
		qemu = "qemu-system-aarch64"
		args = []string{"-M", "virt", "-cpu", "max,pauth-impdef=on", "-append", "console=ttyAMA0 " + params}
	}
	// -nic none: the guest needs no network (and the default NIC wants a ROM file).
	args = append(args, "-smp", "2", "-m", "1024", "-nographic", "-no-reboot", "-nic", "none",
		"-kernel", f.path, "-initrd", initrd)
	run, err := guest.Boot(ctx, guestDeadline, qemu, args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("guest console:\n%s", guest.WithoutBase64(run.Console))
		}
	})
	if err != nil {
		t.Fatalf("%s: %v", f.pkg, err)
	}
	g := run.Guest
	t.Logf("%s (%s) ran for %v: %s", g.Kernel, f.pkg, run.Took.Round(time.Millisecond), run.Timeline)
	r, err := parseCheck(g.Checks)
	if err != nil {
		t.Errorf("collector --check-kernel (exit status %d): %v", g.CheckExit, err)
		return nil
	}
	_, version, _ := strings.Cut(f.pkg, "=")
	res := &row{id: k.id, version: version, check: r}
	logPrograms(t, r)
	if release, _, _ := strings.Cut(g.Kernel, " "); r.Kernel.Kernel != release {
		t.Errorf("--check-kernel names the kernel %q, uname -r %q", r.Kernel.Kernel, release)
	}
	if (g.CheckExit == 0) != (r.Kernel.AutoMode != "none") {
		t.Errorf("--check-kernel exited with status %d, saying auto mode %q", g.CheckExit, r.Kernel.AutoMode)
	}
	for _, e := range checkErrors(r, k.arch) {
		t.Error(e)
	}
	if k.full {
		res.sampled = checkSampling(t, g, r, tree)
	}
	return res
}

// logPrograms logs what the verifier said of each program.
func logPrograms(t *testing.T, r *checkReport) {
	var b strings.Builder
	for _, p := range r.Programs {
		fmt.Fprintf(&b, "\n  %-20s loaded %-5v verified %7d insns (%4.1f%% of the limit)", p.Name, p.Loaded, p.VerifiedInsns, 100*float64(p.VerifiedInsns)/verifierLimit)
		if p.Error != "" {
			fmt.Fprintf(&b, " %s", p.Error)
		}
	}
	t.Logf("kernel %s %s: auto mode %s, off-CPU %s%s", r.Kernel.Kernel, r.Kernel.Arch, r.Kernel.AutoMode, r.Kernel.OffCPU, b.String())
}

// checkSampling checks a full run: the collector ran to the end in the mode --check-kernel
// announced, and the workloads' stacks are whole where the CFI unwinder runs (through code
// without frame pointers the kernel's own walk stops after a frame or two: there the
// profiles need only hold samples). tree is the guest's file tree on the host. It returns
// the run's cell of the table.
func checkSampling(t *testing.T, g *guest.Guest, r *checkReport, tree string) string {
	for _, m := range g.Metrics {
		if strings.Contains(m, "unwind_stacks_total") || strings.Contains(m, "samples_total") || strings.Contains(m, "unwinder") {
			t.Logf("guest metric %s", m)
		}
	}
	if !g.Ready || g.CollectorExit != 0 || g.OTLP == nil {
		t.Errorf("the collector did not run to the end (ready %v, exit status %d, output file %d bytes)", g.Ready, g.CollectorExit, len(g.OTLP))
		return fmt.Sprintf("the collector exited (status %d)", g.CollectorExit)
	}
	mode := metricLabel(g.Metrics, "profsym_collector_unwinder", "mode")
	if mode != r.Kernel.AutoMode {
		t.Errorf("the collector ran the %q unwinder, --check-kernel said %q", mode, r.Kernel.AutoMode)
	}
	workloads := map[int64]string{}
	syms := map[string]*symtab{}
	for name, pid := range g.PIDs {
		bin := "/w/" + name
		s, err := openSymtab(filepath.Join(tree, bin))
		if err != nil {
			t.Errorf("workload %s: %v", name, err)
			return "error"
		}
		workloads[pid], syms[bin] = bin, s
	}
	if len(workloads) == 0 {
		t.Error("the guest started no workload")
		return "error"
	}
	recs, err := guest.Records(g.OTLP)
	if err != nil {
		t.Errorf("output file: %v", err)
		return "error"
	}
	shares := map[string]*share{}
	for i, b := range recs {
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b); err != nil {
			t.Errorf("output file: request %d does not decode: %v", i, err)
			return "error"
		}
		tallyStacks(req.Profiles(), workloads, syms, shares)
	}
	for _, bin := range slices.Sorted(maps.Values(workloads)) {
		sh := shares[bin]
		if sh == nil {
			sh = &share{}
			shares[bin] = sh
		}
		t.Logf("%s: %s samples with a whole stack (%s unwinder)", bin, sh, mode)
		if sh.samples < minSamples {
			t.Errorf("%s: %d samples, want at least %d", bin, sh.samples, minSamples)
			continue
		}
		if mode == "cfi" && sh.fraction() < minWhole {
			t.Errorf("%s: %s samples whole, want %.0f%%; e.g. %s", bin, sh, 100*minWhole, sh.example)
		}
	}
	var parts []string
	for _, bin := range slices.Sorted(maps.Keys(shares)) {
		parts = append(parts, fmt.Sprintf("%s %s", strings.TrimPrefix(bin, "/w/"), shares[bin]))
	}
	return strings.Join(parts, "; ") + " (" + mode + ")"
}

// metricLabel returns the value of label in the first sample of metric with value 1 (an info
// gauge such as profsym_collector_unwinder{mode="cfi",reason="as_configured"} 1).
func metricLabel(metrics []string, metric, label string) string {
	for _, m := range metrics {
		labels, ok := strings.CutPrefix(m, metric+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(labels, "} ")
		if !ok || value != "1" {
			continue
		}
		for kv := range strings.SplitSeq(labels, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && k == label {
				return strings.Trim(v, `"`)
			}
		}
	}
	return ""
}

// table renders the rows as the markdown table of docs/kernels.md: the host first, then the
// kernels by architecture and release.
func table(rows map[string]*row) string {
	var b strings.Builder
	b.WriteString("| Kernel | Arch | Debian package | Programs loaded | profile_cpu_cfi insns | off_cpu_switch_cfi insns | --unwinder=auto | Off-CPU | Full run: whole stacks (unwinder) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	ids := []string{"host"}
	for _, arch := range []string{"amd64", "arm64"} {
		for _, series := range []string{"5.10", "6.1", "6.12", "7.2"} {
			ids = append(ids, arch+"-"+series)
		}
	}
	for _, id := range ids {
		r := rows[id]
		if r == nil {
			fmt.Fprintf(&b, "| %s | | | (no result) | | | | | |\n", id)
			continue
		}
		c := r.check
		loaded := 0
		var refused []string
		for _, p := range c.Programs {
			if p.Loaded {
				loaded++
			} else {
				refused = append(refused, p.Name)
			}
		}
		programs := fmt.Sprintf("%d of %d", loaded, len(c.Programs))
		if loaded > 0 && len(refused) > 0 {
			programs += " (not " + strings.Join(refused, ", ") + ")"
		}
		insns := func(name string) string {
			p, ok := c.program(name)
			switch {
			case !ok:
				return "—"
			case !p.Loaded:
				return "refused"
			}
			return fmt.Sprint(p.VerifiedInsns)
		}
		version := r.version
		if id == "host" {
			version = "(this machine)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Kernel.Kernel, c.Kernel.Arch, version, programs,
			insns("profile_cpu_cfi"), insns("off_cpu_switch_cfi"), c.Kernel.AutoMode, c.Kernel.OffCPU, cmp.Or(r.sampled, "not sampled"))
	}
	return b.String()
}

func TestMetricLabel(t *testing.T) {
	metrics := []string{
		`profsym_collector_samples_total 2988`,
		`profsym_collector_unwinder_other{mode="x"} 1`,
		`profsym_collector_unwinder{mode="frame-pointers",reason="as_configured"} 0`,
		`profsym_collector_unwinder{mode="cfi",reason="as_configured"} 1`,
	}
	if got := metricLabel(metrics, "profsym_collector_unwinder", "mode"); got != "cfi" {
		t.Errorf("mode = %q, want cfi", got)
	}
	if got := metricLabel(metrics, "profsym_collector_unwinder", "reason"); got != "as_configured" {
		t.Errorf("reason = %q, want as_configured", got)
	}
	if got := metricLabel(metrics, "profsym_collector_off_cpu", "state"); got != "" {
		t.Errorf("a metric not there: %q", got)
	}
}

func TestTable(t *testing.T) {
	progs := func(loaded bool) []programCheck {
		var ps []programCheck
		for _, n := range concat(cfiPrograms, btfPrograms, compatPrograms) {
			ps = append(ps, programCheck{Name: n, Loaded: loaded || !slices.Contains(cfiPrograms, n), VerifiedInsns: 100})
		}
		return ps
	}
	rows := map[string]*row{
		"amd64-7.2": {id: "amd64-7.2", version: "7.2.13-1", sampled: "chain 100.0% of 3060 (cfi)",
			check: &checkReport{Programs: progs(true), Kernel: kernelCheck{"7.2.13+deb14-amd64", "amd64", "cfi", "cfi"}}},
		"arm64-6.1": {id: "arm64-6.1", version: "6.1.192-3",
			check: &checkReport{Programs: progs(false), Kernel: kernelCheck{"6.1.0-57-arm64", "arm64", "frame-pointers", "frame-pointers"}}},
	}
	got := table(rows)
	for _, want := range []string{
		"| 7.2.13+deb14-amd64 | amd64 | 7.2.13-1 | 7 of 7 | 100 | 100 | cfi | cfi | chain 100.0% of 3060 (cfi) |\n",
		"| 6.1.0-57-arm64 | arm64 | 6.1.192-3 | 5 of 7 (not profile_cpu_cfi, off_cpu_switch_cfi) | refused | refused | frame-pointers | frame-pointers | not sampled |\n",
		"| host | | | (no result) | | | | | |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table has no line %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n"); n != 2+9 {
		t.Errorf("%d lines, want a header, a rule and 9 rows:\n%s", n, got)
	}
}
