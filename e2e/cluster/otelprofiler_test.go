//go:build linux

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"
	apimeta "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/profsym/profsym/e2e/cluster"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/debugfile"
)

// otelProfilerValues run the chart's collector.mode otel-ebpf-profiler on the single amd64
// node: the OpenTelemetry eBPF profiler (privileged, as the chart's default) in front of one
// gateway and one symbolizer. profsym's collector is not deployed beside it
// (uploadBinaries: false): the interpreter reaches the store by `symbolizer upload` alone, so
// the native frames that come out named were named by that upload.
const otelProfilerValues = `architectures: [amd64]
images:
  pullPolicy: Never
collector:
  mode: otel-ebpf-profiler
otelEbpfProfiler:
  uploadBinaries: false
gateway:
  minReplicas: 1
  maxReplicas: 1
symbolizer:
  minReplicas: 1
  maxReplicas: 1
  redis:
    mode: in-cluster
`

// otelProfilerImages are the offline builder's images otelProfilerValues run, and the Python
// workload (deploy/imagebuild/workloads/pyloop) the profiler profiles.
const otelProfilerImages = "symbolizer,gateway,redis,otel-ebpf-profiler,workload-python"

// otelProfilerHz is the profiler's sampling frequency: the chart's collector.frequency, which
// it sets in place of the profiler's own 20 Hz.
const otelProfilerHz = 19

// pyloopFunctions are the Python workload's functions.
var pyloopFunctions = []string{"main", "run", "outer", "middle", "leaf"}

// pythonWorkloadPod runs the Python workload in a namespace of its own.
const pythonWorkloadPod = `apiVersion: v1
kind: Namespace
metadata: {name: pyworkload}
---
apiVersion: v1
kind: Pod
metadata: {name: pyloop, namespace: pyworkload}
spec:
  containers:
    - name: pyloop
      image: localhost/profsym/workload-python:e2e
      imagePullPolicy: Never
      resources: {limits: {cpu: 500m}}
`

