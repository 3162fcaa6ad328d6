package k8s_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// gatewayConfig is the gateway's Collector configuration as a rendering deploys it: the file its
// --config names, read from the ConfigMap mounted there.
type gatewayConfig struct {
	raw       string
	cfg       map[string]any
	path      string // the --config path in the container
	configMap string // the ConfigMap's name and key
	key       string
	w         workload
	c         corev1.Container
	// configMaps of the rendering, for env taken from them (configMapKeyRef).
	configMaps map[string]map[string]string
}

// gatewayConfigOf finds the gateway and its configuration in a rendering; ok is false when the
// rendering has no gateway.
func gatewayConfigOf(t *testing.T, r rendered) (gatewayConfig, bool) {
	t.Helper()
	return collectorConfigOf(t, r, "gateway")
}

// collectorConfigOf finds the container named name, an OpenTelemetry Collector, and the
// configuration its --config names; ok is false when the rendering has no such container.
func collectorConfigOf(t *testing.T, r rendered, name string) (gatewayConfig, bool) {
	t.Helper()
	var g gatewayConfig
	found := false
	for _, w := range workloads(r) {
		for _, c := range w.pod.Spec.Containers {
			if c.Name == name {
				g.w, g.c, found = w, c, true
			}
		}
	}
	if !found {
		return g, false
	}
	for _, a := range g.c.Args {
		if p, ok := strings.CutPrefix(a, "--config="); ok {
			if g.path != "" {
				t.Fatalf(name+": more than one --config (%s, %s): one file holds the whole configuration", g.path, p)
			}
			g.path = p
		}
	}
	if g.path == "" {
		t.Fatalf(name+": no --config=FILE in args %q: without one the distribution runs its built-in loopback configuration", g.c.Args)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range g.w.pod.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, vm := range g.c.VolumeMounts {
		rel, err := filepath.Rel(vm.MountPath, g.path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		v := vols[vm.Name]
		if v.ConfigMap == nil {
			t.Fatalf(name+": --config %s is on volume %s, which is not a ConfigMap", g.path, vm.Name)
		}
		g.configMap, g.key = v.ConfigMap.Name, rel
		for _, it := range v.ConfigMap.Items {
			if it.Path == rel {
				g.key = it.Key
			}
		}
	}
	if g.configMap == "" {
		t.Fatalf(name+": --config %s is on no mounted volume", g.path)
	}
	for _, o := range r.objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == g.configMap && cm.Namespace == g.w.namespace {
			raw, ok := cm.Data[g.key]
			if !ok {
				t.Fatalf(name+": ConfigMap %s has no key %s (--config %s)", cm.Name, g.key, g.path)
			}
			g.raw = raw
		}
	}
	if g.raw == "" {
		t.Fatalf(name+": ConfigMap %s/%s is not in the rendering", g.w.namespace, g.configMap)
	}
	g.configMaps = map[string]map[string]string{}
	for _, o := range r.objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Namespace == g.w.namespace {
			g.configMaps[cm.Name] = cm.Data
		}
	}
	if err := yaml.Unmarshal([]byte(g.raw), &g.cfg); err != nil {
		t.Fatalf(name+": ConfigMap %s key %s is not YAML: %v", g.configMap, g.key, err)
	}
	return g, true
}

