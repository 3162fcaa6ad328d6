package k8s_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// offCPUArgs are the collector's off-CPU arguments in a rendering, in order.
func offCPUArgs(t *testing.T, r rendered) []string {
	t.Helper()
	ds := daemonSet(r, "collector")
	if ds == nil {
		t.Fatal("no DaemonSet collector")
	}
	var out []string
	for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--off-cpu") {
			out = append(out, a)
		}
	}
	return out
}

// TestHelmChartOffCPU: collector.offCPU passes --off-cpu and its two settings to the profiling
// collector only when enabled (never by default, never in upload-only mode, where nothing is
// sampled), the collector binary accepts them (checkFlags runs its --help), and a probability
// outside (0, 1] or a minBlocked that is not a Go duration is refused at template time, naming
// the value. Outside -short the rendering with off-CPU on is started (startAll).
func TestHelmChartOffCPU(t *testing.T) {
	helm := helmBinary(t)
	for _, v := range chartValues {
		if got := offCPUArgsIfAny(helmTemplate(t, helm, v)); len(got) > 0 {
			t.Errorf("%s: off-CPU arguments %q without collector.offCPU.enabled", chartName(v), got)
		}
	}
	on := helmTemplate(t, helm, "", "--set", "collector.offCPU.enabled=true", "--set", "collector.offCPU.probability=0.05", "--set", "collector.offCPU.minBlocked=5ms")
	want := []string{"--off-cpu", "--off-cpu-probability=0.05", "--off-cpu-min-blocked=5ms"}
	if got := offCPUArgs(t, on); !slices.Equal(got, want) {
		t.Errorf("collector.offCPU enabled: args %q, want %q", got, want)
	}
	checkFlags(t, on)
	checkPods(t, "helm", on)
	if !testing.Short() {
		// The collector starts with them on this kernel and becomes ready (the BTF tracepoint
		// and task storage load), with the gateway and symbolizer of the same rendering.
		t.Run("start", func(t *testing.T) { startAll(t, on.objs) })
	}

	def := helmTemplate(t, helm, "", "--set", "collector.offCPU.enabled=true")
	if got, want := offCPUArgs(t, def), []string{"--off-cpu", "--off-cpu-probability=0.01", "--off-cpu-min-blocked=1ms"}; !slices.Equal(got, want) {
		t.Errorf("collector.offCPU enabled with its defaults: args %q, want %q (the collector's own defaults)", got, want)
	}

	for _, v := range []string{"ci/upload-only-values.yaml", otelProfilerValues} {
		r := helmTemplate(t, helm, v, "--set", "collector.offCPU.enabled=true")
		if got := offCPUArgsIfAny(r); len(got) > 0 {
			t.Errorf("%s: off-CPU arguments %q given to a collector that samples nothing", chartName(v), got)
		}
	}

	for name, set := range map[string][]string{
		"probability 0":         {"collector.offCPU.probability=0"},
		"probability above 1":   {"collector.offCPU.probability=1.5"},
		"minBlocked not a time": {"collector.offCPU.minBlocked=5"},
		"minBlocked a negative": {"collector.offCPU.minBlocked=-1ms"},
	} {
		args := []string{"template", "profsym", chart, "--set", "collector.offCPU.enabled=true"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := exec.CommandContext(t.Context(), helm, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "collector.offCPU.") {
			t.Errorf("%s: helm template did not refuse it naming the value (err %v)\n%s", name, err, out)
		}
	}
}

func offCPUArgsIfAny(r rendered) []string {
	var out []string
	for _, o := range r.objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			for _, c := range ds.Spec.Template.Spec.Containers {
				for _, a := range c.Args {
					if strings.HasPrefix(a, "--off-cpu") {
						out = append(out, ds.Name+": "+a)
					}
				}
			}
		}
	}
	return out
}

// TestOverlaysOffCPUOff: off-CPU profiles hook every context switch, so no kustomize overlay
// turns them on (they are rendered from the chart's collector.offCPU, off by default; an
// overlay of yours adds the three arguments TestHelmChartOffCPU checks the collector accepts).
func TestOverlaysOffCPUOff(t *testing.T) {
	for _, overlay := range overlays {
		if got := offCPUArgsIfAny(build(t, overlay)); len(got) > 0 {
			t.Errorf("overlays/%s turns off-CPU profiles on: %q", overlay, got)
		}
	}
}
