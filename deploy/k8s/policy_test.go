package k8s_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
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
		})
	}
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
