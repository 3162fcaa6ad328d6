// Package k8s_test validates the kustomize base and overlays: every overlay builds, every
// document strict-decodes with client-go's scheme, and the semantic rules of the deployment
// hold (selectors, probes, limits, privileges, images, flags the binaries really accept).
package k8s_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

var overlays = []string{"dev", "production", "upload-only"}

// collectorCapabilities is what the collector needs, sorted; docs/operations.md justifies each
// and TestCollectorUnderManifestCapabilities runs the collector with exactly the set the
// manifest grants.
var collectorCapabilities = []string{"BPF", "DAC_READ_SEARCH", "PERFMON", "SYSLOG", "SYS_PTRACE"}

// uploadOnlyCapabilities is what `collector --upload-only` needs: no sampling, no kernel
// symbols, only other users' processes and files.
var uploadOnlyCapabilities = []string{"DAC_READ_SEARCH", "SYS_PTRACE"}

// served lists, per container, the port its health endpoints listen on and the paths it serves
// there: the services' own defaults, which the manifests must point at.
var served = map[string]struct {
	port  int32
	paths []string
	// readiness, when it is served elsewhere than port and paths (the gateway's).
	readyPort  int32
	readyPaths []string
}{
	"symbolizer": {port: 7070, paths: []string{"/healthz", "/readyz", "/metrics"}},
	// Liveness: the Collector's health_check extension (one path); readiness: the refusals
	// extension's, which follows pushback.
	"gateway":   {port: 13133, paths: []string{"/"}, readyPort: 13134, readyPaths: []string{"/readyz"}},
	"collector": {port: 9464, paths: []string{"/healthz", "/readyz", "/metrics"}},
}

// externalSecrets are created by the operator in production (docs/operations.md says how),
// never committed.
var externalSecrets = map[string][]string{
	"production": {"profsym-upload-tokens", "profsym-read-token", "profsym-s3", "profsym-redis", "symbolizer-tls", "gateway-tls", "profsym-ca", "collector-tls"},
}

type rendered struct {
	objs []runtime.Object
}

func build(t *testing.T, overlay string) rendered {
	t.Helper()
	return buildDir(t, filepath.Join("overlays", overlay))
}

// buildDir runs kustomize build on a directory of deploy/k8s.
func buildDir(t *testing.T, dir string) rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, dir, out)
}

// decode strict-decodes every document of a rendering (kustomize or helm output).
func decode(t *testing.T, what string, out []byte) rendered {
	t.Helper()
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var r rendered
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
			continue
		}
		obj, gvk, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s document %d does not strict-decode: %v\n%s", what, i, err, doc)
		}
		if gvk.Kind == "" {
			t.Fatalf("%s document %d has no kind", what, i)
		}
		r.objs = append(r.objs, obj)
	}
	return r
}

// stripComments drops YAML comment lines (helm prefixes every template with "# Source: ...").
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// TestDockerfiles checks that every service has a multi-stage build on pinned bases that ends
// as a non-root user.
func TestDockerfiles(t *testing.T) {
	for svc := range served {
		data, err := os.ReadFile(filepath.Join("..", "docker", svc+".Dockerfile"))
		if err != nil {
			t.Errorf("%s: %v", svc, err)
			continue
		}
		text := string(data)
		froms := regexp.MustCompile(`(?m)^FROM\s+(?:--\S+\s+)*(\S+)`).FindAllStringSubmatch(text, -1)
		if len(froms) < 2 {
			t.Errorf("%s.Dockerfile: want a multi-stage build, found %d stages", svc, len(froms))
		}
		for _, f := range froms {
			if !strings.Contains(f[1], ":") || strings.HasSuffix(f[1], ":latest") {
				t.Errorf("%s.Dockerfile: base %s is not pinned", svc, f[1])
			}
		}
		if !regexp.MustCompile(`(?m)^USER\s+[1-9]`).MatchString(text) {
			t.Errorf("%s.Dockerfile: the image must end as a non-root USER", svc)
		}
		build := "./services/" + svc
		if svc == "gateway" {
			// The Collector distribution is a Go module of its own: built from its directory.
			build = "cd services/gateway && GOOS=$TARGETOS GOARCH=$TARGETARCH CGO_ENABLED=0 go build"
		}
		if !strings.Contains(text, "CGO_ENABLED=0") || !strings.Contains(text, build) {
			t.Errorf("%s.Dockerfile: must build %s statically (%q)", svc, svc, build)
		}
	}
}