// get walks a "::"-separated path (the Collector's own notation) through maps.
func get(cfg map[string]any, path string) any {
	var cur any = cfg
	for _, k := range strings.Split(path, "::") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func getString(cfg map[string]any, path string) string {
	s, _ := get(cfg, path).(string)
	return s
}

func getStrings(cfg map[string]any, path string) []string {
	l, _ := get(cfg, path).([]any)
	var out []string
	for _, v := range l {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out
}

// componentType is the type of a component ID: "otlp_grpc" of "otlp_grpc/backend".
func componentType(id string) string {
	t, _, _ := strings.Cut(id, "/")
	return t
}

// pipelineUses reports whether a profiles pipeline uses a processor or exporter of type typ.
func (g gatewayConfig) pipelineUses(kind, typ string) []string {
	var ids []string
	pipes, _ := get(g.cfg, "service::pipelines").(map[string]any)
	for name := range pipes {
		for _, id := range getStrings(g.cfg, "service::pipelines::"+name+"::"+kind) {
			if componentType(id) == typ || (typ == "k8s_attributes" && componentType(id) == "k8sattributes") ||
				(typ == "otlp_grpc" && componentType(id) == "otlp") {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// resolve resolves the Collector's ${env:NAME:-default} against the container's env (literal
// or from a ConfigMap of the rendering), falling back to the default; other values come back as
// they are.
var envExpansion = regexp.MustCompile(`^\$\{env:([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}$`)

func (g gatewayConfig) resolve(v string) string {
	m := envExpansion.FindStringSubmatch(v)
	if m == nil {
		return v
	}
	for _, e := range g.c.Env {
		if e.Name != m[1] {
			continue
		}
		if e.ValueFrom == nil {
			return e.Value
		}
		if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
			if v, ok := g.configMaps[ref.Name][ref.Key]; ok {
				return v
			}
		}
	}
	return m[3]
}

// mountOf returns the volume mount and volume holding an absolute path of the container.
func (g gatewayConfig) mountOf(path string) (corev1.VolumeMount, corev1.Volume, bool) {
	best := -1
	var vm corev1.VolumeMount
	for _, m := range g.c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, path)
		if err == nil && !strings.HasPrefix(rel, "..") && len(m.MountPath) > best {
			best, vm = len(m.MountPath), m
		}
	}
	if best < 0 {
		return vm, corev1.Volume{}, false
	}
	for _, v := range g.w.pod.Spec.Volumes {
		if v.Name == vm.Name {
			return vm, v, true
		}
	}
	return vm, corev1.Volume{}, false
}

// hashSuffixed is a name kustomize's generators gave a content hash.
var hashSuffixed = regexp.MustCompile(`-[a-z0-9]{10}$`)

// fileKeys are the settings that name a file or directory the gateway reads or writes.
var fileKeys = regexp.MustCompile(`(^|::)(cert_file|key_file|client_ca_file|ca_file|bearer_token_file|directory)$|^exporters::[^:]+::path$`)

// leaves flattens a configuration to "a::b::c" -> value; lists are leaves.
func leaves(prefix string, v any, out map[string]any) {
	m, ok := v.(map[string]any)
	if !ok {
		out[prefix] = v
		return
	}
	if len(m) == 0 && prefix != "" {
		out[prefix] = m
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "::" + k
		}
		leaves(p, sub, out)
	}
}

// checkGateway holds the gateway's configuration to every promise the old flags carried, and
// the Deployment to the configuration: ports, probes, files on volumes, memory, RBAC.
func checkGateway(t *testing.T, r rendered) {
	t.Helper()
	if g, ok := gatewayConfigOf(t, r); ok {
		checkGatewayWith(t, r, g)
	}
}

// reporter is what the checks report to: a *testing.T, or a failRecorder in the tests that
// prove the checks can fail.
type reporter interface {
	Errorf(format string, args ...any)
}

type failRecorder struct{ errs []string }

func (f *failRecorder) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func checkGatewayWith(t reporter, r rendered, g gatewayConfig) {
	cfg := g.cfg
	ports := map[string]int32{}
	for _, p := range g.c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	portOf := func(hostPort string) int32 {
		_, p, err := net.SplitHostPort(g.resolve(hostPort))
		if err != nil {
			return -1
		}
		n, _ := strconv.Atoi(p)
		return int32(n)
	}

	// Receivers: the two OTLP ports, on every interface, with a request size bound (the old
	// --max-request-bytes).
	for proto, name := range map[string]string{"grpc": "otlp-grpc", "http": "otlp-http"} {
		ep := getString(cfg, "receivers::otlp::protocols::"+proto+"::endpoint")
		if p := portOf(ep); p != ports[name] || p == 0 {
			t.Errorf("gateway: receivers::otlp::protocols::%s::endpoint %q, but the container's %s port is %d", proto, ep, name, ports[name])
		}
		if h, _, _ := net.SplitHostPort(ep); h != "0.0.0.0" && h != "" && h != "::" {
			t.Errorf("gateway: receivers::otlp::protocols::%s::endpoint %q listens on %s only; the Service reaches the pod's IP", proto, ep, h)
		}
	}
	if getString(cfg, "service::pipelines::profiles::receivers::0") == "" && len(getStrings(cfg, "service::pipelines::profiles::receivers")) == 0 {
		t.Errorf("gateway: no profiles pipeline")
	}
	if v := get(cfg, "receivers::otlp::protocols::grpc::max_recv_msg_size_mib"); v == nil {
		t.Errorf("gateway: receivers::otlp::protocols::grpc::max_recv_msg_size_mib unset (the old --max-request-bytes bound)")
	}

	// A changed configuration rolls the pods: the ConfigMap's name carries a hash of its content
	// (kustomize's configMapGenerator) or the pod template a checksum of it (the chart). The
	// Collector reads its file at start only.
	if !hashSuffixed.MatchString(g.configMap) && g.w.pod.Annotations["checksum/config"] == "" {
		t.Errorf("gateway: ConfigMap %s has no content hash in its name and the pod template no checksum/config annotation: a changed configuration would not restart the gateway", g.configMap)
	}

	// Health: the probes are on the health_check extension, which the service runs.
	hc := getString(cfg, "extensions::health_check::endpoint")
	if !slices.Contains(getStrings(cfg, "service::extensions"), "health_check") {
		t.Errorf("gateway: health_check is not in service::extensions, so nothing answers the probes")
	}
	if p := portOf(hc); p != served["gateway"].port || ports["health"] != p {
		t.Errorf("gateway: extensions::health_check::endpoint %q; the liveness probe and the container's health port (%d) want %d", hc, ports["health"], served["gateway"].port)
	}
	// Readiness: the refusals extension's endpoint, which follows pushback; the extension is the
	// middleware of both receivers (InvalidArgument for undecodable OTLP, refusals counted).
	if !slices.Contains(getStrings(cfg, "service::extensions"), "refusals") {
		t.Errorf("gateway: refusals is not in service::extensions, so nothing answers the readiness probe")
	}
	re := getString(cfg, "extensions::refusals::readiness::endpoint")
	if p := portOf(re); p != served["gateway"].readyPort || ports["ready"] != p {
		t.Errorf("gateway: extensions::refusals::readiness::endpoint %q; the readiness probe and the container's ready port (%d) want %d", re, ports["ready"], served["gateway"].readyPort)
	}
	if rp := g.c.ReadinessProbe; rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != getString(cfg, "extensions::refusals::readiness::path") {
		t.Errorf("gateway: the readiness probe's path is not extensions::refusals::readiness::path %q", getString(cfg, "extensions::refusals::readiness::path"))
	}
	for _, proto := range []string{"grpc", "http"} {
		mw, _ := json.Marshal(get(cfg, "receivers::otlp::protocols::"+proto+"::middlewares"))
		if !strings.Contains(string(mw), `"refusals"`) {
			t.Errorf("gateway: OTLP/%s does not run the refusals middleware: undecodable requests get INTERNAL and refusals go uncounted", proto)
		}
	}
	// Metrics: the Prometheus reader on the metrics port, on every interface.
	prom := get(cfg, "service::telemetry::metrics::readers")
	promOK := false
	if l, ok := prom.([]any); ok {
		for _, rd := range l {
			m, _ := rd.(map[string]any)
			p, _ := get(m, "pull::exporter::prometheus::port").(float64)
			h := getString(m, "pull::exporter::prometheus::host")
			if int32(p) == ports["metrics"] && h == "0.0.0.0" {
				promOK = true
			}
		}
	}
	if !promOK || ports["metrics"] != 8888 {
		t.Errorf("gateway: no Prometheus reader on 0.0.0.0:%d (the metrics port; readers %v)", ports["metrics"], prom)
	}

	// The symbolizer, with the read token of profsym-read-token.
	if len(g.pipelineUses("processors", "symbolize")) == 0 {
		t.Errorf("gateway: the profiles pipeline does not run the symbolize processor")
	}
	tok := getString(cfg, "processors::symbolize::bearer_token_file")
	if tok == "" {
		t.Errorf("gateway: processors::symbolize::bearer_token_file unset; the symbolizer's reads need the read token")
	} else if _, v, ok := g.mountOf(tok); !ok || v.Secret == nil || !strings.HasSuffix(v.Secret.SecretName, "read-token") {
		t.Errorf("gateway: bearer_token_file %s is not on the read-token Secret's volume", tok)
	}

	// Every file the configuration names is on a volume of the container (the root filesystem
	// is read-only and holds none of them).
	flat := map[string]any{}
	leaves("", cfg, flat)
	for k, v := range flat {
		s, ok := v.(string)
		if !ok || !fileKeys.MatchString(k) {
			continue
		}
		s = g.resolve(s)
		if !filepath.IsAbs(s) {
			t.Errorf("gateway: %s %q is relative (to the working directory of a read-only root)", k, s)
			continue
		}
		if _, _, ok := g.mountOf(s); !ok {
			t.Errorf("gateway: %s %s is on no volume of the container", k, s)
		}
	}

	// A persistent queue is on a volume, and its storage extension runs.
	exps, _ := get(cfg, "exporters").(map[string]any)
	for id := range exps {
		st := getString(cfg, "exporters::"+id+"::sending_queue::storage")
		if st == "" {
			continue
		}
		if !slices.Contains(getStrings(cfg, "service::extensions"), st) {
			t.Errorf("gateway: exporter %s queues on %s, which is not in service::extensions", id, st)
		}
		dir := g.resolve(getString(cfg, "extensions::"+st+"::directory"))
		_, v, ok := g.mountOf(dir)
		switch {
		case !ok:
			t.Errorf("gateway: the queue directory %s is on no volume", dir)
		case v.EmptyDir != nil && v.EmptyDir.SizeLimit == nil:
			t.Errorf("gateway: the queue's emptyDir %s has no sizeLimit", v.Name)
		case v.EmptyDir == nil && v.PersistentVolumeClaim == nil && v.Ephemeral == nil:
			t.Errorf("gateway: the queue directory %s is on volume %s, which is neither an emptyDir nor a claim", dir, v.Name)
		}
		if block, _ := get(cfg, "exporters::"+id+"::sending_queue::block_on_overflow").(bool); block {
			t.Errorf("gateway: exporter %s blocks on a full queue; refusing (UNAVAILABLE) lets senders back off", id)
		}
		if me, ok := get(cfg, "exporters::"+id+"::retry_on_failure::max_elapsed_time").(float64); !ok || me != 0 {
			t.Errorf("gateway: exporter %s: retry_on_failure::max_elapsed_time must be 0 (retry what was accepted until delivered), is %v", id, get(cfg, "exporters::"+id+"::retry_on_failure::max_elapsed_time"))
		}
	}
	// insecure: true is ignored by the Collector once a CA or certificate is set (TLS is spoken
	// anyway): a backend meant to be plain text would get TLS handshakes it cannot answer.
	for id := range exps {
		tlsCfg, _ := get(cfg, "exporters::"+id+"::tls").(map[string]any)
		ins, _ := tlsCfg["insecure"].(string)
		insecure := tlsCfg["insecure"] == true || g.resolve(ins) == "true"
		for _, k := range []string{"ca_file", "ca_pem", "cert_file", "key_file"} {
			if _, set := tlsCfg[k]; set && (insecure || ins != "") {
				t.Errorf("gateway: exporter %s sets tls::%s with tls::insecure %v: the Collector then speaks TLS whatever insecure says", id, k, tlsCfg["insecure"])
			}
		}
	}
	// Outputs: at least one exporter in the pipeline, and files bounded within their volume.
	if len(getStrings(cfg, "service::pipelines::profiles::exporters")) == 0 {
		t.Errorf("gateway: the profiles pipeline has no exporter")
	}
	for _, id := range g.pipelineUses("exporters", "file") {
		mb, _ := get(cfg, "exporters::"+id+"::rotation::max_megabytes").(float64)
		backups, _ := get(cfg, "exporters::"+id+"::rotation::max_backups").(float64)
		if mb <= 0 || backups <= 0 {
			t.Errorf("gateway: file exporter %s without rotation::max_megabytes and max_backups grows without bound", id)
			continue
		}
		if getString(cfg, "exporters::"+id+"::encoding") == "" || getString(cfg, "exporters::"+id+"::format") != "proto" {
			t.Errorf("gateway: file exporter %s needs format: proto and encoding: otlp_plain (no orphan strings)", id)
		}
		_, v, ok := g.mountOf(getString(cfg, "exporters::"+id+"::path"))
		if ok && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
			bound := resource.MustParse(fmt.Sprintf("%dM", int64(mb*(backups+1))))
			if bound.Cmp(*v.EmptyDir.SizeLimit) >= 0 {
				t.Errorf("gateway: file exporter %s keeps up to %s, at or over its volume's sizeLimit %s", id, bound.String(), v.EmptyDir.SizeLimit)
			}
		}
	}
	for _, id := range g.pipelineUses("exporters", "pprof") {
		if k, _ := get(cfg, "exporters::"+id+"::keep_files").(float64); k <= 0 {
			t.Errorf("gateway: pprof exporter %s without keep_files grows without bound", id)
		}
	}

	// Memory: GOMEMLIMIT between memory_limiter's soft and hard limits of the container's limit.
	limit, ok := g.c.Resources.Limits[corev1.ResourceMemory]
	pct, _ := get(cfg, "processors::memory_limiter::limit_percentage").(float64)
	spike, _ := get(cfg, "processors::memory_limiter::spike_limit_percentage").(float64)
	if len(g.pipelineUses("processors", "memory_limiter")) == 0 || pct <= 0 {
		t.Errorf("gateway: no memory_limiter with limit_percentage in the pipeline (backpressure before the OOM killer)")
	} else if ok {
		var gml string
		for _, e := range g.c.Env {
			if e.Name == "GOMEMLIMIT" {
				gml = e.Value
			}
		}
		gmlBytes, err := parseGoMemLimit(gml)
		hard, soft := float64(limit.Value())*pct/100, float64(limit.Value())*(pct-spike)/100
		switch {
		case err != nil:
			t.Errorf("gateway: GOMEMLIMIT %q: %v", gml, err)
		case float64(gmlBytes) > hard || float64(gmlBytes) < soft:
			t.Errorf("gateway: GOMEMLIMIT %s is outside memory_limiter's soft and hard limits (%.0f to %.0f MiB of the %s limit)", gml, soft/(1<<20), hard/(1<<20), limit.String())
		}
	}

	checkK8sAttributes(t, r, g)
}

// parseGoMemLimit reads GOMEMLIMIT's syntax: a number of bytes with an optional B, KiB, MiB,
// GiB or TiB suffix.
func parseGoMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		mul    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * u.mul, err
		}
	}
	if s == "" {
		return 0, fmt.Errorf("unset")
	}
	return strconv.ParseInt(s, 10, 64)
}

