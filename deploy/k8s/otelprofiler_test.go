package k8s_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// otelProfiler is the workload and container of collector.mode otel-ebpf-profiler: the
// OpenTelemetry eBPF profiler as the node profiler, for interpreted frames.
const otelProfiler = "otel-ebpf-profiler"

// otelProfilerValues is the chart's value set for that mode (also in chartValues).
const otelProfilerValues = "ci/otel-ebpf-profiler-values.yaml"

// otelProfilerCapabilities is what the profiler gets with otelEbpfProfiler.privileged=false,
// sorted: values.yaml's otelEbpfProfiler.capabilities.
var otelProfilerCapabilities = []string{"BPF", "DAC_READ_SEARCH", "PERFMON", "SYSLOG", "SYS_ADMIN", "SYS_PTRACE", "SYS_RESOURCE"}

// checkOtelProfilerRights holds the profiler's pod to what docs/operations.md says it takes:
// the node's PID namespace, root, a read-only root filesystem, every node; either privileged
// (the default, as its project runs it) or exactly otelProfilerCapabilities with every other
// capability dropped, no escalation and the runtime's seccomp profile; host paths read-only.
func checkOtelProfilerRights(t *testing.T, id string, spec corev1.PodSpec, sc *corev1.SecurityContext) {
	t.Helper()
	if !spec.HostPID {
		t.Errorf("%s: needs hostPID to see every process", id)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool { return t.Operator == corev1.TolerationOpExists && t.Key == "" }) {
		t.Errorf("%s: must tolerate every taint to run on every node", id)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("%s: must run as root (the image's own user is not): runAsUser %v", id, sc.RunAsUser)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: root filesystem must be read-only", id)
	}
	if sc.Privileged == nil || !*sc.Privileged {
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: not privileged, so allowPrivilegeEscalation must be false", id)
		}
		var added []string
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: not privileged, so it must drop ALL capabilities", id)
		} else {
			for _, c := range sc.Capabilities.Add {
				added = append(added, string(c))
			}
		}
		sort.Strings(added)
		if !slices.Equal(added, otelProfilerCapabilities) {
			t.Errorf("%s: capabilities %v, want exactly %v", id, added, otelProfilerCapabilities)
		}
		if spec.SecurityContext == nil || spec.SecurityContext.SeccompProfile == nil || spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: not privileged, so it must run under the runtime's default seccomp profile", id)
		}
	}
	// Tracepoints need tracefs, which nodes mount at /sys/kernel/tracing, and older ones only
	// under debugfs (/sys/kernel/debug/tracing): the container's own /sys has neither.
	for _, host := range []string{"/sys/kernel/tracing", "/sys/kernel/debug"} {
		if !slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool {
			return slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
				return vm.MountPath == host && slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
					return v.Name == vm.Name && v.HostPath != nil && v.HostPath.Path == host
				})
			})
		}) {
			t.Errorf("%s: the node's %s is not mounted at the same path: tracepoints cannot be attached on nodes whose tracefs is only there", id, host)
		}
	}
	for _, c := range spec.Containers {
		for _, vm := range c.VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name == vm.Name && v.HostPath != nil && !vm.ReadOnly {
					t.Errorf("%s: host path %s is mounted writable", id, v.HostPath.Path)
				}
			}
		}
	}
}

// checkOtelProfiler holds a rendering's profiler, if it has one, to the gateway it sends to:
// the profiles feature gate on, the "profiling" receiver in a profiles pipeline, an OTLP/gRPC
// exporter addressed to the gateway Service's OTLP/gRPC port by its cluster DNS name, TLS with
// the collectors' client certificate and the cluster CA exactly when the gateway serves TLS,
// a NetworkPolicy that lets it out to that port, and no profiling collector beside it (the
// node would be profiled twice).
func checkOtelProfiler(t *testing.T, r rendered) {
	t.Helper()
	p, ok := collectorConfigOf(t, r, otelProfiler)
	if !ok {
		return
	}
	g, ok := gatewayConfigOf(t, r)
	if !ok {
		t.Errorf("%s: the rendering has no gateway to send to", otelProfiler)
		return
	}
	checkOtelProfilerWith(t, r, p, g)
}

