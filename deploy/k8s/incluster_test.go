package k8s_test

import (
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// A pod that mounts its service account token finds the API as client-go's in-cluster
// configuration does: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT in its environment,
// the token, the CA and the namespace in serviceAccountDir, a fixed path. The test stands in for
// the kubelet: it runs the container in a mount namespace of its own where that directory holds
// a real token of the pod's service account, issued by the test's kube-apiserver after the
// rendering's RBAC was applied to it. The rendered configuration is not changed.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// inClusterEnv names the directory of the token files for the re-executed test binary; set, the
// binary mounts them at serviceAccountDir in a new mount namespace and executes the container's
// binary (os.Args[1:]) instead of running tests.
const inClusterEnv = "PROFSYM_TEST_SERVICE_ACCOUNT_DIR"

// execInCluster is the re-executed test binary's work: it runs in a mount namespace of its own
// (the parent asked for CLONE_NEWNS; Go made every mount private to it first), puts a tmpfs on
// the service account directory's first missing parent (/run here, which holds nothing the
// container needs), copies the files there and executes the container's binary.
func execInCluster(src string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "in-cluster stand-in:", err)
		os.Exit(111)
	}
	if len(os.Args) < 2 {
		fail(errors.New("no binary to run"))
	}
	runDir, err := filepath.EvalSymlinks("/var/run")
	if err != nil {
		fail(err)
	}
	if err := syscall.Mount("tmpfs", runDir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=1m,mode=0755"); err != nil {
		fail(fmt.Errorf("mount tmpfs on %s: %w", runDir, err))
	}
	if err := os.MkdirAll(serviceAccountDir, 0o755); err != nil {
		fail(err)
	}
	for _, f := range []string{"token", "ca.crt", "namespace"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			fail(err)
		}
		if err := os.WriteFile(filepath.Join(serviceAccountDir, f), b, 0o644); err != nil {
			fail(err)
		}
	}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, inClusterEnv+"=") {
			env = append(env, e)
		}
	}
	fail(syscall.Exec(os.Args[1], os.Args[1:], env))
}

// inCluster prepares what a pod of w that mounts its service account token would get: the
// rendering's ServiceAccount, ClusterRoles and bindings applied for real to the test's
// kube-apiserver, a token of the service account, the API server's CA. It returns the
// environment to add and a directory for execInCluster.
func inCluster(t *testing.T, w workload, objs []runtime.Object) (env []string, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		requireOrSkip(t, "root (a mount namespace puts the service account token where client-go reads it)")
	}
	c := apiServer(t)
	ctx := t.Context()
	sa := w.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": w.namespace}}}
	for _, o := range objs {
		if n, ok := o.(*corev1.Namespace); ok && n.Name == w.namespace {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
			if err != nil {
				t.Fatal(err)
			}
			ns = &unstructured.Unstructured{Object: m}
		}
	}
	apply := []*unstructured.Unstructured{ns}
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.ServiceAccount, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding, *rbacv1.Role, *rbacv1.RoleBinding:
			if ns := x.(metav1.Object).GetNamespace(); ns != "" && ns != w.namespace {
				continue // another namespace's: this test creates only the pod's
			}
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(x)
			if err != nil {
				t.Fatal(err)
			}
			apply = append(apply, &unstructured.Unstructured{Object: m})
		}
	}
	for _, u := range apply {
		if err := c.apply(ctx, u, false); err != nil {
			t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	tr, err := c.typed.CoreV1().ServiceAccounts(w.namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of service account %s/%s: %v", w.namespace, sa, err)
	}
	u, err := url.Parse(kube.URL)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	files := map[string]string{"token": tr.Status.Token, "ca.crt": apiServerCA(t, u.Host), "namespace": w.namespace}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}, dir
}

// apiServerCA returns the CA of the kube-apiserver's self-signed serving certificate: the last
// certificate of the chain it presents.
func apiServerCA(t *testing.T, addr string) string {
	t.Helper()
	// Not verified: the chain is read in order to trust it.
	d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}
	conn, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("kube-apiserver certificate: %v", err)
	}
	defer conn.Close()
	chain := conn.(*tls.Conn).ConnectionState().PeerCertificates
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: chain[len(chain)-1].Raw}))
}

func ptr[T any](v T) *T { return &v }

// checkAccess asks the kube-apiserver, as the pod's service account, whether the rendered RBAC
// lets it read what k8s_attributes reads, cluster-wide, and nothing it should not.
func checkAccess(t *testing.T, w workload) {
	t.Helper()
	c := apiServer(t)
	user := "system:serviceaccount:" + w.namespace + ":" + w.pod.Spec.ServiceAccountName
	for _, tc := range []struct {
		group, resource, verb, ns string
		want                      bool
	}{
		{"", "pods", "list", "", true},
		{"", "pods", "watch", "", true},
		{"", "pods", "get", "kube-system", true},
		{"", "secrets", "get", w.namespace, false},
		{"", "pods", "delete", "default", false},
		{"", "configmaps", "list", "", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + w.namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: tc.group, Resource: tc.resource, Verb: tc.verb, Namespace: tc.ns},
		}}
		got, err := c.typed.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		if got.Status.Allowed != tc.want {
			t.Errorf("%s: %s %s in %q allowed %v, want %v (%s)", user, tc.verb, tc.resource, tc.ns, got.Status.Allowed, tc.want, got.Status.Reason)
		}
	}
}