// TestOtelEbpfProfilerOnCluster installs the chart in collector.mode otel-ebpf-profiler with
// the profiler's Collector distribution the offline builder makes (deploy/imagebuild
// -only otel-ebpf-profiler) on a node whose tracefs is at /sys/kernel/tracing only, runs the
// Python workload, and reads its profiles from the gateway's pprof files: before its
// interpreter is in the store its Python functions come out named by the profiler and the
// interpreter's native frames as addresses; after `symbolizer upload` of the interpreter,
// >= 95% of its samples carry both its Python functions and the interpreter's native frames,
// every one of them named by profsym.
func TestOtelEbpfProfilerOnCluster(t *testing.T) {
	needCluster(t)
	helm := filepath.Join(cluster.DefaultToolsDir(), "helm")
	if _, err := os.Stat(helm); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("helm (bash .ci/install-deps): %v", err)
		}
		t.Skipf("helm (bash .ci/install-deps): %v", err)
	}
	ctx := t.Context()
	nodeTracefs(t)
	c, clusterDir, root, _ := upWithImages(t, otelProfilerImages)

	// The workload runs before the profiler starts, so the profiler finds it by its first walk of
	// the node's processes, already python3. Started after the profiler, its first samples can
	// come while its container's init process is still runc's, before the exec into python3
	// (seen: the pod's first profile named the executable "/", 40% of its samples Python), and
	// what the profiler learns of the process then races with the exec.
	if out, err := c.Kubectl(ctx, []byte(pythonWorkloadPod), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := c.Kubectl(ctx, nil, "wait", "-n", "pyworkload", "--for=condition=Ready", "pod/pyloop", "--timeout=2m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	pid := pyloopPID(ctx, t, client)
	t.Logf("pyloop is process %s: %s", pid, processCPU(pid))
	cpu := &cpuTrack{pid: pid}
	cpu.record()

	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(otelProfilerValues), 0o644); err != nil {
		t.Fatal(err)
	}
	helmHome := t.TempDir()
	install := exec.CommandContext(ctx, "nsenter", "--net="+c.NetnsPath, "--",
		helm, "install", "profsym", filepath.Join(root, "deploy/helm/profsym"), "--kubeconfig", c.Kubeconfig, "-f", values, "--timeout", "2m")
	install.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"), "HELM_DATA_HOME="+filepath.Join(helmHome, "data"))
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	installed := time.Now()
	for _, s := range []string{
		"create secret generic profsym-upload-tokens -n profsym --from-literal=tokens=upload-token-e2e",
		"create secret generic profsym-read-token -n profsym --from-literal=token=read-token-e2e",
	} {
		if out, err := c.Kubectl(ctx, nil, strings.Fields(s)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	want := map[string]string{
		"symbolizer": "profsym", "gateway": "profsym", "profsym-redis": "profsym", "otel-ebpf-profiler": "profsym-collector",
	}
	if err := waitChartReady(ctx, t, client, want, 5*time.Minute); err != nil {
		for _, ns := range []string{"profsym", "profsym-collector"} {
			out, _ := c.Kubectl(context.Background(), nil, "describe", "pods", "-n", ns)
			t.Logf("kubectl describe pods -n %s:\n%s", ns, out)
			logs, _ := c.Kubectl(context.Background(), nil, "logs", "-n", ns, "--all-containers", "--prefix", "--tail=40", "-l", "app.kubernetes.io/part-of=profsym")
			t.Logf("logs -n %s:\n%s", ns, logs)
		}
		t.Fatal(err)
	}
	t.Logf("every pod Ready %v after helm install", time.Since(installed).Round(time.Millisecond))
	if ds, err := client.AppsV1().DaemonSets("profsym-collector").List(ctx, apimeta.ListOptions{}); err != nil {
		t.Fatal(err)
	} else if len(ds.Items) != 1 || ds.Items[0].Name != "otel-ebpf-profiler" {
		t.Fatalf("DaemonSets in profsym-collector: %d, want the profiler's alone (uploadBinaries false)", len(ds.Items))
	}

	dir, _ := gatewayPprofDir(ctx, t, client, clusterDir)
	seen := map[string]bool{}
	// A failure below is the profiler's or the workload's: keep what they said.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, args := range [][]string{
			{"logs", "-n", "profsym-collector", "-l", "app.kubernetes.io/name=otel-ebpf-profiler", "--tail=300", "--timestamps"},
			{"get", "events", "-n", "pyworkload"},
			{"describe", "pod", "-n", "pyworkload", "pyloop"},
		} {
			out, err := c.Kubectl(context.Background(), nil, args...)
			t.Logf("kubectl %s (%v):\n%s", strings.Join(args, " "), err, out)
		}
	})

	// Before the upload: Python functions named by the profiler, the interpreter's frames not.
	ps, err := pyloopProfiles(ctx, dir, seen, cpu, 3*time.Minute, func(s pyloopStats) bool { return s.python > 0 && s.interp > 0 })
	if err != nil {
		t.Fatalf("%v; pyloop: %s; %s", err, processCPU(pid), profilerState(pid))
	}
	before := ps.stats()
	t.Logf("before the upload: %s; resource %q; %s", before, ps.comments, ps.othersSummary())
	t.Logf("a stack: %s", ps.example())
	for _, a := range []string{"k8s.namespace.name=pyworkload", "k8s.container.name=pyloop", "process.executable.name=python3.11"} {
		if !slices.Contains(ps.comments, a) {
			t.Errorf("resource attributes %q: no %s", ps.comments, a)
		}
	}
	if before.interpNamed > 0 {
		t.Errorf("%d of %d samples have all the interpreter's native frames named before it is in the store: %s", before.interpNamed, before.total, ps.example())
	}

	// The interpreter, read on the node through the workload's process, and its debug file
	// (Debian's python3.11-dbg, found by the executable's build ID) to the symbolizer.
	t.Logf("pyloop: %s", processCPU(pid))
	link, err := os.Readlink(inRoot(pid, "usr/bin/python3"))
	if err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	pyExe, pyDebug := withDebugFile(t, files, inRoot(pid, "usr/bin", link), "python3.11-dbg")
	// The C library below the interpreter (__libc_start_main), with Debian's libc6-dbg.
	libc, libcDebug := withDebugFile(t, files, inRoot(pid, mappedFile(t, pid, "/libc.so.6")), "libc6-dbg")
	up := newUploader(ctx, t, c, client)
	// The debug files first: the gateway keeps the answers it got for an address (its cache
	// of cache_entries) when a better file of the binary arrives later, so profiles symbolized
	// between an executable's upload and its debug file's would keep the executable's symbol
	// table's answers (no lines, no static functions) for as long as the workload runs.
	up.upload(ctx, t, pyDebug, libcDebug)
	up.upload(ctx, t, pyExe, libc)
	uploaded := time.Now()

	// After it: the first profile with the interpreter's frames named, then the next minute's.
	if _, err := pyloopProfiles(ctx, dir, seen, cpu, 3*time.Minute, func(s pyloopStats) bool { return s.interpNamed > 0 }); err != nil {
		t.Fatalf("after the upload: %v; pyloop: %s; %s", err, processCPU(pid), profilerState(pid))
	}
	t.Logf("interpreter frames named %v after the upload", time.Since(uploaded).Round(time.Second))
	ps, err = pyloopProfiles(ctx, dir, seen, cpu, 3*time.Minute, func(s pyloopStats) bool { return s.total >= 200 })
	if err != nil {
		t.Fatalf("after the upload: %v; pyloop: %s; %s", err, processCPU(pid), profilerState(pid))
	}
	after := ps.stats()
	t.Logf("after the upload: %s; %s; pyloop: %s", after, ps.othersSummary(), processCPU(pid))
	// Samples against the CPU time the workload had in the profiles' collection windows: about
	// 1 when the profiler samples it as often as its CPU time says, far off when the sampling
	// stands in lockstep with its CPU limit's period (see collector.frequency in the chart).
	if used, ok := cpu.between(ps.from, ps.to); ok && used > 0 {
		t.Logf("pyloop's samples after the upload: %d in %v of its profiles, in which it had %.1f s of CPU: %.2f of the %.0f its CPU time is worth at %d Hz",
			after.total, ps.to.Sub(ps.from).Round(time.Second), used, float64(after.total)/(used*otelProfilerHz), used*otelProfilerHz, otelProfilerHz)
	}
	t.Logf("a stack: %s", ps.example())
	if after.python*100 < after.total*95 {
		t.Errorf("Python functions in %d of %d samples (%.1f%%), want >= 95%%", after.python, after.total, after.pct(after.python))
	}
	if after.whole*100 < after.total*95 {
		t.Errorf("the Python functions above the interpreter's native frames, all named, in %d of %d samples (%.1f%%), want >= 95%%", after.whole, after.total, after.pct(after.whole))
	}
	if after.allNamed*100 < after.total*95 {
		t.Errorf("every frame named in %d of %d samples (%.1f%%), want >= 95%%", after.allNamed, after.total, after.pct(after.allNamed))
	}
	if !slices.Contains(ps.interpFunctions, "_PyEval_EvalFrameDefault") {
		t.Errorf("the interpreter's frames name %q: no _PyEval_EvalFrameDefault, the evaluation loop every Python call runs in", ps.interpFunctions)
	}
	// From the debug file: source lines, and the static functions the executable's symbol
	// table does not name.
	if !strings.HasSuffix(ps.interpFiles["_PyEval_EvalFrameDefault"], "ceval.c") {
		t.Errorf("_PyEval_EvalFrameDefault is in file %q, want Python/ceval.c (from the debug file)", ps.interpFiles["_PyEval_EvalFrameDefault"])
	}
	t.Logf("%d functions of the interpreter named, %d inlined frames", len(ps.interpFunctions), ps.inlined)
}

