//go:build linux

package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/profsym/profsym/e2e/cluster"
)

// chartValues make deploy/helm/profsym run on the single amd64 node with the images imported
// from the offline builder: one replica of each service, the chart's in-cluster Redis, and
// never a pull.
const chartValues = `architectures: [amd64]
images:
  pullPolicy: Never
gateway:
  minReplicas: 1
  maxReplicas: 1
symbolizer:
  minReplicas: 1
  maxReplicas: 1
  redis:
    mode: in-cluster
`

// chartImages are the offline builder's images the chart runs with chartValues.
// The C workload (deploy/imagebuild/workloads/cchain) is what the collector profiles.
var chartImages = "symbolizer,gateway,collector,redis,workload-c"

// TestChartOnCluster installs the Helm chart on the cluster with the images the offline builder
// makes from the Dockerfiles, and checks every pod (symbolizer, gateway, the collector
// DaemonSet, Redis) becomes Ready through its own probes, run by the real kubelet.
func TestChartOnCluster(t *testing.T) {
	needCluster(t)
	helm := filepath.Join(cluster.DefaultToolsDir(), "helm")
	if _, err := os.Stat(helm); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("helm (bash .ci/install-deps): %v", err)
		}
		t.Skipf("helm (bash .ci/install-deps): %v", err)
	}
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}

	// The images build while the cluster comes up.
	imgDir := t.TempDir()
	built := make(chan error, 1)
	start := time.Now()
	go func() {
		cmd := exec.CommandContext(ctx, "go", "run", "./deploy/imagebuild", "-repo", root, "-out", imgDir, "-arch", "amd64", "-only", chartImages)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go run ./deploy/imagebuild: %w\n%s", err, out)
		}
		built <- err
	}()
	clusterDir := t.TempDir()
	c, err := cluster.Up(ctx, cluster.Config{Dir: clusterDir, Logger: log})
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
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	t.Logf("images built in %v", time.Since(start).Round(time.Millisecond))
	imported := importImages(ctx, t, c, imgDir)
	t.Logf("imported %s", strings.Join(imported, ", "))

	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(chartValues), 0o644); err != nil {
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

	// The Secrets the chart names and never creates (values.yaml): the upload and read tokens.
	secrets := []string{
		"create secret generic profsym-upload-tokens -n profsym --from-literal=tokens=upload-token-e2e",
		"create secret generic profsym-read-token -n profsym --from-literal=token=read-token-e2e",
		"create secret generic profsym-upload-token -n profsym-collector --from-literal=token=upload-token-e2e",
	}
	for _, s := range secrets {
		if out, err := c.Kubectl(ctx, nil, strings.Fields(s)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}

	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // app.kubernetes.io/name -> namespace
		"symbolizer": "profsym", "gateway": "profsym", "profsym-redis": "profsym", "collector": "profsym-collector",
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

	// Nothing could have been pulled: every container of the chart says Never.
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
	// The collector is Ready once its eBPF programs are attached (/readyz): with the chart's
	// capabilities, not privileged, under the runtime's default seccomp profile.
	logs, err := c.Kubectl(ctx, nil, "logs", "-n", "profsym-collector", "-l", "app.kubernetes.io/name=collector", "--tail=-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "eBPF sampler attached") {
		t.Errorf("the collector is Ready but its log does not say the eBPF sampler attached:\n%s", logs)
	}

	if !t.Run("workload profiled", func(t *testing.T) {
		checkWorkloadProfiled(ctx, t, c, client, clusterDir)
	}) {
		return
	}
	t.Run("gateway pod replaced", func(t *testing.T) {
		checkGatewayReplaced(ctx, t, c, client, clusterDir)
	})
}

// gatewayPprofDir is where the node keeps the pprof files of the one gateway pod (its /tmp
// emptyDir) and that pod's name.
func gatewayPprofDir(ctx context.Context, t *testing.T, client *kubernetes.Clientset, clusterDir string) (string, string) {
	t.Helper()
	gws, err := client.CoreV1().Pods("profsym").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gateway"})
	if err != nil || len(gws.Items) != 1 {
		t.Fatalf("gateway pods: %v (%d)", err, len(gws.Items))
	}
	g := gws.Items[0]
	return filepath.Join(clusterDir, "kubelet", "root", "pods", string(g.UID), "volumes", "kubernetes.io~empty-dir", "tmp", "pprof"), g.Name
}

// checkGatewayReplaced deletes the gateway pod: the Deployment's new pod must become Ready and
// the collector, reconnecting, must deliver it profiles of the workload, symbolized from the
// store and with the pod's attributes.
func checkGatewayReplaced(ctx context.Context, t *testing.T, c *cluster.Cluster, client *kubernetes.Clientset, clusterDir string) {
	_, old := gatewayPprofDir(ctx, t, client, clusterDir)
	start := time.Now()
	if out, err := c.Kubectl(ctx, nil, "delete", "pod", "-n", "profsym", old, "--wait=true", "--timeout=2m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := waitChartReady(ctx, t, client, map[string]string{"gateway": "profsym"}, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	dir, pod := gatewayPprofDir(ctx, t, client, clusterDir)
	t.Logf("gateway %s replaced by %s, Ready %v after the deletion", old, pod, time.Since(start).Round(time.Millisecond))
	deadline := time.Now().Add(3 * time.Minute)
	seen := map[string]bool{}
	for time.Now().Before(deadline) {
		files, _ := filepath.Glob(filepath.Join(dir, "profile-*.pb.gz"))
		for _, f := range files {
			if seen[f] {
				continue
			}
			seen[f] = true
			p, err := readPprof(f)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(p.Comments, "k8s.pod.name=cchain") {
				continue
			}
			fs := functions(p)
			if slices.ContainsFunc(cchainFunctions, func(fn string) bool { return !slices.Contains(fs, fn) }) {
				continue // a sample of the process's start or of the kernel alone
			}
			t.Logf("symbolized profile of cchain at the new gateway %v after the deletion", time.Since(start).Round(time.Second))
			return
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("no symbolized profile of cchain at the new gateway %s in 3m (%d files)", pod, len(seen))
}

// workloadPod is the C workload the collector profiles, in a namespace of its own.
const workloadPod = `apiVersion: v1
kind: Namespace
metadata: {name: workload}
---
apiVersion: v1
kind: Pod
metadata: {name: cchain, namespace: workload}
spec:
  containers:
    - name: cchain
      image: localhost/profsym/workload-c:e2e
      imagePullPolicy: Never
      resources: {limits: {cpu: 200m}}
`

// checkWorkloadProfiled runs the C workload and waits for a profile of it in the gateway's
// pprof files (the gateway pod's /tmp emptyDir, read on the node): its resource attributes
// (the pprof file's comments) must name the pod, as the gateway's k8s_attributes adds them.
func checkWorkloadProfiled(ctx context.Context, t *testing.T, c *cluster.Cluster, client *kubernetes.Clientset, clusterDir string) {
	if out, err := c.Kubectl(ctx, []byte(workloadPod), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := c.Kubectl(ctx, nil, "wait", "-n", "workload", "--for=condition=Ready", "pod/cchain", "--timeout=2m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	dir, _ := gatewayPprofDir(ctx, t, client, clusterDir)
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	seen := 0
	var last []string
	for time.Now().Before(deadline) {
		files, _ := filepath.Glob(filepath.Join(dir, "profile-*.pb.gz"))
		for _, f := range files[min(seen, len(files)):] {
			p, err := readPprof(f)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(p.Comments, "k8s.pod.name=cchain") {
				continue
			}
			t.Logf("%s after %v: %d samples, resource %q", filepath.Base(f), time.Since(start).Round(time.Second), len(p.Sample), p.Comments)
			if !slices.Contains(p.Comments, "k8s.namespace.name=workload") || !slices.Contains(p.Comments, "k8s.container.name=cchain") {
				t.Errorf("resource attributes %q: want k8s.namespace.name=workload and k8s.container.name=cchain", p.Comments)
			}
			// Kernel frames come symbolized from the node (kallsyms); the workload's own
			// functions cannot be before its binary is in the store.
			fs := functions(p)
			if slices.ContainsFunc(cchainFunctions, func(fn string) bool { return slices.Contains(fs, fn) }) {
				t.Errorf("functions %q before the workload's binary is in the store: want none of %q (nothing uploads it)", fs, cchainFunctions)
			}
			pid := ""
			for _, c := range p.Comments {
				if v, ok := strings.CutPrefix(c, "process.pid="); ok {
					pid = v
				}
			}
			if pid == "" {
				t.Fatalf("resource %q: no process.pid", p.Comments)
			}
			checkSymbolized(ctx, t, c, client, dir, "/proc/"+pid+"/root/app/cchain")
			return
		}
		seen = len(files)
		if len(files) > 0 {
			p, err := readPprof(files[len(files)-1])
			if err == nil {
				last = p.Comments
			}
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("no profile of pod cchain in %s after 3m (%d files; the last one's resource: %q)", dir, seen, last)
}

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

// functions are the distinct function names of p's samples.
func functions(p *profile.Profile) []string {
	var names []string
	for _, s := range p.Sample {
		for _, l := range s.Location {
			for _, ln := range l.Line {
				if ln.Function != nil && !slices.Contains(names, ln.Function.Name) {
					names = append(names, ln.Function.Name)
				}
			}
		}
	}
	return names
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

// cchainFunctions are the C workload's functions (deploy/imagebuild/workloads/cchain).
var cchainFunctions = []string{"main", "run", "outer", "middle", "leaf", "mix"}

// checkSymbolized uploads the workload's executable (read on the node through its process) to
// the symbolizer, as a CI pipeline would with "symbolizer upload", and waits for a profile of
// the workload whose frames carry its functions, main -> run -> outer -> middle -> leaf, with
// mix inlined into leaf.
func checkSymbolized(ctx context.Context, t *testing.T, c *cluster.Cluster, client *kubernetes.Clientset, dir, exe string) {
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
	bin := filepath.Join(t.TempDir(), "cchain")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o644); err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services("profsym").Get(ctx, "symbolizer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	upload := exec.CommandContext(ctx, "nsenter", "--net="+c.NetnsPath, "--", cli, "upload",
		"--server", "http://"+svc.Spec.ClusterIP+":7070", "--token", "upload-token-e2e", "--progress", "plain", bin)
	out, err := upload.CombinedOutput()
	if err != nil {
		t.Fatalf("symbolizer upload: %v\n%s", err, out)
	}
	t.Logf("symbolizer upload: %s", strings.TrimSpace(string(out)))
	uploaded := time.Now()

	want := cchainFunctions
	deadline := uploaded.Add(3 * time.Minute)
	seen := map[string]bool{}
	var last []string
	for time.Now().Before(deadline) {
		files, _ := filepath.Glob(filepath.Join(dir, "profile-*.pb.gz"))
		for _, f := range files {
			if seen[f] {
				continue
			}
			seen[f] = true
			p, err := readPprof(f)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(p.Comments, "k8s.pod.name=cchain") {
				continue
			}
			last = functions(p)
			missing := slices.DeleteFunc(slices.Clone(want), func(fn string) bool { return slices.Contains(last, fn) })
			if len(missing) == 0 {
				t.Logf("symbolized %v after the upload: %s", time.Since(uploaded).Round(time.Second), strings.Join(last, " "))
				return
			}
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("no profile of cchain with the functions %q in 3m after the upload; the last one had %q", want, last)
}