func TestOverlays(t *testing.T) {
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			r := build(t, overlay)
			checkSelectors(t, r)
			checkPods(t, overlay, r)
			checkRBAC(t, r)
			checkSecrets(t, overlay, r)
			checkTLS(t, r)
			checkGateway(t, r)
			checkFlags(t, r)
		})
	}
}

type workload struct {
	kind, name string
	namespace  string
	selector   map[string]string
	pod        corev1.PodTemplateSpec
}

func workloads(r rendered) []workload {
	var ws []workload
	for _, o := range r.objs {
		switch w := o.(type) {
		case *appsv1.Deployment:
			ws = append(ws, workload{"Deployment", w.Name, w.Namespace, w.Spec.Selector.MatchLabels, w.Spec.Template})
		case *appsv1.DaemonSet:
			ws = append(ws, workload{"DaemonSet", w.Name, w.Namespace, w.Spec.Selector.MatchLabels, w.Spec.Template})
		case *appsv1.StatefulSet:
			ws = append(ws, workload{"StatefulSet", w.Name, w.Namespace, w.Spec.Selector.MatchLabels, w.Spec.Template})
		}
	}
	return ws
}

func selects(sel map[string]string, ws []workload) []string {
	var hit []string
	for _, w := range ws {
		if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(w.pod.Labels)) {
			hit = append(hit, w.name)
		}
	}
	return hit
}

func checkSelectors(t *testing.T, r rendered) {
	ws := workloads(r)
	names := map[string]bool{}
	for _, w := range ws {
		names[w.kind+"/"+w.name] = true
		if !labels.SelectorFromSet(w.selector).Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s/%s: selector %v does not match its pod labels %v", w.kind, w.name, w.selector, w.pod.Labels)
		}
		if hit := selects(w.selector, ws); len(hit) != 1 {
			t.Errorf("%s/%s: selector %v matches the pods of %v; want exactly its own", w.kind, w.name, w.selector, hit)
		}
	}
	for _, o := range r.objs {
		switch x := o.(type) {
		case *corev1.Service:
			hit := selects(x.Spec.Selector, ws)
			if len(hit) == 0 {
				t.Errorf("Service %s selects no pods (%v)", x.Name, x.Spec.Selector)
				continue
			}
			for _, p := range x.Spec.Ports {
				if p.TargetPort.StrVal != "" && !namedPort(ws, hit[0], p.TargetPort.StrVal) {
					t.Errorf("Service %s port %s targets %q, which %s does not declare", x.Name, p.Name, p.TargetPort.StrVal, hit[0])
				}
			}
		case *policyv1.PodDisruptionBudget:
			if len(selects(x.Spec.Selector.MatchLabels, ws)) == 0 {
				t.Errorf("PodDisruptionBudget %s selects no pods", x.Name)
			}
		case *autoscalingv2.HorizontalPodAutoscaler:
			if !names[x.Spec.ScaleTargetRef.Kind+"/"+x.Spec.ScaleTargetRef.Name] {
				t.Errorf("HorizontalPodAutoscaler %s targets missing %s/%s", x.Name, x.Spec.ScaleTargetRef.Kind, x.Spec.ScaleTargetRef.Name)
			}
		case *networkingv1.NetworkPolicy:
			if len(selects(x.Spec.PodSelector.MatchLabels, ws)) == 0 {
				t.Errorf("NetworkPolicy %s selects no pods", x.Name)
			}
			if !slices.Contains(x.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(x.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
				t.Errorf("NetworkPolicy %s must restrict both ingress and egress", x.Name)
			}
		}
	}
	for _, w := range ws {
		if w.kind == "Deployment" && !policyFor(r, w) {
			t.Errorf("Deployment %s has no NetworkPolicy", w.name)
		}
	}
}

func policyFor(r rendered, w workload) bool {
	for _, o := range r.objs {
		if np, ok := o.(*networkingv1.NetworkPolicy); ok && labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(w.pod.Labels)) {
			return true
		}
	}
	return false
}