// pyloopPID is the node's process ID of the Python workload (python3 /app/loop.py in the
// container of pod pyloop: its cgroup names the container's ID).
func pyloopPID(ctx context.Context, t *testing.T, client *kubernetes.Clientset) string {
	t.Helper()
	pod, err := client.CoreV1().Pods("pyworkload").Get(ctx, "pyloop", apimeta.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod pyloop: %d container statuses", len(pod.Status.ContainerStatuses))
	}
	_, id, ok := strings.Cut(pod.Status.ContainerStatuses[0].ContainerID, "://")
	if !ok || id == "" {
		t.Fatalf("pod pyloop: container ID %q", pod.Status.ContainerStatuses[0].ContainerID)
	}
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "/app/loop.py") {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(filepath.Dir(f), "cgroup"))
		if err == nil && strings.Contains(string(cg), id) {
			return filepath.Base(filepath.Dir(f))
		}
	}
	t.Fatalf("no process of the node runs /app/loop.py in container %s", id)
	return ""
}

// processCPU says how much CPU process pid has had (user and system time, from /proc/PID/stat)
// and how often its CPU cgroup's quota held it back (cpu.stat), for messages about a
// workload sampled less than its limit allows.
func processCPU(pid string) string {
	utime, stime, err := cpuSeconds(pid)
	if err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("%.1fs user, %.1fs system", utime, stime)
	cg, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(cg), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case slices.Contains(strings.Split(parts[1], ","), "cpu"):
			file = filepath.Join("/sys/fs/cgroup/cpu", parts[2], "cpu.stat")
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "cpu.stat")
		default:
			continue
		}
		if b, err := os.ReadFile(file); err == nil {
			return out + "; cgroup cpu.stat: " + strings.Join(strings.Fields(string(b)), " ")
		}
	}
	return out
}

