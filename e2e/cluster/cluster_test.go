//go:build linux

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/profsym/profsym/e2e/cluster"
)

// needCluster skips the test when the cluster cannot run here (not root, a tool missing),
// and fails it instead when CI is set: a pipeline installs everything (.ci/install-deps).
func needCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("brings a cluster up: not in -short mode")
	}
	var reason error
	if os.Geteuid() != 0 {
		reason = errors.New("needs root (network namespaces, containerd, the kubelet)")
	} else if _, err := cluster.FindTools(""); err != nil {
		reason = err
	}
	if reason == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("the cluster test cannot run: %v", reason)
	}
	t.Skipf("the cluster test cannot run: %v", reason)
}

// TestCluster brings the cluster up, runs a web server pod behind a Service and a client
// pod, checks readiness probes, cluster DNS and Service routing, and that taking the cluster
// down leaves nothing behind.
func TestCluster(t *testing.T) {
	needCluster(t)
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))

	start := time.Now()
	c, err := cluster.Up(ctx, cluster.Config{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	down := false
	t.Cleanup(func() {
		if !down {
			if err := c.Down(context.Background()); err != nil {
				t.Errorf("cluster down: %v", err)
			}
		}
	})

	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	checkNode(ctx, t, client)
	checkNoClusterAddressOnHost(t)
	checkPodsCPUWeight(t, c.CgroupRoot)

	// Two server pods behind one Service: "web" is ready, "web-unready" runs the same server
	// but its readiness probe asks for a path it does not serve, so the kubelet must keep it
	// out of the Service.
	ns := "default"
	for _, p := range []struct{ name, probePath string }{{"web", "/index.html"}, {"web-unready", "/missing.html"}} {
		pod := webPod(p.name, p.probePath)
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.name, err)
		}
	}
	svc, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}

	web := waitPod(ctx, t, client, ns, "web", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		if !podReady(p) {
			return errors.New("not Ready")
		}
		return nil
	})
	t.Logf("pod web Running and Ready at %s", web.Status.PodIP)
	waitUnhealthyEvent(ctx, t, client, ns, "web-unready")
	unready, err := client.CoreV1().Pods(ns).Get(ctx, "web-unready", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if unready.Status.Phase != corev1.PodRunning || podReady(unready) {
		t.Fatalf("pod web-unready: phase %s, ready %v; want Running and not Ready (its readiness probe fails)", unready.Status.Phase, podReady(unready))
	}

	// Cluster DNS, asked from inside the namespace at the DNS Service's address.
	resolver := c.Dialer().Resolver(cluster.DNSServiceIP + ":53")
	addrs, err := resolver.LookupHost(ctx, "web.default.svc.cluster.local")
	if err != nil {
		t.Fatalf("resolve web.default.svc.cluster.local through %s: %v", cluster.DNSServiceIP, err)
	}
	if len(addrs) != 1 || addrs[0] != svc.Spec.ClusterIP {
		t.Fatalf("web.default.svc.cluster.local = %v, want the Service's ClusterIP %s", addrs, svc.Spec.ClusterIP)
	}

	// The ClusterIP routes (kube-proxy's iptables rules) to the ready pod only, once
	// kube-proxy has seen the Service's endpoints (until then it rejects connections).
	hc := c.HTTPClient()
	waitRouted(ctx, t, hc, "http://"+svc.Spec.ClusterIP+"/index.html")
	for i := range 5 {
		body := get(ctx, t, hc, "http://"+svc.Spec.ClusterIP+"/index.html")
		if body != "hello from web\n" {
			t.Fatalf("GET %d through ClusterIP %s: %q, want the ready pod's page", i, svc.Spec.ClusterIP, body)
		}
	}

	// From a pod: its resolv.conf (written by the kubelet from clusterDNS) points busybox's
	// nslookup at the cluster DNS, and the ClusterIP routes from the pod network too. (Debian's
	// static busybox's wget crashes in glibc's getaddrinfo, even on an address: nc sends the
	// request to the address nslookup found.)
	clientPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            "client",
				Image:           cluster.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", "nslookup web.default.svc.cluster.local && ip=$(nslookup web.default.svc.cluster.local | sed -n 's/^Address: *//p' | tail -n 1) && printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 $ip 80"},
			}},
		},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, clientPod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod client: %v", err)
	}
	waitPod(ctx, t, client, ns, "client", func(p *corev1.Pod) error {
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			logs, _ := client.CoreV1().Pods(ns).GetLogs("client", &corev1.PodLogOptions{}).DoRaw(ctx)
			t.Fatalf("pod client failed: %s", logs)
		}
		return fmt.Errorf("phase %s", p.Status.Phase)
	})
	logs, err := client.CoreV1().Pods(ns).GetLogs("client", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of pod client (through the kubelet): %v", err)
	}
	if !strings.Contains(string(logs), "hello from web") || !strings.Contains(string(logs), svc.Spec.ClusterIP) {
		t.Fatalf("pod client's output lacks the page or the ClusterIP %s:\n%s", svc.Spec.ClusterIP, logs)
	}

	// kubectl, inside the namespace, sees the same.
	out, err := c.Kubectl(ctx, nil, "get", "pod", "web", "-o", "jsonpath={.status.podIP}")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != web.Status.PodIP {
		t.Fatalf("kubectl get pod web: podIP %q, want %q", out, web.Status.PodIP)
	}

	start = time.Now()
	down = true
	if err := c.Down(context.Background()); err != nil {
		t.Fatalf("cluster down: %v", err)
	}
	t.Logf("cluster down in %v", time.Since(start).Round(time.Millisecond))
	if left := c.Leftovers(); len(left) > 0 {
		t.Fatalf("left after down: %v", left)
	}
	if _, err := os.Stat(c.NetnsPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("network namespace %s still there (%v)", c.NetnsPath, err)
	}
}