func namedPort(ws []workload, name, port string) bool {
	for _, w := range ws {
		if w.name != name {
			continue
		}
		for _, c := range w.pod.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == port {
					return true
				}
			}
		}
	}
	return false
}

var pinned = regexp.MustCompile(`^[^:@]+(:[A-Za-z0-9._-]+)?(@sha256:[a-f0-9]{64})?$`)

func checkPods(t *testing.T, overlay string, r rendered) {
	for _, w := range workloads(r) {
		spec := w.pod.Spec
		// Only the gateway reads the API (k8s_attributes); checkGateway holds its token to its
		// configuration and its rights to what the processor reads.
		if w.name != "gateway" && (spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken) {
			t.Errorf("%s: pods must not mount a service account token (no API access is needed)", w.name)
		}
		for _, c := range spec.Containers {
			id := w.name + "/" + c.Name
			if c.Image == "" || strings.HasSuffix(c.Image, ":latest") || !strings.ContainsAny(c.Image, ":@") || !pinned.MatchString(c.Image) {
				t.Errorf("%s: image %q is not pinned to a tag or digest", id, c.Image)
			}
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := c.Resources.Limits[res]; !ok {
					t.Errorf("%s: no %s limit", id, res)
				}
				if _, ok := c.Resources.Requests[res]; !ok {
					t.Errorf("%s: no %s request", id, res)
				}
			}
			sc := c.SecurityContext
			if sc == nil {
				t.Errorf("%s: no securityContext", id)
				continue
			}
			if w.name == otelProfiler {
				checkOtelProfilerRights(t, id, spec, sc)
				checkProbes(t, id, c)
				continue
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: privileged", id)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: allowPrivilegeEscalation must be false", id)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: root filesystem must be read-only", id)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("%s: must drop ALL capabilities", id)
			}
			var added []string
			if sc.Capabilities != nil {
				for _, c := range sc.Capabilities.Add {
					added = append(added, string(c))
				}
			}
			sort.Strings(added)
			if w.name == "collector" {
				want := collectorCapabilities
				if slices.Contains(c.Args, "--upload-only") {
					want = uploadOnlyCapabilities
				}
				if !slices.Equal(added, want) {
					t.Errorf("%s: capabilities %v, want exactly %v", id, added, want)
				}
				if !spec.HostPID {
					t.Errorf("%s: needs hostPID to see every process", id)
				}
				if !slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool { return t.Operator == corev1.TolerationOpExists && t.Key == "" }) {
					t.Errorf("%s: must tolerate every taint to run on every node", id)
				}
			} else {
				if len(added) > 0 {
					t.Errorf("%s: adds capabilities %v", id, added)
				}
				if spec.HostPID || spec.HostNetwork {
					t.Errorf("%s: shares host namespaces", id)
				}
				nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (spec.SecurityContext != nil && spec.SecurityContext.RunAsNonRoot != nil && *spec.SecurityContext.RunAsNonRoot)
				if !nonRoot {
					t.Errorf("%s: must run as non-root", id)
				}
			}
			checkProbes(t, id, c)
		}
	}
}

func checkProbes(t *testing.T, id string, c corev1.Container) {
	want, ours := served[c.Name]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for kind, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil {
			t.Errorf("%s: no %s probe", id, kind)
			continue
		}
		if !ours {
			continue
		}
		if p.HTTPGet == nil {
			t.Errorf("%s: %s probe must be an HTTP GET on the health endpoints", id, kind)
			continue
		}
		port := p.HTTPGet.Port.IntVal
		if p.HTTPGet.Port.StrVal != "" {
			port = ports[p.HTTPGet.Port.StrVal]
		}
		wantPort, wantPaths := want.port, want.paths
		if kind == "readiness" && want.readyPort != 0 {
			wantPort, wantPaths = want.readyPort, want.readyPaths
		}
		if port != wantPort {
			t.Errorf("%s: %s probe on port %d, but %s serves it on %d", id, kind, port, c.Name, wantPort)
		}
		if !slices.Contains(wantPaths, p.HTTPGet.Path) {
			t.Errorf("%s: %s probe path %q is not one %s serves (%v)", id, kind, p.HTTPGet.Path, c.Name, wantPaths)
		}
	}
}