// cpuSeconds is process pid's user and system CPU time, from /proc/PID/stat.
func cpuSeconds(pid string) (user, system float64, err error) {
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
	_, rest, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f))
	}
	const ticks = 100 // USER_HZ
	utime, err := strconv.ParseFloat(f[11], 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%s/stat utime: %w", pid, err)
	}
	stime, err := strconv.ParseFloat(f[12], 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%s/stat stime: %w", pid, err)
	}
	return utime / ticks, stime / ticks, nil
}

// cpuTrack records a process's CPU time as the test goes, to tell how much of it fell in a
// window of wall time.
type cpuTrack struct {
	pid string
	at  []time.Time
	cpu []float64 // seconds, user and system
}

func (c *cpuTrack) record() {
	u, s, err := cpuSeconds(c.pid)
	if err != nil {
		return
	}
	c.at = append(c.at, time.Now())
	c.cpu = append(c.cpu, u+s)
}

// between is the CPU time the process had from a to b, interpolated between the records
// around each; false when the records do not cover the window.
func (c *cpuTrack) between(a, b time.Time) (float64, bool) {
	x, okA := c.interpolate(a)
	y, okB := c.interpolate(b)
	return y - x, okA && okB
}

func (c *cpuTrack) interpolate(t time.Time) (float64, bool) {
	for i := 1; i < len(c.at); i++ {
		if t.Before(c.at[i-1]) || t.After(c.at[i]) {
			continue
		}
		span := c.at[i].Sub(c.at[i-1])
		if span <= 0 {
			return c.cpu[i], true
		}
		frac := float64(t.Sub(c.at[i-1])) / float64(span)
		return c.cpu[i-1] + frac*(c.cpu[i]-c.cpu[i-1]), true
	}
	return 0, false
}

// mappedFile is the path (in its mount namespace) of the file process pid maps whose path
// ends with suffix.
func mappedFile(t *testing.T, pid, suffix string) string {
	t.Helper()
	_, path, err := findMapping(pid, func(_, path string) bool { return strings.HasSuffix(path, suffix) })
	if err != nil {
		t.Fatalf("process %s maps no file *%s: %v", pid, suffix, err)
	}
	return path
}

