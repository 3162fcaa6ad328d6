package k8s_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// nodeArchitectures are the architectures the images are built for (make images) and the
// collector's unwinder knows.
var nodeArchitectures = []string{"amd64", "arm64"}

// archLabel is the node label the kubelet sets to its GOARCH.
const archLabel = "kubernetes.io/arch"

// otherArchitectures are nodes no workload may be scheduled on: there is no image for them.
var otherArchitectures = []string{"s390x", "ppc64le", "riscv64", "arm", "386"}

// node is a node of a cluster with the given architecture and nothing else that could
// keep a pod off it (no taints: the scheduler's affinity filter alone decides here).
func node(arch string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + arch, Labels: map[string]string{
		archLabel: arch, "kubernetes.io/os": "linux", "kubernetes.io/hostname": "node-" + arch,
	}}}
}

// checkArchitectures holds every workload of a rendering to the scheduler's own reading of its
// pods' node affinity and node selector (the filter kube-scheduler runs): a node of each
// architecture in want is admitted, a node of any other is not. Other architectures must fail
// at scheduling, not crash-loop in an image that has no binary for them.
func checkArchitectures(t *testing.T, r rendered, want []string) {
	t.Helper()
	ws := workloads(r)
	if len(ws) == 0 {
		t.Fatal("no workloads rendered")
	}
	for _, w := range ws {
		pod := &corev1.Pod{ObjectMeta: w.pod.ObjectMeta, Spec: w.pod.Spec}
		req := nodeaffinity.GetRequiredNodeAffinity(pod)
		for _, arch := range append(slices.Clone(nodeArchitectures), otherArchitectures...) {
			ok, err := req.Match(node(arch))
			if err != nil {
				t.Errorf("%s %s: node affinity does not parse: %v", w.kind, w.name, err)
				break
			}
			if wantOK := slices.Contains(want, arch); ok != wantOK {
				t.Errorf("%s %s: scheduled on %s nodes: %v, want %v (required node affinity %+v, node selector %v)",
					w.kind, w.name, arch, ok, wantOK, affinityOf(w.pod.Spec), w.pod.Spec.NodeSelector)
			}
		}
	}
}

func affinityOf(spec corev1.PodSpec) any {
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil {
		return nil
	}
	return spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
}

// TestArchitectures: the collector DaemonSet and every Deployment of every overlay run on amd64
// and arm64 nodes and on no other.
func TestArchitectures(t *testing.T) {
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			checkArchitectures(t, build(t, overlay), nodeArchitectures)
		})
	}
}

// TestHelmChartArchitectures: the chart schedules every workload on the architectures its
// values list (both by default, each alone when asked) and refuses a list without an image.
func TestHelmChartArchitectures(t *testing.T) {
	helm := helmBinary(t)
	for _, v := range chartValues {
		t.Run(chartName(v), func(t *testing.T) {
			checkArchitectures(t, helmTemplate(t, helm, v), nodeArchitectures)
		})
	}
	for _, arch := range nodeArchitectures {
		t.Run("only "+arch, func(t *testing.T) {
			checkArchitectures(t, helmTemplate(t, helm, "ci/in-cluster-values.yaml", "--set", "architectures={"+arch+"}"), []string{arch})
		})
	}
	for name, set := range map[string]string{
		"no image for it": "architectures={amd64,s390x}",
		"empty list":      "architectures=null",
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			out, err := exec.CommandContext(t.Context(), helm, "template", "profsym", chart, "--set", set).CombinedOutput()
			if err == nil {
				t.Fatalf("helm template --set %s succeeded", set)
			}
			if !strings.Contains(string(out), "architectures") {
				t.Fatalf("helm template --set %s: the error does not name the value:\n%s", set, out)
			}
		})
	}
}