// checkK8sAttributes: a gateway that runs k8s_attributes has an API token and exactly the rights
// the processor uses; one that does not has neither.
func checkK8sAttributes(t reporter, r rendered, g gatewayConfig) {
	uses := len(g.pipelineUses("processors", "k8s_attributes")) > 0
	automount := g.w.pod.Spec.AutomountServiceAccountToken != nil && *g.w.pod.Spec.AutomountServiceAccountToken
	if uses != automount {
		t.Errorf("gateway: k8s_attributes in the pipeline %v, but the pod mounts its service account token %v", uses, automount)
	}
	verbs := rightsOf(r, g.w.namespace, g.w.pod.Spec.ServiceAccountName)
	if !uses {
		if len(verbs) > 0 {
			t.Errorf("gateway: no k8s_attributes, yet its service account holds %v", verbs)
		}
		return
	}
	for _, id := range g.pipelineUses("processors", "k8s_attributes") {
		if a := getString(g.cfg, "processors::"+id+"::auth_type"); a != "" && a != "serviceAccount" {
			t.Errorf("gateway: %s auth_type %q; in a pod it authenticates with its service account", id, a)
		}
		assoc, _ := json.Marshal(get(g.cfg, "processors::"+id+"::pod_association"))
		if strings.Contains(string(assoc), `"connection"`) {
			t.Errorf("gateway: %s associates by connection; a node profiler sends every pod's processes over one connection, which names the profiler's pod", id)
		}
		if !strings.Contains(string(assoc), `"container.id"`) {
			t.Errorf("gateway: %s does not associate by container.id, the attribute our collector and the eBPF profiler set per process", id)
		}
		for _, attr := range []string{"k8s.pod.name", "k8s.namespace.name", "k8s.container.name"} {
			if !slices.Contains(getStrings(g.cfg, "processors::"+id+"::extract::metadata"), attr) {
				t.Errorf("gateway: %s does not extract %s", id, attr)
			}
		}
	}
	want := []string{"pods:get", "pods:list", "pods:watch"}
	if !slices.Equal(verbs, want) {
		t.Errorf("gateway: service account %s/%s holds %v; k8s_attributes as configured needs exactly %v", g.w.namespace, g.w.pod.Spec.ServiceAccountName, verbs, want)
	}
}