func checkOtelProfilerWith(t reporter, r rendered, p, g gatewayConfig) {
	if !slices.ContainsFunc(p.c.Args, func(a string) bool {
		gates, ok := strings.CutPrefix(a, "--feature-gates=")
		return ok && slices.Contains(strings.Split(gates, ","), "service.profilesSupport")
	}) {
		t.Errorf("%s: args %q do not turn on the feature gate service.profilesSupport: the Collector refuses a profiles pipeline without it", otelProfiler, p.c.Args)
	}
	if _, ok := get(p.cfg, "receivers").(map[string]any)["profiling"]; !ok {
		t.Errorf("%s: no receivers::profiling in its configuration", otelProfiler)
	}
	if recv := getStrings(p.cfg, "service::pipelines::profiles::receivers"); !slices.Contains(recv, "profiling") {
		t.Errorf("%s: the profiles pipeline's receivers %v do not include profiling", otelProfiler, recv)
	}
	exporters := p.pipelineUses("exporters", "otlp_grpc")
	if len(exporters) != 1 {
		t.Errorf("%s: profiles pipeline has OTLP/gRPC exporters %v, want one (to the gateway)", otelProfiler, exporters)
		return
	}
	if componentType(exporters[0]) != "otlp_grpc" {
		t.Errorf("%s: exporter %s: name it otlp_grpc (otlp is its deprecated alias since Collector v0.162)", otelProfiler, exporters[0])
	}
	exp := "exporters::" + exporters[0] + "::"

	// The gateway's Service and the port its OTLP/gRPC receiver is published on.
	endpoint := getString(p.cfg, exp+"endpoint")
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Errorf("%s: exporter endpoint %q is not host:port: %v", otelProfiler, endpoint, err)
		return
	}
	var svcPort int32
	for _, o := range r.objs {
		if s, ok := o.(*corev1.Service); ok && host == s.Name+"."+s.Namespace+".svc" && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(g.w.pod.Labels)) {
			for _, sp := range s.Spec.Ports {
				if sp.TargetPort.StrVal == "otlp-grpc" && port == itoa(sp.Port) {
					svcPort = sp.Port
				}
			}
		}
	}
	if svcPort == 0 {
		t.Errorf("%s: exporter endpoint %q is not <service>.<namespace>.svc:<port> of a Service of the gateway's pods publishing otlp-grpc", otelProfiler, endpoint)
	}

	// TLS as the gateway's receiver wants it.
	gwTLS := getString(g.cfg, "receivers::otlp::protocols::grpc::tls::cert_file") != ""
	insecure, _ := get(p.cfg, exp+"tls::insecure").(bool)
	files := map[string]string{}
	for _, k := range []string{"ca_file", "cert_file", "key_file"} {
		files[k] = getString(p.cfg, exp+"tls::"+k)
	}
	if gwTLS {
		if insecure {
			t.Errorf("%s: the gateway serves TLS, but the exporter is insecure", otelProfiler)
		}
		_, ca, ok := p.mountOf(files["ca_file"])
		if files["ca_file"] == "" || !ok || ca.Secret == nil || !strings.HasSuffix(ca.Secret.SecretName, "-ca") {
			t.Errorf("%s: tls::ca_file %q is not the cluster CA's Secret: the gateway's certificate would not verify", otelProfiler, files["ca_file"])
		}
		_, crt, okCrt := p.mountOf(files["cert_file"])
		_, key, okKey := p.mountOf(files["key_file"])
		if !okCrt || !okKey || crt.Secret == nil || key.Secret == nil || crt.Secret.SecretName != key.Secret.SecretName ||
			filepath.Base(files["cert_file"]) != "tls.crt" || filepath.Base(files["key_file"]) != "tls.key" {
			t.Errorf("%s: the gateway admits senders by certificate (client_ca_file), but tls::cert_file %q and key_file %q are not one kubernetes.io/tls Secret's", otelProfiler, files["cert_file"], files["key_file"])
		}
	} else {
		if !insecure {
			t.Errorf("%s: the gateway serves plain gRPC, but the exporter does not set tls::insecure: it would try TLS", otelProfiler)
		}
		for k, v := range files {
			if v != "" {
				t.Errorf("%s: tls::%s %q set while the gateway serves plain gRPC: the exporter would speak TLS", otelProfiler, k, v)
			}
		}
	}

	// Its NetworkPolicy lets it reach the gateway's pods on that port.
	out := false
	for _, o := range r.objs {
		np, ok := o.(*networkingv1.NetworkPolicy)
		if !ok || np.Namespace != p.w.namespace || !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(p.w.pod.Labels)) {
			continue
		}
		for _, rule := range np.Spec.Egress {
			to := len(rule.To) == 0
			for _, peer := range rule.To {
				if peer.NamespaceSelector != nil && peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == g.w.namespace &&
					peer.PodSelector != nil && labels.SelectorFromSet(peer.PodSelector.MatchLabels).Matches(labels.Set(g.w.pod.Labels)) {
					to = true
				}
			}
			for _, rp := range rule.Ports {
				if to && rp.Port != nil && itoa(rp.Port.IntVal) == port {
					out = true
				}
			}
		}
	}
	if !out {
		t.Errorf("%s: no NetworkPolicy lets it out to the gateway's pods on %s", otelProfiler, port)
	}

	for _, w := range workloads(r) {
		for _, c := range w.pod.Spec.Containers {
			if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--gateway=") }) {
				t.Errorf("%s/%s profiles beside the OpenTelemetry eBPF profiler: every node would be profiled twice", w.name, c.Name)
			}
		}
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// gatewayCollectorRelease is the OpenTelemetry Collector release the gateway is built on
// (services/gateway/go.mod's otlpreceiver, the receiver that decodes what the profiler sends),
// without the "v".
func gatewayCollectorRelease(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "services", "gateway", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*go\.opentelemetry\.io/collector/receiver/otlpreceiver v(\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("services/gateway/go.mod requires no go.opentelemetry.io/collector/receiver/otlpreceiver")
	}
	return string(m[1])
}

