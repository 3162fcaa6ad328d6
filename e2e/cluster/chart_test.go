//go:build linux

package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.opentelemetry.io/collector/pdata/pprofile"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/profsym/profsym/e2e/cluster"
)

// chartImages are the offline builder's images the test runs: the chart's (symbolizer,
// gateway, collector, Redis), the store's (MinIO, testdata/minio.yaml) and the workloads'
// (testdata/workloads.yaml).
var chartImages = "symbolizer,gateway,collector,redis,minio,workload-c,workload-go"

// deploySteps are the commands of the README's deploy on the cluster ("The chart on the
// cluster"), which the test runs in this order, after importing the images of chartImages:
// kubectl and helm inside the cluster's network namespace with its kubeconfig, from the
// repository's root. The store comes first (the symbolizers need their bucket when they start);
// the Secrets are the ones the chart names and never creates (values.yaml): the upload and read
// tokens, and the store's credentials (testdata/minio.yaml's). The workloads start once every
// pod of the chart is Ready.
var deploySteps = []string{
	"kubectl apply -f e2e/cluster/testdata/minio.yaml",
	"kubectl rollout status -n minio deployment/minio --timeout=3m",
	"helm install profsym deploy/helm/profsym -f e2e/cluster/testdata/values.yaml --timeout 2m",
	"kubectl create secret generic profsym-upload-tokens -n profsym --from-literal=tokens=upload-token-e2e",
	"kubectl create secret generic profsym-read-token -n profsym --from-literal=token=read-token-e2e",
	"kubectl create secret generic profsym-upload-token -n profsym-collector --from-literal=token=upload-token-e2e",
	"kubectl create secret generic profsym-s3 -n profsym --from-literal=access-key=profsym-e2e --from-literal=secret-key=profsym-e2e-secret",
	workloadsStep,
	"kubectl rollout status -n workload deployment/cchain --timeout=2m",
	"kubectl rollout status -n workload deployment/gochain --timeout=2m",
}

// workloadsStep starts the workloads; the test waits for the chart's pods before it.
const workloadsStep = "kubectl apply -f e2e/cluster/testdata/workloads.yaml"

// workload is a program of testdata/workloads.yaml: its Deployment (and container) name, the
// executable in its image, the functions of its chain, and the outermost function of a whole
// stack of it.
type workload struct {
	name, exe string
	chain     []string
	roots     []string
}

var workloads = []workload{
	// Built with -O2 -g -fomit-frame-pointer: mix is inlined into leaf. The C runtime's entry
	// point is the outermost frame of every stack of the process.
	{"cchain", "/app/cchain", []string{"main", "run", "outer", "middle", "leaf", "mix"}, []string{"_start"}},
	// A goroutine's stack ends in runtime.goexit (the return address its creation planted),
	// a thread's system stack in runtime.mstart, or rt0_go for the main thread's; mcall and
	// morestack clear the frame pointer as they switch to the system stack, so a stack of what
	// they run there ends in them.
	{"gochain", "/app/gochain", []string{"main.main", "main.run", "main.outer", "main.middle", "main.leaf"},
		[]string{"runtime.goexit", "runtime.mstart", "runtime.rt0_go", "runtime.mcall", "runtime.morestack"}},
}