// checkRBAC: only the gateway's service account is bound to anything (checkGateway checks what),
// and no service account automounts its token: a pod that needs it says so itself.
func checkRBAC(t *testing.T, r rendered) {
	gatewaySA := func(subjects []rbacv1.Subject) bool {
		for _, s := range subjects {
			if s.Kind != "ServiceAccount" || s.Name != "gateway" {
				return false
			}
		}
		return len(subjects) > 0
	}
	for _, o := range r.objs {
		switch x := o.(type) {
		case *rbacv1.Role, *rbacv1.RoleBinding:
			t.Errorf("%T: no component needs namespaced API rights", x)
		case *rbacv1.ClusterRoleBinding:
			if !gatewaySA(x.Subjects) || x.RoleRef.Kind != "ClusterRole" {
				t.Errorf("ClusterRoleBinding %s binds %v to %s/%s: only the gateway reads the API", x.Name, x.Subjects, x.RoleRef.Kind, x.RoleRef.Name)
			}
		case *rbacv1.ClusterRole:
			for _, rule := range x.Rules {
				for _, v := range rule.Verbs {
					if !slices.Contains([]string{"get", "list", "watch"}, v) {
						t.Errorf("ClusterRole %s grants %q on %v: read only", x.Name, v, rule.Resources)
					}
				}
			}
		case *corev1.ServiceAccount:
			if x.AutomountServiceAccountToken == nil || *x.AutomountServiceAccountToken {
				t.Errorf("ServiceAccount %s must not automount its token", x.Name)
			}
		}
	}
}

func checkSecrets(t *testing.T, overlay string, r rendered) {
	have := map[string]bool{}
	for _, o := range r.objs {
		if s, ok := o.(*corev1.Secret); ok {
			have[s.Name] = true
		}
	}
	for _, s := range externalSecrets[overlay] {
		have[s] = true
	}
	for _, w := range workloads(r) {
		for _, v := range w.pod.Spec.Volumes {
			if v.Secret != nil && !have[v.Secret.SecretName] {
				t.Errorf("%s: volume %s uses Secret %s, which overlays/%s neither makes nor lists as external", w.name, v.Name, v.Secret.SecretName, overlay)
			}
		}
		for _, c := range w.pod.Spec.Containers {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !have[e.ValueFrom.SecretKeyRef.Name] {
					t.Errorf("%s: env %s uses Secret %s, which overlays/%s neither makes nor lists as external", w.name, e.Name, e.ValueFrom.SecretKeyRef.Name, overlay)
				}
			}
		}
	}
}

// checkTLS: a peer that serves TLS is reached over TLS. The symbolizer with --tls-cert needs an
// https processors::symbolize::endpoint at the gateway that trusts the cluster CA; a gateway
// whose receivers serve TLS serves it on both ports, admits senders by certificate (mutual TLS,
// client_ca_file) and needs collectors that are not told --gateway-insecure.
func checkTLS(t *testing.T, r rendered) {
	t.Helper()
	if g, ok := gatewayConfigOf(t, r); ok {
		checkTLSWith(t, r, g)
	}
}