// rightsOf lists "resource:verb" of every rule bound to a service account, sorted.
func rightsOf(r rendered, ns, sa string) []string {
	roles := map[string][]rbacv1.PolicyRule{}
	for _, o := range r.objs {
		switch x := o.(type) {
		case *rbacv1.ClusterRole:
			roles["ClusterRole/"+x.Name] = x.Rules
		case *rbacv1.Role:
			roles["Role/"+x.Namespace+"/"+x.Name] = x.Rules
		}
	}
	var rights []string
	bound := func(subjects []rbacv1.Subject, ref rbacv1.RoleRef, bindingNS string) {
		for _, s := range subjects {
			if s.Kind != "ServiceAccount" || s.Name != sa || s.Namespace != ns {
				continue
			}
			key := "ClusterRole/" + ref.Name
			if ref.Kind == "Role" {
				key = "Role/" + bindingNS + "/" + ref.Name
			}
			for _, rule := range roles[key] {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						g := strings.Join(rule.APIGroups, ",")
						if g != "" {
							res = g + "/" + res
						}
						rights = append(rights, res+":"+v)
					}
				}
			}
		}
	}
	for _, o := range r.objs {
		switch x := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			bound(x.Subjects, x.RoleRef, "")
		case *rbacv1.RoleBinding:
			bound(x.Subjects, x.RoleRef, x.Namespace)
		}
	}
	sort.Strings(rights)
	return slices.Compact(rights)
}