// TestChartOnCluster installs the Helm chart on the cluster with the images the offline builder
// makes from the Dockerfiles, as testdata/values.yaml says (three symbolizer replicas on the S3
// store of testdata/minio.yaml, the collector's node-side upload, profiles out to this test's
// OTLP receiver), checks every pod becomes Ready through its own probes, then profiles the C
// and Go workloads of testdata/workloads.yaml and checks what leaves the gateway: whole stacks,
// symbolized as llvm-symbolizer symbolizes the same addresses, with the pods' exact attributes;
// the workloads' binaries in the store, uploaded from the node; each build ID answered by one
// symbolizer replica; and every sample the collector sent out of the gateway through a
// symbolizer pod deleted, a gateway rolling update and the collector pod restarted.
func TestChartOnCluster(t *testing.T) {
	needCluster(t)
	helm := filepath.Join(cluster.DefaultToolsDir(), "helm")
	llvm, llvmErr := exec.LookPath("llvm-symbolizer")
	for tool, err := range map[string]error{"helm (bash .ci/install-deps)": statErr(helm), "llvm-symbolizer (apt-get install llvm)": llvmErr} {
		if err == nil {
			continue
		}
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: %v", tool, err)
		}
		t.Skipf("%s: %v", tool, err)
	}
	ctx := t.Context()
	c, clusterDir, root, start := upWithImages(t, chartImages)

	sink, stopSink, err := startSink(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopSink)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(stdin []byte, args ...string) {
		t.Helper()
		if out, err := c.Kubectl(ctx, stdin, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	dumpPods := func() {
		for _, ns := range []string{"profsym", "profsym-collector", "minio", "workload"} {
			out, _ := c.Kubectl(context.Background(), nil, "describe", "pods", "-n", ns)
			t.Logf("kubectl describe pods -n %s:\n%s", ns, out)
			logs, _ := c.Kubectl(context.Background(), nil, "logs", "-n", ns, "--all-containers", "--prefix", "--tail=40", "-l", "app.kubernetes.io/part-of=profsym")
			t.Logf("logs -n %s:\n%s", ns, logs)
		}
	}

	helmHome := t.TempDir()
	var logs *collectorLogs
	var installed, chartReady time.Time
	for _, step := range deploySteps {
		args := strings.Fields(step)
		for i, a := range args {
			if strings.HasPrefix(a, "e2e/") || strings.HasPrefix(a, "deploy/") {
				args[i] = filepath.Join(root, a)
			}
		}
		if step == workloadsStep {
			chart := map[string]string{ // app.kubernetes.io/name -> namespace
				"symbolizer": "profsym", "gateway": "profsym", "profsym-redis": "profsym", "collector": "profsym-collector",
			}
			if err := waitChartReady(ctx, t, client, chart, 5*time.Minute); err != nil {
				dumpPods()
				t.Fatal(err)
			}
			chartReady = time.Now()
			t.Logf("every pod Ready %v after helm install", time.Since(installed).Round(time.Millisecond))
			checkChartPods(ctx, t, c, client)
		}
		switch args[0] {
		case "kubectl":
			kubectl(nil, args[1:]...)
		case "helm":
			cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + c.NetnsPath, "--", helm, "--kubeconfig", c.Kubeconfig}, args[1:]...)...)
			cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"),
				"HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"), "HELM_DATA_HOME="+filepath.Join(helmHome, "data"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", step, err, out)
			}
			installed = time.Now()
			// From the collector's first line on.
			logs = newCollectorLogs(clusterDir)
			logCtx, stopLogs := context.WithCancel(context.Background())
			logsDone := make(chan struct{})
			go func() { logs.run(logCtx); close(logsDone) }()
			t.Cleanup(func() { stopLogs(); <-logsDone; logs.close() })
		default:
			t.Fatalf("deploySteps: %q is neither kubectl nor helm", step)
		}
	}
	profiled := time.Now()

	e := &chartE2E{c: c, client: client, sink: sink, logs: logs, llvm: llvm, store: storeClient(t, c, client), symbolizersReady: chartReady}
	if !t.Run("workloads profiled", func(t *testing.T) { e.checkWorkloads(ctx, t, profiled) }) {
		dumpPods()
		return
	}
	t.Run("routed by build ID", func(t *testing.T) { e.checkRouting(ctx, t) })
	t.Run("no sample lost", func(t *testing.T) { e.checkDisruptions(ctx, t) })
	t.Logf("test done %v after the start", time.Since(start).Round(time.Second))
}

func statErr(path string) error {
	_, err := os.Stat(path)
	return err
}

// checkChartPods checks what the Ready pods of the chart say of themselves: nothing could have
// been pulled, and the collector attached its eBPF programs (/readyz answers once they are:
// with the chart's capabilities, not privileged, under the runtime's default seccomp profile).
func checkChartPods(ctx context.Context, t *testing.T, c *cluster.Cluster, client *kubernetes.Clientset) {
	for _, ns := range []string{"profsym", "profsym-collector"} {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			for _, ctr := range append(p.Spec.InitContainers, p.Spec.Containers...) {
				if ctr.ImagePullPolicy != corev1.PullNever {
					t.Errorf("%s/%s container %s: imagePullPolicy %s, want Never (images.pullPolicy)", ns, p.Name, ctr.Name, ctr.ImagePullPolicy)
				}
			}
		}
	}
	logs, err := c.Kubectl(ctx, nil, "logs", "-n", "profsym-collector", "-l", "app.kubernetes.io/name=collector", "--tail=-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "eBPF sampler attached") {
		t.Errorf("the collector is Ready but its log does not say the eBPF sampler attached:\n%.4000s", logs)
	}
	// The default unwinder (auto) on this kernel is the CFI one, not the frame-pointer fall-back.
	if !strings.Contains(string(logs), "cfi_unwinding=true") && !strings.Contains(string(logs), `"cfi_unwinding":true`) {
		t.Errorf("the collector does not unwind with CFI on this node's kernel:\n%.4000s", logs)
	}
}