// findMapping is the start address and path of the first line of /proc/PID/maps with a path
// that match takes (perms as "r-xp").
func findMapping(pid string, match func(perms, path string) bool) (uint64, string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "maps"))
	if err != nil {
		return 0, "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 6 || !match(f[1], f[5]) {
			continue
		}
		start, _, _ := strings.Cut(f[0], "-")
		addr, err := strconv.ParseUint(start, 16, 64)
		if err != nil {
			return 0, "", fmt.Errorf("/proc/%s/maps: %q: %w", pid, line, err)
		}
		return addr, f[5], nil
	}
	return 0, "", fmt.Errorf("/proc/%s/maps: no such mapping", pid)
}

// nodeTracefs makes the node's tracefs what a node whose systemd mounts only
// sys-kernel-tracing has: tracefs at /sys/kernel/tracing (this machine mounts neither it nor
// debugfs). It mounts it when missing and unmounts it at the end.
func nodeTracefs(t *testing.T) {
	t.Helper()
	const dir = "/sys/kernel/tracing"
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	if st.Type == unix.TRACEFS_MAGIC {
		t.Logf("tracefs already mounted at %s", dir)
		return
	}
	if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
		t.Fatalf("mount tracefs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("umount %s: %v", dir, err)
		}
	})
}

// pyloopStats counts the Python workload's samples (weighted by their first value).
type pyloopStats struct {
	total       int64
	python      int64 // with one of pyloopFunctions from loop.py
	interp      int64 // with a frame of the interpreter's executable
	interpNamed int64 // with the interpreter's frames, every one named
	whole       int64 // Python functions above the interpreter's frames, all named
	allNamed    int64 // every frame named (the interpreter's, the C library's, the kernel's)
}

func (s pyloopStats) pct(n int64) float64 {
	if s.total == 0 {
		return 0
	}
	return 100 * float64(n) / float64(s.total)
}

func (s pyloopStats) String() string {
	return fmt.Sprintf("%d samples: Python functions in %.1f%%, interpreter frames in %.1f%%, all of them named in %.1f%%, both (Python above named native) in %.1f%%, every frame named in %.1f%%",
		s.total, s.pct(s.python), s.pct(s.interp), s.pct(s.interpNamed), s.pct(s.whole), s.pct(s.allNamed))
}

// pyloopProfile gathers the workload's profiles.
type pyloopProfile struct {
	s               pyloopStats
	comments        []string // the resource attributes of the first profile with Python functions
	files           int
	interpFunctions []string
	interpFiles     map[string]string // function -> source file, of the interpreter's frames
	inlined         int               // interpreter locations with more than one line (inlined calls)
	stacks          [][]string
	// from and to span the collection windows of the profiles of it (pprof's time and
	// duration: the profiler's reporting intervals).
	from, to time.Time
	// others counts the samples of every other process in the same files, by executable name:
	// the profiler's sampling rate on the node, to tell a workload sampled less from a
	// profiler that samples less.
	others map[string]int64
}

// othersSummary is the five processes with the most samples among others, and their total.
func (p *pyloopProfile) othersSummary() string {
	var total int64
	names := make([]string, 0, len(p.others))
	for n, c := range p.others {
		total += c
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return int(p.others[b] - p.others[a]) })
	var top []string
	for _, n := range names[:min(5, len(names))] {
		top = append(top, fmt.Sprintf("%s %d", n, p.others[n]))
	}
	return fmt.Sprintf("%d samples of other processes (%s)", total, strings.Join(top, ", "))
}

func (p *pyloopProfile) stats() pyloopStats { return p.s }

// example is the most frequent stack seen, leaf first.
func (p *pyloopProfile) example() string {
	if len(p.stacks) == 0 {
		return "(no stack)"
	}
	return strings.Join(p.stacks[len(p.stacks)-1], " <- ")
}

// isInterpreter reports whether a mapping is the Python interpreter's executable.
func isInterpreter(m *profile.Mapping) bool {
	return m != nil && strings.HasPrefix(filepath.Base(m.File), "python3")
}