// distributionOverrides are the settings of services/gateway/config/production.yaml that a
// cluster deploys differently, each for a reason; every other setting of that file must be in
// the deployed configuration with the same value.
var distributionOverrides = map[string]string{
	// k8s_attributes between the limiter and the symbolizer.
	"service::pipelines::profiles::processors": "k8s_attributes adds pod, namespace and container names",
	// The production overlay and the chart with TLS reach a symbolizer that serves TLS.
	"processors::symbolize::endpoint": "https where the symbolizer serves TLS",
}

// TestGatewayConfigAgreesWithDistribution keeps one home for the production configuration:
// services/gateway/config/production.yaml, which the distribution's own tests run. Kustomize
// and Helm cannot read a file outside their directory, so the deployed configurations are
// copies; this test fails when a setting of the distribution's file is missing from them or has
// another value, unless distributionOverrides names it with its reason. Settings the cluster
// adds (TLS files, the read token, k8s_attributes) are allowed.
func TestGatewayConfigAgreesWithDistribution(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "services", "gateway", "config", "production.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var prod map[string]any
	if err := yaml.Unmarshal(data, &prod); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	leaves("", prod, want)
	if len(want) < 20 {
		t.Fatalf("production.yaml has %d settings; the comparison would prove little", len(want))
	}
	renderings := map[string]rendered{"base": buildDir(t, "base"), "overlays/production": build(t, "production")}
	if helm := helmBinaryIfAny(); helm != "" {
		renderings["helm ci/production-values.yaml"] = helmTemplate(t, helm, "ci/production-values.yaml")
	}
	for name, r := range renderings {
		g, ok := gatewayConfigOf(t, r)
		if !ok {
			t.Errorf("%s: no gateway", name)
			continue
		}
		have := map[string]any{}
		leaves("", g.cfg, have)
		for k, v := range want {
			if _, over := distributionOverrides[k]; over {
				continue
			}
			if hv, ok := have[k]; !ok {
				t.Errorf("%s: %s (%v in production.yaml) is not set; add it or name it in distributionOverrides with the reason", name, k, v)
			} else if !reflect.DeepEqual(hv, v) {
				t.Errorf("%s: %s is %v, production.yaml says %v; align them or name it in distributionOverrides with the reason", name, k, hv, v)
			}
		}
	}
}

