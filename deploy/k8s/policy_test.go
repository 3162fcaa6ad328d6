package k8s_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestPolicies checks, for every overlay, the rules that keep secrets, namespaces and network
// policy in line with the configuration.
func TestPolicies(t *testing.T) {
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			objs := build(t, overlay).objs
			for _, p := range secretsOnArgv(objs) {
				t.Error(p)
			}
			for _, p := range namespaceLevels(objs) {
				t.Error(p)
			}
			for _, p := range redisEgress(objs, nil) {
				t.Error(p)
			}
			for _, p := range gatewayFlows(t, objs) {
				t.Error(p)
			}
			for _, p := range uploadFlows(objs) {
				t.Error(p)
			}
		})
	}
}

// uploadFlows: a collector that uploads to a symbolizer on S3 PUTs each file to the store, at
// the URL the symbolizer signs: the collector's NetworkPolicy must let it out to the store's
// port, and an in-cluster store's policy must let it in.
func uploadFlows(objs []runtime.Object) []string {
	var collector, store *workload
	var endpoint string
	insecure := false
	for _, w := range workloads(rendered{objs: objs}) {
		for _, c := range w.pod.Spec.Containers {
			switch w.name {
			case "collector":
				if slices.Contains(c.Args, "--upload-only") || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--upload-debuginfo") }) {
					collector = &w
				}
			case "symbolizer":
				for _, e := range c.Env {
					switch e.Name {
					case "SYMBOLIZER_S3_ENDPOINT":
						endpoint = e.Value
					case "SYMBOLIZER_S3_INSECURE":
						insecure = e.Value == "true"
					}
				}
			case "minio":
				store = &w
			}
		}
	}
	if collector == nil || endpoint == "" {
		return nil
	}
	hostport := endpoint
	if _, rest, ok := strings.Cut(hostport, "://"); ok {
		hostport = rest
	}
	hostport, _, _ = strings.Cut(hostport, "/")
	port := 443
	if insecure {
		port = 80
	}
	if _, p, err := net.SplitHostPort(hostport); err == nil {
		port, _ = strconv.Atoi(p)
	}
	allows := func(ports []networkingv1.NetworkPolicyPort) bool {
		return len(ports) == 0 || slices.ContainsFunc(ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.IntVal == int32(port) })
	}
	var problems []string
	out, in := false, store == nil
	for _, o := range objs {
		np, ok := o.(*networkingv1.NetworkPolicy)
		if !ok {
			continue
		}
		sel := labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels)
		if np.Namespace == collector.namespace && sel.Matches(labels.Set(collector.pod.Labels)) {
			out = out || slices.ContainsFunc(np.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool { return allows(r.Ports) })
		}
		if store != nil && np.Namespace == store.namespace && sel.Matches(labels.Set(store.pod.Labels)) {
			for _, r := range np.Spec.Ingress {
				for _, peer := range r.From {
					nsOK := peer.NamespaceSelector == nil && np.Namespace == collector.namespace ||
						peer.NamespaceSelector != nil && labels.SelectorFromSet(peer.NamespaceSelector.MatchLabels).Matches(labels.Set{"kubernetes.io/metadata.name": collector.namespace})
					podOK := peer.PodSelector == nil || labels.SelectorFromSet(peer.PodSelector.MatchLabels).Matches(labels.Set(collector.pod.Labels))
					in = in || nsOK && podOK && allows(r.Ports)
				}
			}
		}
	}
	if !out {
		problems = append(problems, fmt.Sprintf("the collector uploads to the store at %s: its NetworkPolicy does not allow egress to port %d", endpoint, port))
	}
	if !in {
		problems = append(problems, fmt.Sprintf("the collector uploads to the in-cluster store at %s: the store's NetworkPolicy does not admit it", endpoint))
	}
	return problems
}