// chartE2E holds what the checks after the install share.
type chartE2E struct {
	c      *cluster.Cluster
	client *kubernetes.Clientset
	sink   *otlpSink
	logs   *collectorLogs
	llvm   string
	store  *minio.Client
	// buildIDs are the workloads' executables' build IDs, by workload name.
	buildIDs map[string]string
	// owners are the symbolizer replicas (pod names) the router sent each build ID to.
	owners map[string]string
	// symbolizersReady is when the three symbolizer replicas were Ready.
	symbolizersReady time.Time
}

// waitProfiles polls the requests the sink received since since until done says they hold
// what it waits for (it returns a description of what it saw for the failure message), for
// at most timeout.
func (e *chartE2E) waitProfiles(ctx context.Context, t *testing.T, since time.Time, timeout time.Duration, what string, done func([]pprofile.Profiles) (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, seen := done(e.sink.since(since))
		if ok {
			return
		}
		last = seen
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last seen: %s", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// symbolizedChain reports whether the profiles hold a sample of w's pod with w's whole chain
// of functions.
func symbolizedChain(w workload, pod string, pds []pprofile.Profiles) (bool, string) {
	p := profileOf(pds, pod, w.exe, w.roots)
	fs := p.functions()
	for _, fn := range w.chain {
		if !slices.Contains(fs, fn) {
			return false, fmt.Sprintf("%d samples of pod %s, its functions %q", p.samples, pod, fs)
		}
	}
	return true, ""
}

// podOf returns the one pod of a workload's Deployment.
func (e *chartE2E) podOf(ctx context.Context, t *testing.T, name string) corev1.Pod {
	t.Helper()
	pods, err := e.client.CoreV1().Pods("workload").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s: %v (%d)", name, err, len(pods.Items))
	}
	return pods.Items[0]
}

// checkWorkloads waits until the samples of both workloads leave the gateway with their whole
// chain symbolized: nothing but the collector's node-side upload puts their binaries in the
// store. Then it reads three more intervals of them and checks the stacks are whole,
// symbolized as llvm-symbolizer symbolizes the same addresses of the same file, with the
// pods' exact names, namespace, container, UID and container ID, as the API server and
// containerd know them.
func (e *chartE2E) checkWorkloads(ctx context.Context, t *testing.T, since time.Time) {
	for _, w := range workloads {
		pod := e.podOf(ctx, t, w.name).Name
		e.waitProfiles(ctx, t, since, 4*time.Minute, "a stack of "+pod+" with "+strings.Join(w.chain, ", "), func(pds []pprofile.Profiles) (bool, string) {
			return symbolizedChain(w, pod, pds)
		})
		t.Logf("%s symbolized %v after its Deployment was Ready", w.name, time.Since(since).Round(time.Second))
	}
	from := time.Now()
	sleep(ctx, 35*time.Second) // three collector intervals
	pds := e.sink.since(from)
	e.buildIDs = map[string]string{}
	for _, w := range workloads {
		pod := e.podOf(ctx, t, w.name)
		p := profileOf(pds, pod.Name, w.exe, w.roots)
		if p.samples == 0 {
			t.Errorf("%s: no samples in the 35 s after its stacks were first symbolized", w.name)
			continue
		}
		whole := 100 * float64(p.whole) / float64(p.samples)
		t.Logf("%s: %d samples, %.1f%% whole stacks (outermost frames: %v)", w.name, p.samples, whole, p.roots)
		if whole < 95 {
			t.Errorf("%s: %.1f%% of the samples are whole stacks (ending in %q), want >= 95%%; outermost frames: %v", w.name, whole, w.roots, p.roots)
		}
		pid := e.checkAttributes(ctx, t, w, pod, p)
		if pid == "" {
			continue
		}
		e.compareLLVM(ctx, t, w, inRoot(pid, w.exe), p)
		e.buildIDs[w.name] = p.buildID
		e.checkUploaded(ctx, t, w, p)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// checkAttributes checks the resource attributes of the workload's profiles against its pod
// as the API server has it and its container as containerd runs it; it returns the process's
// pid (process.pid).
func (e *chartE2E) checkAttributes(ctx context.Context, t *testing.T, w workload, pod corev1.Pod, p *workloadProfile) string {
	t.Helper()
	if len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: %d container statuses", pod.Name, len(pod.Status.ContainerStatuses))
	}
	cid, ok := strings.CutPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if !ok {
		t.Fatalf("pod %s: container ID %q is not containerd's", pod.Name, pod.Status.ContainerStatuses[0].ContainerID)
	}
	want := map[string]string{
		"k8s.pod.name": pod.Name, "k8s.namespace.name": "workload", "k8s.container.name": w.name,
		"k8s.pod.uid": string(pod.UID), "container.id": cid, "k8s.node.name": cluster.NodeName,
	}
	// containerd's task of that container, and its process.
	out, err := exec.CommandContext(ctx, "ctr", "--address", e.c.ContainerdSocket, "-n", "k8s.io", "tasks", "ls").Output()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v", err)
	}
	taskPID := ""
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == cid {
			taskPID = f[1]
		}
	}
	if taskPID == "" {
		t.Fatalf("containerd runs no task %s (pod %s):\n%s", cid, pod.Name, out)
	}
	want["process.pid"] = taskPID
	if len(p.resources) != 1 {
		t.Errorf("%s: %d distinct resources, want 1: %v", w.name, len(p.resources), p.resources)
	}
	for _, res := range p.resources {
		for k, v := range want {
			if res[k] != v {
				t.Errorf("%s: resource attribute %s = %q, want %q (API server, containerd)", w.name, k, res[k], v)
			}
		}
	}
	t.Logf("%s: resource %v", w.name, p.resources[0])
	return taskPID
}

