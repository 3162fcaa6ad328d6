//go:build linux

package arm64

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/e2e/guest"
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
			t.Logf("guest console:\n%s", guest.WithoutBase64(console))
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
	recs, err := guest.Records(g.OTLP)
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
func bootGuest(t *testing.T, ctx context.Context, kernel, initrd string) (*guest.Guest, string) {
	t.Helper()
	// -cpu max has pointer authentication; its implementation-defined algorithm is much
	// cheaper to emulate than QARMA. -nic none: the guest needs no network (and the default
	// NIC wants a ROM file).
	r, err := guest.Boot(ctx, guestDeadline, "qemu-system-aarch64",
		"-M", "virt", "-cpu", "max,pauth-impdef=on", "-smp", "2", "-m", "1024",
		"-nographic", "-no-reboot", "-nic", "none",
		"-kernel", kernel, "-initrd", initrd,
		"-append", fmt.Sprintf("console=ttyAMA0 quiet panic=-1 e2e_secs=%d e2e_hz=%d", sampleSecs, sampleHz))
	if err != nil {
		t.Fatalf("%v; console:\n%s", err, guest.WithoutBase64(r.Console))
	}
	t.Logf("guest (%s) ran for %v: %s", r.Guest.Kernel, r.Took.Round(time.Millisecond), r.Timeline)
	return r.Guest, r.Console
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