// gatewayFlows: the gateway's NetworkPolicy admits what its configuration listens on (OTLP from
// anyone, /metrics from scrapers) and lets out what it calls: the symbolizer's and the
// backends' ports as its configuration resolves them, and the Kubernetes API when it runs
// k8s_attributes.
func gatewayFlows(t *testing.T, objs []runtime.Object) []string {
	t.Helper()
	g, ok := gatewayConfigOf(t, rendered{objs: objs})
	if !ok {
		return nil
	}
	var np *networkingv1.NetworkPolicy
	for _, o := range objs {
		if p, ok := o.(*networkingv1.NetworkPolicy); ok && labels.SelectorFromSet(p.Spec.PodSelector.MatchLabels).Matches(labels.Set(g.w.pod.Labels)) {
			np = p
		}
	}
	if np == nil {
		return []string{"gateway: no NetworkPolicy"}
	}
	ingress := map[int32]bool{}
	scrape := map[int32]bool{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port == nil {
				continue
			}
			if len(rule.From) == 0 {
				ingress[p.Port.IntVal] = true
			}
			for _, f := range rule.From {
				if f.NamespaceSelector != nil && f.NamespaceSelector.MatchLabels["profsym.dev/metrics-scraper"] == "true" {
					scrape[p.Port.IntVal] = true
				}
			}
		}
	}
	egress := map[int32]bool{}
	for _, rule := range np.Spec.Egress {
		for _, p := range rule.Ports {
			if p.Port != nil {
				egress[p.Port.IntVal] = true
			}
		}
	}
	port := func(endpoint string) int32 {
		endpoint = g.resolve(endpoint)
		if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
			endpoint = u.Host
		}
		_, p, err := net.SplitHostPort(endpoint)
		if err != nil {
			return -1
		}
		n, _ := strconv.Atoi(p)
		return int32(n)
	}
	var problems []string
	for _, proto := range []string{"grpc", "http"} {
		ep := getString(g.cfg, "receivers::otlp::protocols::"+proto+"::endpoint")
		if p := port(ep); !ingress[p] {
			problems = append(problems, fmt.Sprintf("gateway: OTLP/%s listens on %s, which the NetworkPolicy does not admit from OTLP senders", proto, ep))
		}
	}
	if p := ports(g.c)["metrics"]; !scrape[p] {
		problems = append(problems, fmt.Sprintf("gateway: /metrics on %d is not open to scrapers", p))
	}
	if ep := getString(g.cfg, "processors::symbolize::endpoint"); !egress[port(ep)] {
		problems = append(problems, "gateway: the symbolizer at "+g.resolve(ep)+" is not in the NetworkPolicy's egress")
	}
	for _, id := range append(g.pipelineUses("exporters", "otlp_grpc"), g.pipelineUses("exporters", "otlp_http")...) {
		ep := getString(g.cfg, "exporters::"+id+"::endpoint")
		if !egress[port(ep)] {
			problems = append(problems, "gateway: exporter "+id+" sends to "+g.resolve(ep)+", a port the NetworkPolicy's egress does not allow")
		}
	}
	if len(g.pipelineUses("processors", "k8s_attributes")) > 0 && (!egress[443] || !egress[6443]) {
		problems = append(problems, "gateway: k8s_attributes needs the Kubernetes API (443 through the kubernetes Service, 6443 at most API servers), which the NetworkPolicy's egress does not allow")
	}
	return problems
}

func ports(c corev1.Container) map[string]int32 {
	m := map[string]int32{}
	for _, p := range c.Ports {
		m[p.Name] = p.ContainerPort
	}
	return m
}

// secretsOnArgv finds secrets on a command line, which every process sharing the node's PID
// namespace (the collector, with hostPID) can read from /proc/<pid>/cmdline: a $(VAR) in args
// or command whose VAR comes from a Secret, and passwords written into URLs.
func secretsOnArgv(objs []runtime.Object) []string {
	var problems []string
	userinfo := regexp.MustCompile(`://[^/@\s]*:[^/@\s]+@`)
	for _, w := range workloads(rendered{objs: objs}) {
		for _, c := range slices.Concat(w.pod.Spec.InitContainers, w.pod.Spec.Containers) {
			secret := map[string]bool{}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					secret[e.Name] = true
				}
			}
			for _, a := range slices.Concat(c.Command, c.Args) {
				for _, m := range envRef.FindAllStringSubmatch(a, -1) {
					if secret[m[1]] {
						problems = append(problems, w.name+"/"+c.Name+": "+a+" puts Secret-backed $"+m[1]+" on the command line; pass it by file or environment")
					}
				}
				if userinfo.MatchString(a) {
					problems = append(problems, w.name+"/"+c.Name+": "+a+" has a password in a URL on the command line")
				}
			}
		}
	}
	return problems
}

// namespaceLevels: the collector's namespace enforces PodSecurity "privileged" and holds nothing
// but the collector; every other workload is in a namespace that enforces "restricted".
func namespaceLevels(objs []runtime.Object) []string {
	levels := map[string]string{}
	for _, o := range objs {
		if ns, ok := o.(*corev1.Namespace); ok {
			levels[ns.Name] = ns.Labels["pod-security.kubernetes.io/enforce"]
		}
	}
	var problems []string
	for _, w := range workloads(rendered{objs: objs}) {
		level, ok := levels[w.namespace]
		switch {
		case !ok:
			problems = append(problems, w.kind+" "+w.name+": namespace "+strconv.Quote(w.namespace)+" is not part of the rendering")
		case w.pod.Spec.HostPID && level != "privileged":
			problems = append(problems, w.kind+" "+w.name+": needs hostPID, but namespace "+w.namespace+" enforces "+strconv.Quote(level))
		case !w.pod.Spec.HostPID && level != "restricted":
			problems = append(problems, w.kind+" "+w.name+": namespace "+w.namespace+" enforces "+strconv.Quote(level)+"; it must be \"restricted\" (only the collector gets a privileged namespace)")
		}
	}
	return problems
}

var redisURL = regexp.MustCompile(`rediss?(\+cluster|\+sentinel)?://[^\s'"` + "`" + `]+`)