// The gateway checks must be able to fail: the production rendering with its mutual TLS, read
// token, queue volume, memory limit and RBAC each broken in turn trips them.
func TestGatewayChecksCatchDefects(t *testing.T) {
	base := build(t, "production")
	for name, mutate := range map[string]func(*gatewayConfig, *rendered){
		"receiver without client CA": func(g *gatewayConfig, _ *rendered) {
			delete(get(g.cfg, "receivers::otlp::protocols::grpc::tls").(map[string]any), "client_ca_file")
		},
		"http symbolizer": func(g *gatewayConfig, _ *rendered) {
			get(g.cfg, "processors::symbolize").(map[string]any)["endpoint"] = "http://symbolizer:7070"
		},
		"no read token": func(g *gatewayConfig, _ *rendered) {
			delete(get(g.cfg, "processors::symbolize").(map[string]any), "bearer_token_file")
		},
		"queue off its volume": func(g *gatewayConfig, _ *rendered) {
			get(g.cfg, "extensions::file_storage").(map[string]any)["directory"] = "/var/queue"
		},
		"GOMEMLIMIT at the container limit": func(g *gatewayConfig, _ *rendered) {
			for i := range g.c.Env {
				if g.c.Env[i].Name == "GOMEMLIMIT" {
					g.c.Env[i].Value = "1GiB"
				}
			}
		},
		"association by connection": func(g *gatewayConfig, _ *rendered) {
			get(g.cfg, "processors::k8s_attributes").(map[string]any)["pod_association"] = []any{map[string]any{"sources": []any{map[string]any{"from": "connection"}}}}
		},
		"backend CA with insecure": func(g *gatewayConfig, _ *rendered) {
			get(g.cfg, "exporters::otlp_grpc::tls").(map[string]any)["ca_file"] = "/etc/profsym/ca/ca.crt"
		},
		"readiness on health_check": func(g *gatewayConfig, _ *rendered) {
			g.c.ReadinessProbe = g.c.LivenessProbe
			delete(get(g.cfg, "receivers::otlp::protocols::http").(map[string]any), "middlewares")
		},
		"config change does not roll the pods": func(g *gatewayConfig, _ *rendered) {
			g.configMap = "gateway-config"
			delete(g.w.pod.Annotations, "checksum/config")
		},
		"rights on secrets": func(_ *gatewayConfig, r *rendered) {
			for _, o := range r.objs {
				if cr, ok := o.(*rbacv1.ClusterRole); ok {
					cr.Rules = append(cr.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
				}
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := rendered{}
			for _, o := range base.objs {
				r.objs = append(r.objs, o.DeepCopyObject())
			}
			g, _ := gatewayConfigOf(t, r)
			mutate(&g, &r)
			ft := &failRecorder{}
			checkGatewayWith(ft, r, g)
			checkTLSWith(ft, r, g)
			if len(ft.errs) == 0 {
				t.Errorf("not reported")
			}
			t.Logf("reported: %s", strings.Join(ft.errs, "; "))
		})
	}
}