func daemonSet(r rendered, name string) *appsv1.DaemonSet {
	for _, o := range r.objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok && ds.Name == name {
			return ds
		}
	}
	return nil
}

// otelProfilerVariants are renderings of mode otel-ebpf-profiler beyond the ci/ value file.
var otelProfilerVariants = map[string][]string{
	"ci values":        nil,
	"plain gRPC":       {"--set", "tls.enabled=false"},
	"no uploads":       {"--set", "otelEbpfProfiler.uploadBinaries=false"},
	"capabilities":     {"--set", "otelEbpfProfiler.privileged=false"},
	"arm64 nodes only": {"--set", "architectures={arm64}"},
}

// TestHelmChartOtelEbpfProfiler: collector.mode otel-ebpf-profiler deploys the OpenTelemetry
// eBPF profiler, sending to the gateway as checkOtelProfiler requires, on the image the
// values pin (the gateway's own Collector release), with profsym's collector beside it in
// upload-only mode unless otelEbpfProfiler.uploadBinaries is off; every variant passes the
// chart's other checks; a value merged into its configuration changes the pods' checksum; an
// unpinned tag is refused.
func TestHelmChartOtelEbpfProfiler(t *testing.T) {
	helm := helmBinary(t)
	release := gatewayCollectorRelease(t)
	for name, extra := range otelProfilerVariants {
		t.Run(name, func(t *testing.T) {
			r := helmTemplate(t, helm, otelProfilerValues, extra...)
			ds := daemonSet(r, otelProfiler)
			if ds == nil {
				t.Fatalf("no DaemonSet %s", otelProfiler)
			}
			c := ds.Spec.Template.Spec.Containers[0]
			if want := "otel/opentelemetry-collector-ebpf-profiler:" + release; c.Image != want {
				t.Errorf("image %s, want %s: the profiler's Collector release should be the gateway's, so both agree on the development OTLP profiles encoding", c.Image, want)
			}
			up := daemonSet(r, "collector")
			if name == "no uploads" {
				if up != nil {
					t.Errorf("otelEbpfProfiler.uploadBinaries=false still deploys DaemonSet collector")
				}
			} else if up == nil || !slices.Contains(up.Spec.Template.Spec.Containers[0].Args, "--upload-only") {
				t.Errorf("no collector in upload-only mode beside the profiler: the node's binaries never reach the store")
			}
			hasClass := false
			for _, o := range r.objs {
				if pc, ok := o.(*schedulingv1.PriorityClass); ok && pc.Name == ds.Spec.Template.Spec.PriorityClassName {
					hasClass = true
				}
			}
			if !hasClass {
				t.Errorf("PriorityClass %q of the profiler's pods is not in the rendering", ds.Spec.Template.Spec.PriorityClassName)
			}
			checkOtelProfiler(t, r)
			checkSelectors(t, r)
			checkPods(t, "helm", r)
			checkRBAC(t, r)
			checkTLS(t, r)
			checkFlags(t, r)
			for _, p := range namespaceLevels(r.objs) {
				t.Error(p)
			}
			for _, p := range secretsOnArgv(r.objs) {
				t.Error(p)
			}
			want := nodeArchitectures
			if name == "arm64 nodes only" {
				want = []string{"arm64"}
			}
			checkArchitectures(t, r, want)
		})
	}

	t.Run("config merged", func(t *testing.T) {
		def := helmTemplate(t, helm, otelProfilerValues)
		merged := helmTemplate(t, helm, otelProfilerValues, "--set-json", `otelEbpfProfiler.config={"receivers":{"profiling":{"samples_per_second":97}}}`)
		mp, _ := collectorConfigOf(t, merged, otelProfiler)
		dp, _ := collectorConfigOf(t, def, otelProfiler)
		if v, _ := get(mp.cfg, "receivers::profiling::samples_per_second").(float64); v != 97 {
			t.Errorf("otelEbpfProfiler.config did not set receivers::profiling::samples_per_second: %v", get(mp.cfg, "receivers::profiling::samples_per_second"))
		}
		checkOtelProfiler(t, merged)
		if a, b := dp.w.pod.Annotations["checksum/config"], mp.w.pod.Annotations["checksum/config"]; a == "" || a == b {
			t.Errorf("checksum/config %q does not follow the configuration (%q after a change)", a, b)
		}
	})

	// The profiler samples at collector.frequency, not at its own 20 Hz, whose samples fall at
	// two points only of a CPU-limited container's 100 ms period.
	t.Run("sampling frequency", func(t *testing.T) {
		for _, tt := range []struct {
			extra []string
			want  float64
		}{
			{nil, 19},
			{[]string{"--set", "collector.frequency=99"}, 99},
		} {
			p, _ := collectorConfigOf(t, helmTemplate(t, helm, otelProfilerValues, tt.extra...), otelProfiler)
			if v, _ := get(p.cfg, "receivers::profiling::samples_per_second").(float64); v != tt.want {
				t.Errorf("%v: receivers::profiling::samples_per_second %v, want %v", tt.extra, get(p.cfg, "receivers::profiling::samples_per_second"), tt.want)
			}
		}
	})

	t.Run("refuses latest", func(t *testing.T) {
		for _, tag := range []string{"latest", `""`} {
			out, err := exec.CommandContext(t.Context(), helm, "template", "profsym", chart, "-f", filepath.Join(chart, otelProfilerValues),
				"--set-string", "otelEbpfProfiler.image.tag="+strings.Trim(tag, `"`)).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "otelEbpfProfiler.image.tag") {
				t.Errorf("tag %s: helm template did not refuse it naming the value (err %v)\n%s", tag, err, out)
			}
		}
	})
}