// compareLLVM symbolizes every address of the workload's executable in its samples with
// llvm-symbolizer on the same file, and compares each frame, inlined ones included: function,
// file and line.
func (e *chartE2E) compareLLVM(ctx context.Context, t *testing.T, w workload, bin string, p *workloadProfile) {
	t.Helper()
	addrs := make([]uint64, 0, len(p.locations))
	for a := range p.locations {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	if len(addrs) == 0 {
		t.Errorf("%s: no address of %s in its samples", w.name, w.exe)
		return
	}
	var in strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&in, "0x%x\n", a)
	}
	cmd := exec.CommandContext(ctx, e.llvm, "--obj="+bin, "--inlining", "--output-style=LLVM")
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer --obj=%s: %v", bin, err)
	}
	blocks := strings.Split(strings.TrimSpace(string(out)), "\n\n")
	if len(blocks) != len(addrs) {
		t.Fatalf("llvm-symbolizer answered %d addresses of %d", len(blocks), len(addrs))
	}
	var match, frames, abi0 int
	var matchSamples, samples, unsymbolized int64
	for i, a := range addrs {
		l := p.locations[a]
		lines := strings.Split(blocks[i], "\n")
		var want []string
		for j := 0; j+1 < len(lines); j += 2 {
			file, line := lines[j+1], ""
			// FILE:LINE:COLUMN
			if k := strings.LastIndexByte(file, ':'); k > 0 {
				file = file[:k]
				if k := strings.LastIndexByte(file, ':'); k > 0 {
					file, line = file[:k], file[k+1:]
				}
			}
			fn := lines[j]
			if fn == "??" {
				fn = ""
			}
			if file == "??" {
				file = ""
			}
			// Go's assembly functions are named with their ABI in DWARF (runtime.goexit.abi0),
			// in the symbol table and pclntab without it: the name the Go tools print.
			if base, ok := strings.CutSuffix(fn, ".abi0"); ok {
				fn = base
				abi0++
			}
			want = append(want, fmt.Sprintf("%s %s:%s", fn, file, line))
		}
		// llvm-symbolizer's "??" and "??:0" for an address it knows nothing of: no frame, as
		// the gateway leaves such an address.
		if len(want) == 1 && want[0] == " :0" {
			want = nil
		}
		var got []string
		for _, f := range l.frames {
			got = append(got, fmt.Sprintf("%s %s:%d", f.Function, f.File, f.Line))
		}
		frames++
		samples += l.samples
		unsymbolized += l.unsymbolized
		if slices.Equal(got, want) {
			match++
			matchSamples += l.samples - l.unsymbolized
		} else if frames-match <= 10 {
			t.Logf("%s 0x%x: gateway %q, llvm-symbolizer %q", w.name, a, got, want)
		}
	}
	pct := 100 * float64(match) / float64(max(frames, 1))
	t.Logf("%s: %d of %d addresses of %s (%.1f%%) symbolized as llvm-symbolizer does (%d of its ABI-suffixed names without the suffix); of the %d frames of the samples on them, %d (%.1f%%) so, %d unsymbolized",
		w.name, match, frames, w.exe, pct, abi0, samples, matchSamples, 100*float64(matchSamples)/float64(max(samples, 1)), unsymbolized)
	if match != frames {
		t.Errorf("%s: %d of %d addresses symbolized otherwise than llvm-symbolizer", w.name, frames-match, frames)
	}
}

