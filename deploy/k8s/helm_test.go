package k8s_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const chart = "../helm/profsym"

// chartValues are the value sets the chart is tested with: its defaults and the files in ci/.
var chartValues = []string{"", "ci/production-values.yaml", "ci/upload-only-values.yaml", "ci/in-cluster-values.yaml", "ci/no-k8s-attributes-values.yaml", otelProfilerValues}

// helmBinary finds the pinned helm .ci/install-deps installs.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := helmBinaryIfAny(); p != "" {
		return p
	}
	requireOrSkip(t, "helm (GOBIN=$HOME/.cache/profsym/bin go install helm.sh/helm/v3/cmd/helm@v3.21.4)")
	return ""
}

// helmBinaryIfAny is helmBinary for tests that check more than the chart: "" without helm.
func helmBinaryIfAny() string {
	if p := os.Getenv("PROFSYM_HELM"); p != "" {
		return p
	}
	dir := os.Getenv("PROFSYM_TOOLS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "profsym", "bin")
	}
	if p := filepath.Join(dir, "helm"); isFile(p) {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func helmTemplate(t *testing.T, helm, values string, extra ...string) rendered {
	t.Helper()
	args := []string{"template", "profsym", chart}
	if values != "" {
		args = append(args, "-f", filepath.Join(chart, values))
	}
	args = append(args, extra...)
	out, err := exec.CommandContext(t.Context(), helm, args...).Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return decode(t, "helm template "+values, out)
}

func chartName(values string) string {
	if values == "" {
		return "defaults"
	}
	return strings.TrimSuffix(filepath.Base(values), "-values.yaml")
}

// TestHelmChart lints the chart and holds its renderings to the rules the kustomize overlays
// follow (the same checks, one source of truth for what both promise).
func TestHelmChart(t *testing.T) {
	helm := helmBinary(t)
	for _, v := range chartValues {
		args := []string{"lint", "--strict", chart}
		if v != "" {
			args = append(args, "-f", filepath.Join(chart, v))
		}
		if out, err := exec.CommandContext(t.Context(), helm, args...).CombinedOutput(); err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, v := range chartValues {
		t.Run(chartName(v), func(t *testing.T) {
			r := helmTemplate(t, helm, v)
			checkSelectors(t, r)
			checkPods(t, "helm", r)
			checkRBAC(t, r)
			checkTLS(t, r)
			checkGateway(t, r)
			checkFlags(t, r)
			checkOtelProfiler(t, r)
			for _, p := range secretsOnArgv(r.objs) {
				t.Error(p)
			}
			for _, p := range namespaceLevels(r.objs) {
				t.Error(p)
			}
			for _, p := range redisEgress(r.objs, nil) {
				t.Error(p)
			}
			for _, p := range gatewayFlows(t, r.objs) {
				t.Error(p)
			}
		})
	}
}

// The chart refuses values that would deploy a gateway that exits or a Redis password on the
// command line, at template time.
func TestHelmChartRefusesBrokenValues(t *testing.T) {
	helm := helmBinary(t)
	for name, set := range map[string][]string{
		"no exporter":                      {"gateway.files.enabled=false"},
		"password in URL":                  {"symbolizer.redis.mode=external", "symbolizer.redis.url=redis://:secret@redis:6379/0"},
		"unknown collector":                {"collector.mode=sometimes"},
		"one RWO volume, many symbolizers": {"symbolizer.storage.persistence.enabled=true"},
		"unknown Redis mode":               {"symbolizer.redis.mode=sometimes"},
		"reads without a token":            {"symbolizer.readTokenSecret="},
	} {
		args := []string{"template", "profsym", chart}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := exec.CommandContext(t.Context(), helm, args...).CombinedOutput(); err == nil {
			t.Errorf("%s: helm template succeeded\n%s", name, out)
		}
	}
}

func TestHelmChartServerSideDryRun(t *testing.T) {
	helm := helmBinary(t)
	c := apiServer(t)
	for _, v := range chartValues {
		t.Run(chartName(v), func(t *testing.T) {
			serverDryRun(t, c, helmTemplate(t, helm, v).objs)
		})
	}
}

func TestHelmChartContainersStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MinIO, Redis and every service")
	}
	helm := helmBinary(t)
	for _, v := range chartValues {
		t.Run(chartName(v), func(t *testing.T) {
			startAll(t, helmTemplate(t, helm, v).objs)
		})
	}
}

// TestHelmChartGatewayValues: gateway.config is merged over the generated configuration (a key
// changed, the others kept), a changed configuration changes the pods' checksum annotation, and
// gateway.k8sAttributes.enabled=false takes the processor, the token and the RBAC away.
func TestHelmChartGatewayValues(t *testing.T) {
	helm := helmBinary(t)
	def := helmTemplate(t, helm, "")
	merged := helmTemplate(t, helm, "", "--set-json", `gateway.config={"processors":{"symbolize":{"deadline":"2s"}},"service":{"telemetry":{"logs":{"level":"debug"}}}}`)
	dg, _ := gatewayConfigOf(t, def)
	mg, _ := gatewayConfigOf(t, merged)
	if got := getString(mg.cfg, "processors::symbolize::deadline"); got != "2s" {
		t.Errorf("gateway.config did not set processors::symbolize::deadline: %q", got)
	}
	if got := getString(mg.cfg, "service::telemetry::logs::level"); got != "debug" {
		t.Errorf("gateway.config did not set service::telemetry::logs::level: %q", got)
	}
	if got := getString(mg.cfg, "processors::symbolize::bearer_token_file"); got == "" {
		t.Errorf("gateway.config replaced processors::symbolize instead of merging into it")
	}
	if dg.w.pod.Annotations["checksum/config"] == mg.w.pod.Annotations["checksum/config"] || dg.w.pod.Annotations["checksum/config"] == "" {
		t.Errorf("checksum/config %q does not follow the configuration (%q after a change)", dg.w.pod.Annotations["checksum/config"], mg.w.pod.Annotations["checksum/config"])
	}
	checkGateway(t, merged)

	off := helmTemplate(t, helm, "", "--set", "gateway.k8sAttributes.enabled=false")
	og, _ := gatewayConfigOf(t, off)
	if len(og.pipelineUses("processors", "k8s_attributes")) > 0 {
		t.Errorf("gateway.k8sAttributes.enabled=false still runs k8s_attributes")
	}
	if n := len(rightsOf(off, og.w.namespace, "gateway")); n > 0 {
		t.Errorf("gateway.k8sAttributes.enabled=false still grants %d rights", n)
	}
	checkGateway(t, off)
	checkRBAC(t, off)
}