func (p *pyloopProfile) addOther(pr *profile.Profile) {
	name := "?"
	for _, c := range pr.Comments {
		if v, ok := strings.CutPrefix(c, "process.executable.name="); ok {
			name = v
		}
	}
	if p.others == nil {
		p.others = map[string]int64{}
	}
	for _, s := range pr.Sample {
		w := int64(1)
		if len(s.Value) > 0 && s.Value[0] > 0 {
			w = s.Value[0]
		}
		p.others[name] += w
	}
}

func (p *pyloopProfile) add(pr *profile.Profile) {
	p.files++
	if pr.TimeNanos > 0 {
		from := time.Unix(0, pr.TimeNanos)
		to := from.Add(time.Duration(pr.DurationNanos))
		if p.from.IsZero() || from.Before(p.from) {
			p.from = from
		}
		if to.After(p.to) {
			p.to = to
		}
	}
	for _, s := range pr.Sample {
		w := int64(1)
		if len(s.Value) > 0 && s.Value[0] > 0 {
			w = s.Value[0]
		}
		p.s.total += w
		py, interp, named := -1, -1, true // index of the outermost Python frame, innermost interpreter frame
		var stack []string
		for i, l := range s.Location {
			if isInterpreter(l.Mapping) {
				if interp < 0 {
					interp = i
				}
				if len(l.Line) == 0 || l.Line[0].Function == nil || l.Line[0].Function.Name == "" {
					named = false
					stack = append(stack, fmt.Sprintf("python3+%#x", l.Address))
					continue
				}
			}
			for _, ln := range l.Line {
				if ln.Function == nil {
					continue
				}
				stack = append(stack, ln.Function.Name)
				if strings.HasSuffix(ln.Function.Filename, "loop.py") && slices.Contains(pyloopFunctions, ln.Function.Name) {
					py = i
				}
				if isInterpreter(l.Mapping) && !slices.Contains(p.interpFunctions, ln.Function.Name) {
					p.interpFunctions = append(p.interpFunctions, ln.Function.Name)
					if p.interpFiles == nil {
						p.interpFiles = map[string]string{}
					}
					p.interpFiles[ln.Function.Name] = ln.Function.Filename
				}
			}
			if isInterpreter(l.Mapping) && len(l.Line) > 1 {
				p.inlined++
			}
			if len(l.Line) == 0 && !isInterpreter(l.Mapping) {
				stack = append(stack, fmt.Sprintf("%#x", l.Address))
			}
		}
		if py >= 0 {
			p.s.python += w
		}
		if !slices.ContainsFunc(s.Location, func(l *profile.Location) bool {
			return !slices.ContainsFunc(l.Line, func(ln profile.Line) bool { return ln.Function != nil && ln.Function.Name != "" })
		}) {
			p.s.allNamed += w
		}
		if interp >= 0 {
			p.s.interp += w
			if named {
				p.s.interpNamed += w
			}
		}
		// Leaf first: the Python frames come before (above) the interpreter's native frames
		// that run them.
		if py >= 0 && interp >= 0 && named {
			lastInterp := 0
			for i, l := range s.Location {
				if isInterpreter(l.Mapping) {
					lastInterp = i
				}
			}
			if lastInterp > py {
				p.s.whole += w
			}
		}
		if len(p.stacks) == 0 || len(stack) > len(p.stacks[len(p.stacks)-1]) {
			p.stacks = append(p.stacks, stack)
		}
	}
}