func checkTLSWith(t reporter, r rendered, g gatewayConfig) {
	// By workload: the upload-only DaemonSet's container is a "collector" too.
	args := map[string][]string{}
	for _, w := range workloads(r) {
		for _, c := range w.pod.Spec.Containers {
			args[w.name] = c.Args
		}
	}
	has := func(svc, prefix string) string {
		for _, a := range args[svc] {
			if strings.HasPrefix(a, prefix) {
				return a
			}
		}
		return ""
	}
	if has("symbolizer", "--tls-cert") != "" {
		if u := g.resolve(getString(g.cfg, "processors::symbolize::endpoint")); !strings.HasPrefix(u, "https://") {
			t.Errorf("the symbolizer serves TLS but the gateway calls it at %q", u)
		}
		ca := getString(g.cfg, "processors::symbolize::tls::ca_file")
		if _, v, ok := g.mountOf(ca); ca == "" || !ok || v.Secret == nil || !strings.HasSuffix(v.Secret.SecretName, "-ca") {
			t.Errorf("the symbolizer's certificate is signed by the cluster CA, but processors::symbolize::tls::ca_file %q is not that CA's Secret", ca)
		}
	}
	gwTLS := map[string]bool{}
	for _, proto := range []string{"grpc", "http"} {
		prefix := "receivers::otlp::protocols::" + proto + "::tls::"
		cert := getString(g.cfg, prefix+"cert_file")
		gwTLS[proto] = cert != ""
		if cert != "" && (getString(g.cfg, prefix+"key_file") == "" || getString(g.cfg, prefix+"client_ca_file") == "") {
			t.Errorf("gateway: OTLP/%s serves TLS without key_file or client_ca_file: senders must be admitted by certificate (mutual TLS)", proto)
		}
	}
	if gwTLS["grpc"] != gwTLS["http"] {
		t.Errorf("gateway: TLS on OTLP/gRPC %v, on OTLP/HTTP %v: one port would be open in plain text", gwTLS["grpc"], gwTLS["http"])
	}
	if has("collector", "--gateway=") == "" {
		return // no profiling collector (upload-only or off): nothing sends to the gateway
	}
	if insecure := has("collector", "--gateway-insecure") != ""; gwTLS["grpc"] == insecure {
		t.Errorf("gateway TLS %v, but collector --gateway-insecure %v", gwTLS["grpc"], insecure)
	}
}

// checkFlags runs each service binary's --help and checks that every flag the manifests pass
// exists, so a renamed flag fails here rather than in a CrashLoopBackOff.
func checkFlags(t *testing.T, r rendered) {
	if testing.Short() {
		t.Log("skipping flag check in -short mode (builds the services)")
		return
	}
	for _, w := range workloads(r) {
		for _, c := range w.pod.Spec.Containers {
			if _, ours := served[c.Name]; !ours {
				continue
			}
			args := c.Args
			var sub []string
			for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
				sub, args = append(sub, args[0]), args[1:]
			}
			help := helpOf(t, c.Name, sub)
			for _, a := range args {
				name, _, _ := strings.Cut(a, "=")
				if !strings.Contains(help, name+"=") && !strings.Contains(help, name+" ") && !strings.Contains(help, name+"\n") {
					t.Errorf("%s: flag %s is not accepted by `%s %s`", w.name, name, c.Name, strings.Join(sub, " "))
				}
			}
		}
	}
}

var (
	binMu  sync.Mutex
	bins   = map[string]string{}
	binDir string
)

func helpOf(t *testing.T, service string, sub []string) string {
	t.Helper()
	binMu.Lock()
	bin, ok := bins[service]
	if !ok {
		bin = filepath.Join(binDir, service)
		// Built as deploy/docker/*.Dockerfile builds it: static, CGO off.
		cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-o", bin, "../../services/"+service)
		if service == "gateway" {
			// The Collector distribution is a Go module of its own.
			bin, _ = filepath.Abs(bin)
			cmd = exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-o", bin, ".")
			cmd.Dir = filepath.Join("..", "..", "services", "gateway")
		}
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binMu.Unlock()
			t.Fatalf("build %s: %v\n%s", service, err, out)
		}
		if f, err := elf.Open(bin); err == nil {
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s is not static (has PT_INTERP); the distroless image has no libc", service)
				}
			}
			f.Close()
		}
		bins[service] = bin
	}
	binMu.Unlock()
	out, err := exec.CommandContext(t.Context(), bin, append(sub, "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v --help: %v\n%s", service, sub, err, out)
	}
	// Kong folds long help lines; join them so flag names are found whole.
	return strings.ReplaceAll(string(out), "\n ", " ") + "\n"
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(inClusterEnv); dir != "" {
		execInCluster(dir) // a container's stand-in pod (startup_test.go); does not return
	}
	var err error
	if binDir, err = os.MkdirTemp("", "profsym-k8s-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if kube != nil {
		kube.Stop()
	}
	// The verdict is already in code; a leftover directory only needs to be named.
	if err := os.RemoveAll(binDir); err != nil {
		fmt.Fprintf(os.Stderr, "remove test binaries: %v\n", err)
	}
	if code != 0 {
		fmt.Fprintln(os.Stderr, "manifests are invalid; see docs/operations.md for the rules they follow")
	}
	os.Exit(code)
}