func checkNode(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	node, err := client.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var internal string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	if internal != cluster.NodeIP {
		t.Fatalf("node InternalIP %q, want %s", internal, cluster.NodeIP)
	}
	t.Logf("node %s: kubelet %s, runtime %s, kernel %s", node.Name, node.Status.NodeInfo.KubeletVersion,
		node.Status.NodeInfo.ContainerRuntimeVersion, node.Status.NodeInfo.KernelVersion)
	if node.Status.NodeInfo.KubeletVersion != cluster.KubeVersion {
		t.Fatalf("kubelet version %s, want %s", node.Status.NodeInfo.KubeletVersion, cluster.KubeVersion)
	}
}

// checkNoClusterAddressOnHost fails when a node, pod or Service address shows on an interface
// of the machine's own network namespace (the test's goroutines run there).
func checkNoClusterAddressOnHost(t *testing.T) {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, cidr := range []string{cluster.NodeIP + "/24", cluster.ServiceCIDR, cluster.PodCIDR} {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if ip, _, err := net.ParseCIDR(a.String()); err == nil && n.Contains(ip) {
				t.Fatalf("cluster address %s on the machine's own interfaces", a)
			}
		}
	}
}

func webPod(name, probePath string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:            "httpd",
				Image:           cluster.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c",
					"mkdir -p /tmp/www && echo \"hello from $(cat /etc/hostname)\" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: probePath, Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPod polls the pod until check accepts it (for up to 3 minutes: the first pods of a
// fresh node on a loaded machine).
func waitPod(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string, check func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if last = check(p); last == nil {
				return p
			}
		} else {
			last = err
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s: %v", ns, name, last)
	return nil
}

// waitUnhealthyEvent waits for the kubelet's event that the pod's readiness probe failed.
func waitUnhealthyEvent(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, pod string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err == nil {
			for _, e := range events.Items {
				// 404: the server runs and answers, and the probe's path is what fails.
				if e.Reason == "Unhealthy" && strings.Contains(e.Message, "Readiness probe failed") && strings.Contains(e.Message, "404") {
					t.Logf("pod %s: %s", pod, e.Message)
					return
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("pod %s: the kubelet reported no readiness probe failing with 404", pod)
}

// waitRouted polls url until it answers, for up to a minute.
func waitRouted(ctx context.Context, t *testing.T, hc *http.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last error
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			return
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s never answered: %v", url, last)
}

func get(ctx context.Context, t *testing.T, hc *http.Client, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(body)
}

// testWriter sends the harness's log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// checkPodsCPUWeight: the cgroup the pods run under weighs as eight busy sessions of the
// machine (the cluster's podsCPUShares), not the default of one.
func checkPodsCPUWeight(t *testing.T, root string) {
	t.Helper()
	found := false
	for _, w := range []struct{ hierarchy, file, want string }{
		{"/sys/fs/cgroup/cpu", "cpu.shares", "8192"}, // v1
		{"/sys/fs/cgroup", "cpu.weight", "800"},      // v2
	} {
		f := filepath.Join(w.hierarchy, root, w.file)
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		found = true
		if got := strings.TrimSpace(string(b)); got != w.want {
			t.Errorf("%s: %s, want %s", f, got, w.want)
		}
	}
	if !found {
		t.Errorf("the pods' cgroup %s has no cpu.shares (v1) nor cpu.weight (v2)", root)
	}
}
