package k8s_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/profsym/profsym/pkg/testsupport"
)

// One kube-apiserver (and etcd) per test binary: it takes seconds to start, and every test
// here only dry-runs against it, except for Namespaces and PriorityClasses, which are the same
// in every rendering.
var (
	kubeOnce sync.Once
	kube     *testsupport.KubeAPIServer
	kubeErr  error
)

type apiClient struct {
	dyn    dynamic.Interface
	typed  kubernetes.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// apiServer returns a client of the shared kube-apiserver, starting it on first use. Without a
// kube-apiserver or etcd the test is skipped, or fails under CI.
func apiServer(t *testing.T) *apiClient {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	kubeOnce.Do(func() {
		start := time.Now()
		kube, kubeErr = testsupport.StartKubeAPIServer(os.TempDir())
		if kubeErr == nil {
			fmt.Fprintf(os.Stderr, "kube-apiserver %s ready at %s in %v\n", testsupport.KubeVersion, kube.URL, time.Since(start).Round(time.Millisecond))
		}
	})
	if errors.Is(kubeErr, testsupport.ErrToolMissing) {
		requireOrSkip(t, kubeErr.Error())
	}
	if kubeErr != nil {
		t.Fatalf("start kube-apiserver: %v", kubeErr)
	}
	cfg := &rest.Config{
		Host: kube.URL, BearerToken: kube.Token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             200, Burst: 400,
		// Warnings (PodSecurity "warn" among them) go to the test log.
		WarningHandler: rest.NewWarningWriter(os.Stderr, rest.WarningWriterOptions{Deduplicate: true}),
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	typed, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &apiClient{dyn: dyn, typed: typed, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// setup is applied for real: a dry run of a namespaced object needs its namespace, and
// PodSecurity admission reads that namespace's labels; Priority admission needs the class.
var setup = map[string]bool{"Namespace": true, "PriorityClass": true}

// serverDryRun applies every object the way `kubectl apply --server-side --dry-run=server`
// does, then dry-run creates a Pod from every workload's template: admission of the
// workload does not enforce PodSecurity, admission of its pods does.
func serverDryRun(t *testing.T, c *apiClient, objs []runtime.Object) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var us []*unstructured.Unstructured
	for _, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" {
			t.Fatalf("%T has no kind", o)
		}
		us = append(us, u)
	}
	for _, pass := range []bool{true, false} {
		for _, u := range us {
			if setup[u.GetKind()] != pass {
				continue
			}
			if err := c.apply(ctx, u, !pass); err != nil {
				t.Errorf("%s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
			}
		}
	}
	for _, w := range workloads(rendered{objs: objs}) {
		if err := c.dryRunPod(ctx, w); err != nil {
			t.Errorf("a pod of %s %s/%s is refused: %v", w.kind, w.namespace, w.name, err)
		}
	}
}

func (c *apiClient) apply(ctx context.Context, u *unstructured.Unstructured, dryRun bool) error {
	gvk := u.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("map %s: %w", gvk, err)
	}
	u = u.DeepCopy()
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	opts := metav1.ApplyOptions{FieldManager: "profsym-deploy-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = c.dyn.Resource(m.Resource)
	if m.Scope.Name() == "namespace" {
		if u.GetNamespace() == "" {
			return errors.New("namespaced object without a namespace: it would land in whatever namespace kubectl points at")
		}
		ri = c.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	_, err = ri.Apply(ctx, u.GetName(), u, opts)
	return err
}

func (c *apiClient) dryRunPod(ctx context.Context, w workload) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: w.name + "-", Namespace: w.namespace, Labels: w.pod.Labels, Annotations: w.pod.Annotations},
		Spec:       *w.pod.Spec.DeepCopy(),
	}
	_, err := c.typed.CoreV1().Pods(w.namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

func TestServerSideDryRun(t *testing.T) {
	c := apiServer(t)
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			serverDryRun(t, c, build(t, overlay).objs)
		})
	}
}

// TestRestrictedNamespaceRefusesViolations proves the dry run can fail: the namespace of the
// services enforces "restricted", so a gateway pod given the collector's host PID namespace, or
// the collector itself, is refused there, while the collector's namespace admits it.
func TestRestrictedNamespaceRefusesViolations(t *testing.T) {
	c := apiServer(t)
	r := build(t, "dev")
	serverDryRun(t, c, setupOnly(r.objs))
	ctx := t.Context()
	var gateway, collector workload
	for _, w := range workloads(r) {
		switch w.name {
		case "gateway":
			gateway = w
		case "collector":
			collector = w
		}
	}
	hostPID := gateway
	hostPID.pod = *gateway.pod.DeepCopy()
	hostPID.pod.Spec.HostPID = true
	moved := collector
	moved.namespace = gateway.namespace
	for name, w := range map[string]workload{"gateway with hostPID": hostPID, "collector in the services' namespace": moved} {
		err := c.dryRunPod(ctx, w)
		if err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
			t.Errorf("%s: admitted in %s (err %v); want refused by PodSecurity restricted", name, w.namespace, err)
		}
	}
	if err := c.dryRunPod(ctx, collector); err != nil {
		t.Errorf("collector refused in its own namespace %s: %v", collector.namespace, err)
	}
}

func setupOnly(objs []runtime.Object) []runtime.Object {
	var out []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *corev1.Namespace, *schedulingv1.PriorityClass:
			out = append(out, o)
		}
	}
	return out
}