// TestOtelProfilerChecksHaveTeeth: the checks above fail on the defects they exist for: a
// profiler sending in plain text to a TLS gateway, to the wrong port or name, without the
// feature gate, or beside a profiling collector.
func TestOtelProfilerChecksHaveTeeth(t *testing.T) {
	helm := helmBinary(t)
	check := func(r rendered) []string {
		p, _ := collectorConfigOf(t, r, otelProfiler)
		g, _ := gatewayConfigOf(t, r)
		var rec failRecorder
		checkOtelProfilerWith(&rec, r, p, g)
		return rec.errs
	}
	if errs := check(helmTemplate(t, helm, otelProfilerValues)); len(errs) > 0 {
		t.Fatalf("the chart's own rendering fails: %q", errs)
	}
	for name, extra := range map[string][]string{
		"plain text to a TLS gateway": {"--set-json", `otelEbpfProfiler.config={"exporters":{"otlp_grpc":{"tls":{"insecure":true,"ca_file":"","cert_file":"","key_file":""}}}}`},
		"wrong port":                  {"--set-json", `otelEbpfProfiler.config={"exporters":{"otlp_grpc":{"endpoint":"gateway.profsym.svc:4318"}}}`},
		"not the gateway's name":      {"--set-json", `otelEbpfProfiler.config={"exporters":{"otlp_grpc":{"endpoint":"gateway:4317"}}}`},
		"TLS to a plain gateway":      {"--set", "tls.enabled=false", "--set-json", `otelEbpfProfiler.config={"exporters":{"otlp_grpc":{"tls":{"insecure":false,"ca_file":"/etc/ssl/ca.crt"}}}}`},
	} {
		t.Run(name, func(t *testing.T) {
			if errs := check(helmTemplate(t, helm, otelProfilerValues, extra...)); len(errs) == 0 {
				t.Errorf("checkOtelProfiler passed a profiler with %s", name)
			} else {
				t.Logf("reported: %q", errs)
			}
		})
	}
	r := helmTemplate(t, helm, otelProfilerValues)
	for _, o := range r.objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			c := &ds.Spec.Template.Spec.Containers[0]
			switch ds.Name {
			case otelProfiler:
				c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--feature-gates=") })
			case "collector":
				c.Args = append(c.Args, "--gateway=gateway.profsym.svc:4317")
			}
		}
	}
	if errs := check(r); len(errs) != 2 {
		t.Errorf("no feature gate and a profiling collector beside the profiler: reported %q, want both", errs)
	}
}

// TestHelmChartOtelEbpfProfilerServerSideDryRun: every variant of the mode is admitted by a
// real kube-apiserver (the ci/ values are dry-run with the others in
// TestHelmChartServerSideDryRun), the profiler's pods by PodSecurity in the collector's
// namespace, privileged or with capabilities; and they would be refused in the services'
// namespace, which enforces "restricted".
func TestHelmChartOtelEbpfProfilerServerSideDryRun(t *testing.T) {
	helm := helmBinary(t)
	c := apiServer(t)
	for name, extra := range otelProfilerVariants {
		t.Run(name, func(t *testing.T) {
			r := helmTemplate(t, helm, otelProfilerValues, extra...)
			serverDryRun(t, c, r.objs)
			for _, w := range workloads(r) {
				if w.name != otelProfiler {
					continue
				}
				moved := w
				moved.namespace = "profsym"
				if err := c.dryRunPod(t.Context(), moved); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
					t.Errorf("the profiler's pod admitted in the restricted namespace (err %v)", err)
				}
			}
		})
	}
}
