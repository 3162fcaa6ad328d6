//go:build linux

package arm64

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/pkg/testsupport"
)

// Guest parameters: the collector samples for sampleSecs once its programs are attached, at
// sampleHz per CPU (the guest's clock runs in real time while its CPUs run ~10-50x slower
// than the host's, so a higher rate than a node's keeps the counts up).
const (
	sampleSecs = 20
	sampleHz   = 250
	// guestDeadline bounds the whole run of qemu: a guest that hangs is killed and the test
	// fails with its console. Most of a run is the kernel verifying the eBPF programs under
	// emulation: 3 to 4.5 minutes on a machine busy with other builds.
	guestDeadline = 8 * time.Minute
)

// tools the test needs; .ci/install-deps installs them.
var tools = []string{
	"qemu-system-aarch64", "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "clang", "cpio",
	"llvm-symbolizer", "apt-get", "apt-cache", "dpkg-deb", "dpkg",
}

// requireHarness skips on a developer's machine without the tools (saying which) and fails
// under CI, where a pipeline must not pass by skipping.
func requireHarness(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots an arm64 kernel under emulation (minutes); skipped in -short mode")
	}
	var missing []string
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if out, err := exec.CommandContext(t.Context(), "dpkg", "--print-foreign-architectures").Output(); err != nil || !strings.Contains(string(out), "arm64") {
		missing = append(missing, "dpkg architecture arm64 (dpkg --add-architecture arm64 && apt-get update)")
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("arm64 harness needs %v (bash .ci/install-deps sets them up)", missing)
	}
	t.Skipf("arm64 harness needs %v (bash .ci/install-deps installs them)", missing)
}

// cacheDir is where the Debian packages are kept between runs.
func cacheDir(t *testing.T) string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "profsym", "arm64")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatalf("no cache directory: %v", err)
	}
	return filepath.Join(home, ".cache", "profsym", "arm64")
}

func runScript(t *testing.T, ctx context.Context, script string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	var stderr testsupport.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(script), args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// TestCollectorOnArm64Kernel boots Debian's arm64 kernel under qemu with the cross-built
// collector and workloads, and checks the stacks that come back: whole chains through code
// without frame pointers and through libc's qsort, Go's chain, named kernel frames, and the
// engine's names for the user frames against llvm-symbolizer's.
func TestCollectorOnArm64Kernel(t *testing.T) {
	requireHarness(t)
	ctx, cancel := context.WithTimeout(t.Context(), guestDeadline+5*time.Minute)
	defer cancel()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	deb := runScript(t, ctx, filepath.Join(here, "fetch-debian.sh"), cacheDir(t))
	t.Logf("Debian arm64 packages ready in %v (%s)", time.Since(start).Round(time.Millisecond), deb)

	start = time.Now()
	out := t.TempDir()
	initrd := runScript(t, ctx, filepath.Join(here, "build-guest.sh"), out, deb)
	t.Logf("collector, workloads and initramfs built in %v", time.Since(start).Round(time.Millisecond))

	g, console := bootGuest(t, ctx, filepath.Join(deb, "vmlinuz"), initrd)
	// Any failure below leaves the guest's console in the test output.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("guest console:\n%s", withoutBase64(console))
		}
	})
	for _, m := range g.Metrics {
		if strings.Contains(m, "unwind") || strings.Contains(m, "samples") {
			t.Logf("guest metric %s", m)
		}
	}
	if !g.Ready || g.CollectorExit != 0 || g.OTLP == nil {
		t.Fatalf("the collector did not run to the end in the guest (ready %v, exit status %d, output file %d bytes)", g.Ready, g.CollectorExit, len(g.OTLP))
	}
	recs, err := Records(g.OTLP)
	if err != nil {
		t.Fatalf("output file: %v", err)
	}
	var reqs []pprofileotlp.ExportRequest
	for i, b := range recs {
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b); err != nil {
			t.Fatalf("request %d does not decode: %v", i, err)
		}
		reqs = append(reqs, req)
	}
	t.Logf("%d requests, %d bytes from the guest", len(reqs), len(g.OTLP))
	checkStacks(t, ctx, g, reqs, filepath.Join(out, "tree"), filepath.Join(deb, "tree", "usr", "lib", "debug"))
}