// checkUploaded checks that the collector uploaded the workload's executable from the node
// (its log says so) and that the store serves it (the symbolizer's debuginfod path).
func (e *chartE2E) checkUploaded(ctx context.Context, t *testing.T, w workload, p *workloadProfile) {
	t.Helper()
	if p.buildID == "" {
		t.Errorf("%s: its mapping of %s has no build ID", w.name, w.exe)
		return
	}
	_, uploads, _ := e.logs.snapshot()
	found := false
	for _, u := range uploads {
		if strings.HasSuffix(u.file, w.exe) && slices.Contains(p.buildIDs(), u.buildID) {
			t.Logf("%s: collector: debuginfo upload %s build_id=%s outcome=%s", w.name, u.file, u.buildID, u.outcome)
			found = found || u.outcome == "uploaded"
		}
	}
	if !found {
		t.Errorf("%s: the collector's log has no upload of %s (build IDs %v)", w.name, w.exe, p.buildIDs())
	}
	svc, err := e.client.CoreV1().Services("profsym").Get(ctx, "symbolizer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{p.ids["process.executable.build_id.gnu"], p.ids["process.executable.build_id.htlhash"]} {
		if id == "" {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+svc.Spec.ClusterIP+":7070/buildid/"+id+"/executable", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer read-token-e2e")
		resp, err := e.c.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: GET /buildid/%s/executable: %s", w.name, id, resp.Status)
			continue
		}
		t.Logf("%s: the store serves /buildid/%s/executable (%d bytes)", w.name, id, n)
		return
	}
}

