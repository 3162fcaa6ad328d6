package k8s_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/testsupport"
)

// capBits are the capability numbers of capabilities(7) for the names Kubernetes uses.
var capBits = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "KILL": 5, "SETGID": 6,
	"SETUID": 7, "NET_BIND_SERVICE": 10, "NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14,
	"SYS_PTRACE": 19, "SYS_ADMIN": 21, "SYS_RESOURCE": 24, "SYSLOG": 34, "PERFMON": 38, "BPF": 39,
}

// otherUserProgram runs as another user from a file only that user may read (mode 0700): it
// alternates user-space work with reads from /dev/zero, whose copying happens in the kernel,
// so its samples carry kernel frames too.
const otherUserProgram = `#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static volatile unsigned long sink;
__attribute__((noinline)) unsigned long spin(unsigned long x) {
	for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}
int main(int argc, char **argv) {
	static char buf[1 << 20];
	int fd = open("/dev/zero", O_RDONLY);
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	while (time(NULL) < end) {
		sink += spin(sink);
		if (read(fd, buf, sizeof buf) < 0) return 1;
	}
	return 0;
}
`

// TestCollectorUnderManifestCapabilities runs the real collector as root with its capability
// sets (bounding, permitted, effective, inheritable, ambient) reduced to exactly what the
// DaemonSet grants, as the container runtime does, and checks the two things short rights used
// to break: kernel frames get names (kallsyms reads as zeros without CAP_SYSLOG), and a binary
// readable only by its owner (mode 0700, another user's), running as that user, gets its build
// ID (CAP_DAC_READ_SEARCH; CAP_SYS_PTRACE for /proc/<pid>/root and maps).
func TestCollectorUnderManifestCapabilities(t *testing.T) {
	caps := manifestCollectorCaps(t, build(t, "production").objs)
	res := runCollectorUnder(t, caps)
	if res.kernel == 0 {
		t.Errorf("no kernel frames sampled: the test program's reads should put some on its stacks\n%s", res.logs)
	} else if res.namedKernel == 0 {
		t.Errorf("%d kernel frames, none named: /proc/kallsyms unreadable under %v (CAP_SYSLOG?)", res.kernel, caps)
	}
	if len(res.mappings) == 0 {
		t.Errorf("no mapping of the private binary in the profiles\n%s", res.logs)
	}
	for _, a := range res.mappings {
		if a[otlpattr.BuildIDGNU] != res.wantGNU {
			t.Errorf("mapping of the 0700 binary owned by another user has GNU build ID %q, want %q: the collector cannot read it under %v (CAP_DAC_READ_SEARCH?)", a[otlpattr.BuildIDGNU], res.wantGNU, caps)
		}
	}
	t.Logf("capabilities %v: %d kernel frames (%d named), %d mappings of the private binary", caps, res.kernel, res.namedKernel, len(res.mappings))
}

// TestCollectorCapabilityCheckHasTeeth runs the same collector without CAP_SYSLOG and
// CAP_DAC_READ_SEARCH, the set the manifest once granted, and expects exactly the failures
// the test above looks for: unnamed kernel frames, a private binary without its build ID.
func TestCollectorCapabilityCheckHasTeeth(t *testing.T) {
	var caps []string
	for _, c := range manifestCollectorCaps(t, build(t, "production").objs) {
		if c != "SYSLOG" && c != "DAC_READ_SEARCH" {
			caps = append(caps, c)
		}
	}
	res := runCollectorUnder(t, caps)
	if res.kernel == 0 {
		t.Fatalf("no kernel frames sampled; the comparison proves nothing\n%s", res.logs)
	}
	if res.namedKernel != 0 {
		t.Errorf("%d of %d kernel frames named without CAP_SYSLOG: the kallsyms check cannot fail here", res.namedKernel, res.kernel)
	}
	for _, a := range res.mappings {
		if a[otlpattr.BuildIDGNU] == res.wantGNU {
			t.Errorf("the private binary's build ID was read without CAP_DAC_READ_SEARCH: the check cannot fail here")
		}
	}
}

type collectorRun struct {
	kernel, namedKernel int
	mappings            []map[string]string
	wantGNU             string
	logs                string
}