// bootGuest runs qemu on the kernel and initramfs until the guest powers off or
// guestDeadline passes, and returns what the guest reported with the whole console.
func bootGuest(t *testing.T, ctx context.Context, kernel, initrd string) (*Guest, string) {
	t.Helper()
	qctx, cancel := context.WithTimeout(ctx, guestDeadline)
	defer cancel()
	// -cpu max has pointer authentication; its implementation-defined algorithm is much
	// cheaper to emulate than QARMA. -nic none: the guest needs no network (and the default
	// NIC wants a ROM file).
	cmd := exec.CommandContext(qctx, "qemu-system-aarch64",
		"-M", "virt", "-cpu", "max,pauth-impdef=on", "-smp", "2", "-m", "1024",
		"-nographic", "-no-reboot", "-nic", "none",
		"-kernel", kernel, "-initrd", initrd,
		"-append", fmt.Sprintf("console=ttyAMA0 quiet panic=-1 e2e_secs=%d e2e_hz=%d", sampleSecs, sampleHz))
	console := newStampedConsole()
	cmd.Stdout, cmd.Stderr = console, console
	// qemu's -nographic console reads stdin: give it none.
	cmd.Stdin = nil
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	console.start = start
	err := cmd.Run()
	took := time.Since(start)
	text := console.String()
	if qctx.Err() != nil {
		t.Fatalf("the guest did not power off within %v; console:\n%s", guestDeadline, withoutBase64(text))
	}
	if err != nil {
		t.Fatalf("qemu: %v; console:\n%s", err, withoutBase64(text))
	}
	g, perr := ParseConsole(strings.NewReader(text))
	if perr != nil {
		t.Fatalf("guest console: %v; console:\n%s", perr, withoutBase64(text))
	}
	if !g.Done {
		t.Fatalf("the guest's /init did not reach its end; console:\n%s", withoutBase64(text))
	}
	t.Logf("guest (%s) ran for %v: %s", g.Kernel, took.Round(time.Millisecond), console.timeline())
	return g, text
}

// withoutBase64 drops the output file's lines from a console for a log.
func withoutBase64(console string) string {
	var b strings.Builder
	skipped := 0
	for line := range strings.Lines(console) {
		if strings.Contains(line, linePrefix+"b64 ") {
			skipped++
			continue
		}
		b.WriteString(line)
	}
	if skipped > 0 {
		fmt.Fprintf(&b, "(%d lines of the base64 output file left out)\n", skipped)
	}
	return b.String()
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// stampedConsole keeps the console and when each tag first appeared on it, for the run's
// timeline (boot, collector ready, output written).
type stampedConsole struct {
	mu      sync.Mutex
	start   time.Time
	buf     strings.Builder
	partial []byte
	stamps  map[string]time.Duration
	order   []string
}

func newStampedConsole() *stampedConsole {
	return &stampedConsole{start: time.Now(), stamps: map[string]time.Duration{}}
}

func (c *stampedConsole) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		line := string(c.partial[:i])
		c.partial = c.partial[i+1:]
		if j := strings.Index(line, linePrefix); j >= 0 {
			tag, _, _ := strings.Cut(strings.TrimRight(line[j+len(linePrefix):], "\r"), " ")
			if _, ok := c.stamps[tag]; !ok {
				c.stamps[tag] = time.Since(c.start)
				c.order = append(c.order, tag)
			}
		}
	}
	return len(p), nil
}

func (c *stampedConsole) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// timeline says when each tag first appeared, from qemu's start.
func (c *stampedConsole) timeline() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, tag := range c.order {
		parts = append(parts, fmt.Sprintf("%s %v", tag, c.stamps[tag].Round(100*time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}