// pyloopProfiles reads the gateway's new pprof files of pod pyloop (those not in seen) until
// the ones read so far satisfy done.
func pyloopProfiles(ctx context.Context, dir string, seen map[string]bool, cpu *cpuTrack, timeout time.Duration, done func(pyloopStats) bool) (*pyloopProfile, error) {
	p := &pyloopProfile{}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		cpu.record()
		files, _ := filepath.Glob(filepath.Join(dir, "profile-*.pb.gz"))
		for _, f := range files {
			if seen[f] {
				continue
			}
			seen[f] = true
			pr, err := readPprof(f)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(pr.Comments, "k8s.pod.name=pyloop") {
				p.addOther(pr)
				continue
			}
			// The resource of the first profile with the workload's Python functions: the pod's
			// first samples may be its container's init process, which runc execs into python3
			// only then, under another executable's name.
			python := p.s.python
			p.add(pr)
			if p.comments == nil && p.s.python > python {
				p.comments = pr.Comments
			}
			if done(p.s) {
				cpu.record() // after every window read
				return p, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	return nil, fmt.Errorf("no (or not enough) profiles of pod pyloop in %s after %v: %d files of it, %s; a stack: %s; %s", dir, timeout, p.files, p.s, p.example(), p.othersSummary())
}

// withDebugFile copies an executable the node reads (a process's executable through
// the process's root under /proc) and its debug file on the node (/usr/lib/debug/.build-id/xx/yyyy.debug, as
// Debian's -dbg packages install it) into dir, and returns the two copies.
func withDebugFile(t *testing.T, dir, exe, debugPackage string) (string, string) {
	t.Helper()
	ids, err := buildid.FromFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	id := ids.GNU
	if len(id) < 3 {
		t.Fatalf("%s: no GNU build ID", exe)
	}
	debug := debugfile.BuildIDPath("/usr/lib/debug", id)
	if _, err := os.Stat(debug); err != nil {
		msg := fmt.Sprintf("the debug file of %s (build ID %s), from Debian's %s (bash .ci/install-deps): %v", exe, id, debugPackage, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	bin := filepath.Join(dir, filepath.Base(exe))
	dbg := bin + ".debug"
	for src, dst := range map[string]string{exe: bin, debug: dbg} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return bin, dbg
}

// uploader runs `symbolizer upload` against the cluster's symbolizer Service, as a CI
// pipeline would.
type uploader struct {
	c      *cluster.Cluster
	cli    string
	server string
}

func newUploader(ctx context.Context, t *testing.T, c *cluster.Cluster, client *kubernetes.Clientset) *uploader {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cli := filepath.Join(t.TempDir(), "symbolizer")
	build := exec.CommandContext(ctx, "go", "build", "-o", cli, "./services/symbolizer")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./services/symbolizer: %v\n%s", err, out)
	}
	svc, err := client.CoreV1().Services("profsym").Get(ctx, "symbolizer", apimeta.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &uploader{c: c, cli: cli, server: "http://" + svc.Spec.ClusterIP + ":7070"}
}

func (u *uploader) upload(ctx context.Context, t *testing.T, files ...string) {
	t.Helper()
	args := append([]string{"--net=" + u.c.NetnsPath, "--", u.cli, "upload", "--server", u.server, "--token", "upload-token-e2e", "--progress", "plain"}, files...)
	out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("symbolizer upload: %v\n%s", err, out)
	}
	t.Logf("symbolizer upload: %s", strings.TrimSpace(string(out)))
}

// gatewayPprofDir returns the folder, seen from the node, where the one gateway pod writes the
// pprof files of its output (the chart's default pprof exporter, on an emptyDir), and its name.
func gatewayPprofDir(ctx context.Context, t *testing.T, client *kubernetes.Clientset, clusterDir string) (string, string) {
	t.Helper()
	gws, err := client.CoreV1().Pods("profsym").List(ctx, apimeta.ListOptions{LabelSelector: "app.kubernetes.io/name=gateway"})
	if err != nil || len(gws.Items) != 1 {
		t.Fatalf("gateway pods: %v (%d)", err, len(gws.Items))
	}
	g := gws.Items[0]
	return filepath.Join(clusterDir, "kubelet", "root", "pods", string(g.UID), "volumes", "kubernetes.io~empty-dir", "tmp", "pprof"), g.Name
}

// readPprof reads one of the gateway's pprof files.
func readPprof(file string) (*profile.Profile, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// inRoot is the path of a file of process pid's filesystem (its mount namespace's root, under
// /proc), from the node.
func inRoot(pid string, elem ...string) string {
	return filepath.Join(append([]string{"/proc", pid, "root"}, elem...)...)
}