// storeClient is an S3 client of testdata/minio.yaml's MinIO, connected inside the cluster's
// network namespace.
func storeClient(t *testing.T, c *cluster.Cluster, client *kubernetes.Clientset) *minio.Client {
	t.Helper()
	svc, err := client.CoreV1().Services("minio").Get(t.Context(), "minio", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := minio.New(svc.Spec.ClusterIP+":9000", &minio.Options{
		Creds:     credentials.NewStaticV4("profsym-e2e", "profsym-e2e-secret", ""),
		Transport: &http.Transport{DialContext: c.Dialer().DialContext},
		Region:    "us-east-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	return mc
}

// coverageShard is a symbolizer replica's tally of what Symbolize answered (coverage/ in the
// store, written by each replica about once a minute): the fields this test reads.
type coverageShard struct {
	Instance  string    `json:"instance"`
	UpdatedAt time.Time `json:"updated_at"`
	Entries   []struct {
		ID    string `json:"id"`
		Asked uint64 `json:"asked"`
	} `json:"entries"`
}

// tallies are the symbolizer replicas' coverage tallies: frames asked, by build ID and replica
// (its pod's name), and when each replica last wrote its tally.
type tallies struct {
	asked   map[string]map[string]uint64
	updated map[string]time.Time
}

// readTallies reads every replica's coverage tally from the store.
func (e *chartE2E) readTallies(ctx context.Context) (tallies, error) {
	ts := tallies{asked: map[string]map[string]uint64{}, updated: map[string]time.Time{}}
	for obj := range e.store.ListObjects(ctx, "profsym", minio.ListObjectsOptions{Prefix: "coverage/", Recursive: true}) {
		if obj.Err != nil {
			return ts, obj.Err
		}
		r, err := e.store.GetObject(ctx, "profsym", obj.Key, minio.GetObjectOptions{})
		if err != nil {
			return ts, err
		}
		var s coverageShard
		err = json.NewDecoder(r).Decode(&s)
		_ = r.Close()
		if err != nil {
			return ts, fmt.Errorf("%s: %w", obj.Key, err)
		}
		// The instance is the pod's host name and a random suffix.
		pod := s.Instance[:max(strings.LastIndexByte(s.Instance, '-'), 0)]
		ts.updated[pod] = s.UpdatedAt
		for _, en := range s.Entries {
			if ts.asked[en.ID] == nil {
				ts.asked[en.ID] = map[string]uint64{}
			}
			ts.asked[en.ID][pod] += en.Asked
		}
	}
	return ts, nil
}

// checkRouting checks that the gateway's affinity router found the three symbolizer replicas
// through the cluster DNS (the symbolizer-headless Service) and sends each build ID to one of
// them: between two writes of every replica's coverage tally, the frames asked of each build
// ID grow at one replica. (Before the three replicas were Ready the router knew fewer, and a
// build ID went to its owner among those: the tallies since the start show that too.)
func (e *chartE2E) checkRouting(ctx context.Context, t *testing.T) {
	pods, err := e.client.CoreV1().Pods("profsym").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=symbolizer"})
	if err != nil {
		t.Fatal(err)
	}
	var podIPs []string
	for _, p := range pods.Items {
		podIPs = append(podIPs, p.Status.PodIP)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	addrs, err := e.c.Dialer().Resolver(cluster.DNSServiceIP+":53").LookupHost(lctx, "symbolizer-headless.profsym.svc.cluster.local")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(podIPs)
	slices.Sort(addrs)
	t.Logf("cluster DNS: symbolizer-headless is %v; the symbolizer pods are %v", addrs, podIPs)
	if !slices.Equal(addrs, podIPs) || len(addrs) != 3 {
		t.Errorf("symbolizer-headless resolves to %v, want the three symbolizer pods' addresses %v", addrs, podIPs)
	}
	// Two readings of the tallies, each once every replica has written its tally after a
	// moment (they write about once a minute, when they have something new): the first after
	// the router had found the three replicas (it asks the cluster DNS every 10 s), the
	// second after the first. A replica that writes nothing for 80 s has nothing new.
	fresh := func(since time.Time) tallies {
		t.Helper()
		for {
			ts, err := e.readTallies(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, p := range pods.Items {
				if ts.updated[p.Name].After(since) {
					n++
				}
			}
			if n == len(pods.Items) || time.Since(since) > 80*time.Second {
				return ts
			}
			sleep(ctx, 3*time.Second)
		}
	}
	start := time.Now()
	before := fresh(e.symbolizersReady.Add(15 * time.Second))
	mid := time.Now()
	after := fresh(mid)
	t.Logf("coverage tallies read %v and %v after the routing check began", mid.Sub(start).Round(time.Second), time.Since(start).Round(time.Second))
	perReplica := map[string]int{}
	grown, several := 0, 0
	e.owners = map[string]string{}
	for id, by := range after.asked {
		var at []string
		for pod, n := range by {
			if n > before.asked[id][pod] {
				at = append(at, pod)
			}
		}
		if len(at) == 0 {
			continue
		}
		grown++
		for _, pod := range at {
			perReplica[pod]++
		}
		if len(at) > 1 {
			several++
			t.Logf("build ID %s asked of %v", id, at)
		}
		e.owners[id] = at[0]
	}
	t.Logf("%d build IDs asked in the meantime; per replica: %v; %d asked of more than one replica", grown, perReplica, several)
	// A build ID whose addresses the gateway has all seen is not asked again (its cache
	// answers): the C workload's few addresses may not be, and its owner is then the replica
	// asked the most about it since the start.
	for _, w := range workloads {
		id := e.buildIDs[w.name]
		var at []string
		for pod, n := range after.asked[id] {
			if n > before.asked[id][pod] {
				at = append(at, pod)
			}
		}
		if _, ok := e.owners[id]; !ok {
			var most uint64
			for pod, n := range after.asked[id] {
				if n > most {
					e.owners[id], most = pod, n
				}
			}
		}
		t.Logf("%s (build ID %s): asked of %v in the meantime, %v since the start", w.name, id, at, after.asked[id])
		if len(at) > 1 {
			t.Errorf("%s: build ID %s asked of %d replicas %v, want its owner alone", w.name, id, len(at), at)
		}
	}
	if len(perReplica) < 2 {
		t.Errorf("%d build IDs all asked of %v: the router spread none over the three replicas", grown, perReplica)
	}
	// A replica past its share of calls in flight, or one that timed out, has its build IDs
	// asked of the next owner, resident only: rarely, on a busy machine.
	if 10*several > grown {
		t.Errorf("%d of %d build IDs asked of more than one replica, want one replica each (nine in ten at least)", several, grown)
	}
}

// checkDisruptions deletes a symbolizer pod, rolls the gateway over and restarts the collector
// pod, each after the last recovered; then it stops the collector and counts, per interval the
// collector reported (its debug log: "interval reported", the samples of the request it
// built), the samples that left the gateway for it.
func (e *chartE2E) checkDisruptions(ctx context.Context, t *testing.T) {
	type window struct {
		name     string
		from, to time.Time
	}
	var windows []window
	kubectl := func(args ...string) {
		t.Helper()
		if out, err := e.c.Kubectl(ctx, nil, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	ready := func(app, ns string) {
		t.Helper()
		if err := waitChartReady(ctx, t, e.client, map[string]string{app: ns}, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	const settle = 25 * time.Second // two and a half intervals of the collector

	// The owner of the C workload's build ID goes (any replica when routing found none).
	victim := e.owners[e.buildIDs["cchain"]]
	if victim == "" {
		pods, err := e.client.CoreV1().Pods("profsym").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=symbolizer"})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("symbolizer pods: %v", err)
		}
		victim = pods.Items[0].Name
	}
	from := time.Now()
	kubectl("delete", "pod", "-n", "profsym", victim, "--wait=true", "--timeout=2m")
	ready("symbolizer", "profsym")
	recovered := time.Now()
	cchain := e.podOf(ctx, t, "cchain").Name
	e.waitProfiles(ctx, t, recovered, 3*time.Minute, "cchain symbolized after the symbolizer pod's deletion", func(pds []pprofile.Profiles) (bool, string) {
		return symbolizedChain(workloads[0], cchain, pds)
	})
	t.Logf("symbolizer pod %s deleted: replaced and Ready in %v, cchain symbolized again %v later", victim,
		recovered.Sub(from).Round(time.Second), time.Since(recovered).Round(time.Second))
	sleep(ctx, settle)
	windows = append(windows, window{"symbolizer pod " + victim + " deleted", from, time.Now()})

	from = time.Now()
	kubectl("rollout", "restart", "-n", "profsym", "deployment/gateway")
	kubectl("rollout", "status", "-n", "profsym", "deployment/gateway", "--timeout=3m")
	ready("gateway", "profsym")
	t.Logf("gateway rolled over in %v", time.Since(from).Round(time.Second))
	sleep(ctx, settle)
	windows = append(windows, window{"gateway rolling update", from, time.Now()})

	from = time.Now()
	kubectl("delete", "pod", "-n", "profsym-collector", "-l", "app.kubernetes.io/name=collector", "--wait=true", "--timeout=2m")
	ready("collector", "profsym-collector")
	t.Logf("collector pod replaced and Ready in %v", time.Since(from).Round(time.Second))
	sleep(ctx, settle)
	windows = append(windows, window{"collector pod restarted", from, time.Now()})

	// The collector stops (no node matches its DaemonSet any more): its last interval goes out
	// as it shuts down, and then every interval it reported must have left the gateway.
	kubectl("patch", "daemonset", "collector", "-n", "profsym-collector", "-p", `{"spec":{"template":{"spec":{"nodeSelector":{"profsym.dev/e2e-stopped":"true"}}}}}`)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := e.client.CoreV1().Pods("profsym-collector").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=collector"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector pods still there 2m after its DaemonSet matched no node: %d", len(pods.Items))
		}
		sleep(ctx, time.Second)
	}
	stopped := time.Now()
	var ins []interval
	var got, extra []int64
	var warnings []string
	for {
		e.logs.poll()
		ins, _, warnings = e.logs.snapshot()
		outs, _ := e.sink.intervals()
		got, extra = matchIntervals(ins, outs)
		all := tallyOf(ins, got, time.Time{}, stopped.Add(time.Minute))
		if all.lost == 0 || time.Since(stopped) > time.Minute {
			break
		}
		sleep(ctx, 2*time.Second)
	}
	all := tallyOf(ins, got, time.Time{}, stopped.Add(time.Minute))
	t.Logf("whole run: %s", all)
	for _, w := range windows {
		tl := tallyOf(ins, got, w.from, w.to)
		t.Logf("%s (%v): %s", w.name, w.to.Sub(w.from).Round(time.Second), tl)
		if tl.intervals == 0 {
			t.Errorf("%s: no interval reported by the collector in it", w.name)
		}
	}
	pods := map[string]bool{}
	for i, in := range ins {
		pods[in.pod] = true
		if got[i] != in.samples {
			t.Errorf("interval reported at %s by %s: %d samples in, %d out", in.at.Format(time.RFC3339Nano), in.pod, in.samples, got[i])
		}
	}
	t.Logf("%d collector pods' logs read", len(pods))
	if len(pods) < 2 {
		t.Errorf("intervals of %d collector pods read, want the one restarted and its replacement", len(pods))
	}
	if len(extra) > 0 {
		t.Errorf("%d intervals out of the gateway that no collector log line reported (a duplicate, or a lost log line)", len(extra))
	}
	for _, w := range warnings {
		if strings.Contains(w, "dropped") {
			t.Errorf("collector: %s", w)
		}
	}
	if all.lost > 0 {
		t.Errorf("%d samples lost of %d", all.lost, all.in)
	}
}

// importImages imports every image tarball the builder listed in DIR/images.txt.
func importImages(ctx context.Context, t *testing.T, c *cluster.Cluster, dir string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text()) // PLATFORM NAME FILE
		if len(fields) != 3 {
			t.Fatalf("images.txt: line %q: want PLATFORM NAME FILE", sc.Text())
		}
		if err := c.ImportImage(ctx, filepath.Join(dir, fields[2])); err != nil {
			t.Fatal(err)
		}
		names = append(names, fields[1])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// waitChartReady waits until, for each app.kubernetes.io/name of want, a pod of it exists in its
// namespace and every such pod is Ready with no container restarted; it logs each one's state
// when it changes.
func waitChartReady(ctx context.Context, t *testing.T, client *kubernetes.Clientset, want map[string]string, timeout time.Duration) error {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := map[string]string{}
	for {
		notReady := []string{}
		for app, ns := range want {
			pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
			if err != nil {
				return err
			}
			if len(pods.Items) == 0 {
				notReady = append(notReady, app+": no pod")
				continue
			}
			for _, p := range pods.Items {
				state := podState(&p)
				if last[p.Name] != state {
					t.Logf("%s/%s: %s", ns, p.Name, state)
					last[p.Name] = state
				}
				if state != "Ready" {
					notReady = append(notReady, p.Name+": "+state)
				}
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not Ready after %v: %s", timeout, strings.Join(notReady, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// podState is "Ready", or what keeps the pod from it: its phase, waiting reasons, restarts.
func podState(p *corev1.Pod) string {
	var parts []string
	ready := false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount > 0 {
			parts = append(parts, fmt.Sprintf("%s restarted %d times", cs.Name, cs.RestartCount))
			if t := cs.LastTerminationState.Terminated; t != nil {
				parts = append(parts, fmt.Sprintf("last exit %d (%s)", t.ExitCode, t.Reason))
			}
		}
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, cs.Name+" waiting: "+w.Reason+" "+w.Message)
		}
	}
	if ready && len(parts) == 0 {
		return "Ready"
	}
	return string(p.Status.Phase) + " " + strings.Join(parts, ", ")
}

// TestChartReadmeDeploy holds the project README's deploy section to the commands
// TestChartOnCluster runs: the image build of chartImages, the import, then deploySteps, in
// order (comment lines aside).
func TestChartReadmeDeploy(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Deploy\n")
	if !ok {
		t.Fatal("README.md: no section \"Deploy\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, fenced, ok := strings.Cut(section, "\n```sh\n")
	if !ok {
		t.Fatal("README.md, \"Deploy\": no sh block")
	}
	fenced, _, _ = strings.Cut(fenced, "\n```")
	var block []string
	for _, line := range strings.Split(fenced, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			block = append(block, line)
		}
	}
	want := append([]string{
		"go run ./deploy/imagebuild -out bin/images -arch amd64 -only " + chartImages,
		`while read -r platform name file; do ctr --address "$CLUSTER_DIR/containerd/containerd.sock" -n k8s.io images import "bin/images/$file"; done < bin/images/images.txt`,
		`kubectl() { ip netns exec "$CLUSTER_NAME" kubectl --kubeconfig "$CLUSTER_DIR/kubeconfig" "$@"; }`,
		`helm() { ip netns exec "$CLUSTER_NAME" helm --kubeconfig "$CLUSTER_DIR/kubeconfig" "$@"; }`,
	}, deploySteps...)
	if !slices.Equal(block, want) {
		t.Errorf("README.md, \"Deploy\": the deploy commands are\n%s\nwant the ones the test runs:\n%s",
			strings.Join(block, "\n"), strings.Join(want, "\n"))
	}
}

// upWithImages brings a cluster up (down when the test ends) while the offline builder builds
// images (a -only list), and imports them: the cluster, its folder, the repository root and
// when it started.
func upWithImages(t *testing.T, images string) (*cluster.Cluster, string, string, time.Time) {
	t.Helper()
	ctx := t.Context()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	imgDir := t.TempDir()
	built := make(chan error, 1)
	start := time.Now()
	go func() {
		cmd := exec.CommandContext(ctx, "go", "run", "./deploy/imagebuild", "-repo", root, "-out", imgDir, "-arch", "amd64", "-only", images)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go run ./deploy/imagebuild: %w\n%s", err, out)
		}
		built <- err
	}()
	clusterDir := t.TempDir()
	c, err := cluster.Up(ctx, cluster.Config{Dir: clusterDir, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		if berr := <-built; berr != nil {
			t.Log(berr)
		}
		t.Fatalf("cluster up: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Down(context.Background()); err != nil {
			t.Errorf("cluster down: %v", err)
		}
	})
	t.Logf("cluster %s up in %v", c.Name, time.Since(start).Round(time.Millisecond))
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	t.Logf("images built in %v", time.Since(start).Round(time.Millisecond))
	t.Logf("imported %s", strings.Join(importImages(ctx, t, c, imgDir), ", "))
	return c, clusterDir, root, start
}