// redisEgress: every Redis URL the rendering configures (args, env values, ConfigMaps) and
// every one in extra (the docs' examples) has its port allowed by the symbolizer's egress.
func redisEgress(objs []runtime.Object, extra []string) []string {
	var urls []string
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.ConfigMap:
			for _, v := range x.Data {
				urls = append(urls, redisURL.FindAllString(v, -1)...)
			}
		}
	}
	for _, w := range workloads(rendered{objs: objs}) {
		for _, c := range w.pod.Spec.Containers {
			for _, a := range c.Args {
				urls = append(urls, redisURL.FindAllString(a, -1)...)
			}
			for _, e := range c.Env {
				urls = append(urls, redisURL.FindAllString(e.Value, -1)...)
			}
		}
	}
	urls = append(urls, extra...)
	allowed := map[int32]bool{}
	for _, o := range objs {
		np, ok := o.(*networkingv1.NetworkPolicy)
		if !ok || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != "symbolizer" {
			continue
		}
		for _, rule := range np.Spec.Egress {
			for _, p := range rule.Ports {
				if p.Port != nil {
					allowed[p.Port.IntVal] = true
				}
			}
		}
	}
	var problems []string
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			problems = append(problems, raw+": "+err.Error())
			continue
		}
		port := 6379
		if p := u.Port(); p != "" {
			port, _ = strconv.Atoi(p)
		}
		if !allowed[int32(port)] {
			problems = append(problems, "Redis at "+raw+": the symbolizer's NetworkPolicy does not allow egress to port "+strconv.Itoa(port))
		}
	}
	return problems
}

// The operations guide's Redis examples must be reachable under the production policy.
func TestDocsRedisPortsAllowed(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	examples := redisURL.FindAllString(string(doc), -1)
	if len(examples) == 0 {
		t.Fatal("docs/operations.md shows no Redis URL; the check below would prove nothing")
	}
	for _, p := range redisEgress(build(t, "production").objs, examples) {
		t.Error(p)
	}
}

// The checks above must be able to fail: the production overlay as it once was (Redis URL from
// a Secret expanded into args; the collector in the services' namespace; Redis on 6380 with
// egress to 6379 only) trips each.
func TestPolicyChecksCatchKnownDefects(t *testing.T) {
	objs := build(t, "production").objs
	var bad []runtime.Object
	for _, o := range objs {
		bad = append(bad, o.DeepCopyObject())
	}
	mutateWorkload(bad, "symbolizer", func(pod *corev1.PodSpec, ns *string) {
		c := &pod.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "REDIS_URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "profsym-redis"}, Key: "url"}}})
		c.Args = append(c.Args, "--redis-url=$(REDIS_URL)")
	})
	mutateWorkload(bad, "collector", func(_ *corev1.PodSpec, ns *string) { *ns = "profsym" })
	if p := secretsOnArgv(bad); len(p) == 0 {
		t.Error("a Secret-backed $(REDIS_URL) in args was not reported")
	}
	if p := namespaceLevels(bad); len(p) == 0 {
		t.Error("the collector in the restricted namespace was not reported")
	}
	if p := redisEgress(objs, []string{"rediss://redis.example.internal:6390/0"}); len(p) == 0 {
		t.Error("Redis on a port the policy does not allow was not reported")
	}
	// The gateway: a backend on a port the policy does not open, and no way to the API server.
	var gw []runtime.Object
	for _, o := range objs {
		o = o.DeepCopyObject()
		switch x := o.(type) {
		case *appsv1.Deployment:
			for i := range x.Spec.Template.Spec.Containers {
				c := &x.Spec.Template.Spec.Containers[i]
				for j := range c.Env {
					if c.Env[j].Name == "PROFSYM_OTLP_ENDPOINT" {
						c.Env[j].Value = strings.Replace(c.Env[j].Value, ":4317", ":4319", 1)
					}
				}
			}
		case *networkingv1.NetworkPolicy:
			for i := range x.Spec.Egress {
				x.Spec.Egress[i].Ports = slices.DeleteFunc(x.Spec.Egress[i].Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.IntVal == 6443 })
			}
		}
		gw = append(gw, o)
	}
	// The node-side uploader: no way out to the store, and the store's door closed to it.
	var up []runtime.Object
	for _, o := range build(t, "upload-only").objs {
		o = o.DeepCopyObject()
		if np, ok := o.(*networkingv1.NetworkPolicy); ok {
			switch np.Name {
			case "collector":
				np.Spec.Egress = slices.DeleteFunc(np.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
					return slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.IntVal == 9000 })
				})
			case "minio":
				np.Spec.Ingress = np.Spec.Ingress[:0]
			}
		}
		up = append(up, o)
	}
	if p := uploadFlows(up); len(p) != 2 {
		t.Errorf("an uploader with no way to the store: reported %q, want both directions", p)
	}
	if p := gatewayFlows(t, gw); len(p) != 2 {
		t.Errorf("a backend on 4319 and no egress to 6443: reported %q, want both", p)
	}
}

func mutateWorkload(objs []runtime.Object, name string, f func(*corev1.PodSpec, *string)) {
	for _, o := range objs {
		switch w := o.(type) {
		case *appsv1.Deployment:
			if w.Name == name {
				f(&w.Spec.Template.Spec, &w.Namespace)
			}
		case *appsv1.DaemonSet:
			if w.Name == name {
				f(&w.Spec.Template.Spec, &w.Namespace)
			}
		}
	}
}