// runCollectorUnder runs the real collector as root with its capability sets (bounding,
// permitted, effective, inheritable, ambient) reduced to exactly caps, as the container runtime
// does, while a program readable only by its owner (mode 0700, another user's) runs as that
// user, and returns what the collector reported about it.
func runCollectorUnder(t *testing.T, caps []string) collectorRun {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the collector")
	}
	if os.Geteuid() != 0 {
		requireOrSkip(t, "root (the collector loads eBPF programs)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		requireOrSkip(t, "setpriv (util-linux)")
	}
	var mask uint64
	var names []string
	for _, c := range caps {
		bit, ok := capBits[c]
		if !ok {
			t.Fatalf("capability %s: bit unknown to this test", c)
		}
		mask |= 1 << bit
		names = append(names, "+"+strings.ToLower(c))
	}
	set := "-all," + strings.Join(names, ",")

	// The program lives in a directory everyone may enter, as a file only its owner (nobody)
	// may read or run.
	dir, err := os.MkdirTemp("", "profsym-caps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	src := testsupport.CompileC(t, otherUserProgram, "-O1", "-fno-omit-frame-pointer", "-Wl,--build-id")
	prog := filepath.Join(dir, "private-prog")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, data, 0o700); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	if err := os.Chown(prog, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	want, err := buildid.FromFile(prog)
	if err != nil || want.GNU == "" {
		t.Fatalf("build ID of the test program: %+v, %v", want, err)
	}

	// The collector is built first: a cold build on a busy machine takes minutes, and the
	// program must still run when the collector starts. It runs until the test ends (it is
	// killed then), ten minutes at most.
	bin := serviceBinary(t, "collector")
	victim := exec.CommandContext(t.Context(), setpriv, "--reuid="+strconv.Itoa(nobody), "--regid="+strconv.Itoa(nobody), "--clear-groups", "--", prog, "600")
	victim.Stderr = os.Stderr
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })

	out := filepath.Join(t.TempDir(), "profiles.bin")
	metricsAddr := "127.0.0.1:" + strconv.Itoa(testsupport.FreePort(t))
	collector := exec.CommandContext(t.Context(), setpriv, "--inh-caps="+set, "--ambient-caps="+set, "--bounding-set="+set, "--",
		bin, "--output-file="+out, "--pid="+strconv.Itoa(victim.Process.Pid), "--frequency=199", "--interval=2s",
		"--metrics-addr="+metricsAddr, "--k8s-node-name=test-node")
	var logs testsupport.Buffer
	collector.Stdout, collector.Stderr = &logs, &logs
	if err := collector.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- collector.Wait() }()
	time.Sleep(500 * time.Millisecond)
	if got := effectiveCaps(t, collector.Process.Pid); got != mask {
		t.Errorf("collector runs with capabilities %#x; the manifest grants %#x (%v)", got, mask, caps)
	}
	// Run until the collector has reported two requests with samples in them (by its own
	// counters, so a loaded machine that starts it slowly only makes the test longer).
	for deadline := time.Now().Add(2 * time.Minute); ; {
		select {
		case err := <-exited:
			t.Fatalf("collector exited under the manifest's capabilities: %v\n%s", err, logs.String())
		case <-time.After(250 * time.Millisecond):
		}
		m := collectorMetrics(metricsAddr)
		if m["profsym_collector_samples_total"] > 0 && m["profsym_collector_profiles_requests_total"] >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector reported no samples in 2 minutes (%v)\n%s", m, logs.String())
		}
	}
	_ = collector.Process.Signal(os.Interrupt)
	select {
	case err := <-exited:
		// An interrupted collector exits 0; anything else is in its log if the checks fail.
		t.Logf("collector stopped: %v", err)
	case <-time.After(15 * time.Second):
		_ = collector.Process.Kill()
		t.Logf("collector killed after 15 s: %v", <-exited)
	}

	reqs := readOutput(t, out)
	if len(reqs) == 0 {
		t.Fatalf("the collector wrote no profiles\n%s", logs.String())
	}
	var res collectorRun
	res.wantGNU = want.GNU
	res.logs = logs.String()
	for _, p := range reqs {
		k, nk, found := inspect(p, prog)
		res.kernel += k
		res.namedKernel += nk
		res.mappings = append(res.mappings, found...)
	}
	return res
}

func manifestCollectorCaps(t *testing.T, objs []runtime.Object) []string {
	t.Helper()
	for _, o := range objs {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok || ds.Name != "collector" {
			continue
		}
		sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
		if sc == nil || sc.Capabilities == nil {
			t.Fatal("the collector DaemonSet adds no capabilities")
		}
		var caps []string
		for _, c := range sc.Capabilities.Add {
			caps = append(caps, string(c))
		}
		return caps
	}
	t.Fatal("no collector DaemonSet in the rendering")
	return nil
}

func effectiveCaps(t *testing.T, pid int) uint64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no CapEff in /proc/%d/status", pid)
	return 0
}

// collectorMetrics reads the collector's counters from its /metrics (none while it is not
// serving yet).
func collectorMetrics(addr string) map[string]float64 {
	out := map[string]float64{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return out
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = f
		}
	}
	return out
}

// readOutput reads the collector's --output-file: uvarint-length-delimited
// ExportProfilesServiceRequest messages.
func readOutput(t *testing.T, path string) []pprofile.Profiles {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var out []pprofile.Profiles
	for {
		n, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("record %d: %v", len(out), err)
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(br, rec); err != nil {
			t.Fatalf("record %d: %v", len(out), err)
		}
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(rec); err != nil {
			t.Fatalf("record %d: %v", len(out), err)
		}
		out = append(out, req.Profiles())
	}
}

// inspect counts the kernel frames of p's samples and those with a function name, and returns
// the attributes of every mapping of file.
func inspect(p pprofile.Profiles, file string) (kernel, named int, mappings []map[string]string) {
	d := p.Dictionary()
	str := func(i int32) string {
		if int(i) < d.StringTable().Len() {
			return d.StringTable().At(int(i))
		}
		return ""
	}
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
		if name := str(m.FilenameStrindex()); name == file || filepath.Base(name) == filepath.Base(file) {
			mappings = append(mappings, attrs(m.AttributeIndices()))
		}
	}
	for i := 1; i < d.LocationTable().Len(); i++ {
		loc := d.LocationTable().At(i)
		if attrs(loc.AttributeIndices())[otlpattr.FrameType] != otlpattr.FrameTypeKernel {
			continue
		}
		kernel++
		if loc.Lines().Len() > 0 && str(d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex())).NameStrindex()) != "" {
			named++
		}
	}
	return kernel, named, mappings
}
