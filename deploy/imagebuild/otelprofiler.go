package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/profsym/profsym/pkg/ociimage"
)

// OtelProfilerDir is the Go module of the OpenTelemetry eBPF profiler's Collector distribution
// (its main package and the pinned versions of the profiler and the Collector, in its go.mod).
const OtelProfilerDir = "deploy/imagebuild/otelcol-ebpf-profiler"

const (
	otelProfilerModule = "go.opentelemetry.io/ebpf-profiler"
	otelcolModule      = "go.opentelemetry.io/collector/otelcol"
	// otelProfilerBinary is the upstream image's entrypoint.
	otelProfilerBinary = "/otelcol-ebpf-profiler"
)

// otelProfiler builds the image the chart's collector.mode otel-ebpf-profiler runs
// (otelEbpfProfiler.image), under that name: the distribution of OtelProfilerDir, static, on
// the distroless stand-in, its entrypoint as upstream's. The image's tag must be the Collector
// release the module builds with: the chart pins the profiler to the gateway's release.
//
// The profiler's package rlimit is replaced by the module's memlock/rlimit.go (the profiler's
// module is copied out of the module cache and the build's go.mod, a copy, replaces the module
// with it): the profiler stops when it may not raise RLIMIT_MEMLOCK to infinity, which needs
// CAP_SYS_RESOURCE even where the kernel charges BPF memory to the memory cgroup (Linux 5.11+)
// and the limit does not matter; the replacement goes on there.
func (b *builder) otelProfiler(arch, name string) (v1.Image, error) {
	if name == "" {
		return nil, fmt.Errorf("deploy/helm/profsym/values.yaml: otelEbpfProfiler.image.repository or .tag is empty")
	}
	dir := filepath.Join(b.root, OtelProfilerDir)
	gomod := filepath.Join(dir, "go.mod")
	versions, err := b.otelProfilerVersions(name)
	if err != nil {
		return nil, err
	}
	tag := name[strings.LastIndex(name, ":")+1:]

	// The profiler's module as go.sum pins it, into a folder the build can change.
	out, err := b.goCmd(dir, "mod", "download", "-json", otelProfilerModule)
	if err != nil {
		return nil, err
	}
	var dl struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &dl); err != nil {
		return nil, fmt.Errorf("go mod download -json %s: %w", otelProfilerModule, err)
	}
	if dl.Error != "" || dl.Dir == "" {
		return nil, fmt.Errorf("go mod download %s: %s", otelProfilerModule, dl.Error)
	}
	work := filepath.Join(b.tmp, "otelcol-ebpf-profiler")
	mod := filepath.Join(work, "ebpf-profiler")
	if err := os.RemoveAll(work); err != nil {
		return nil, err
	}
	if err := os.CopyFS(mod, os.DirFS(dl.Dir)); err != nil {
		return nil, fmt.Errorf("copying %s@%s: %w", otelProfilerModule, dl.Version, err)
	}
	rl := filepath.Join(mod, "rlimit", "rlimit.go")
	if _, err := os.Stat(rl); err != nil {
		return nil, fmt.Errorf("%s@%s has no rlimit/rlimit.go to replace: %w", otelProfilerModule, dl.Version, err)
	}
	if err := os.Chmod(rl, 0o644); err != nil {
		return nil, err
	}
	if err := copyFile(filepath.Join(dir, "memlock", "rlimit.go"), rl); err != nil {
		return nil, err
	}
	buildMod := filepath.Join(work, "go.mod")
	if err := copyFile(gomod, buildMod); err != nil {
		return nil, err
	}
	if _, err := b.goCmd(dir, "mod", "edit", "-replace", otelProfilerModule+"="+mod, buildMod); err != nil {
		return nil, err
	}
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(work, "go.sum"), sum, 0o644); err != nil {
		return nil, err
	}

	bin := filepath.Join(b.tmp, arch, "otelcol-ebpf-profiler")
	start := time.Now()
	slog.Info("go build", "module", OtelProfilerDir, "profiler", dl.Version, "collector", versions[otelcolModule], "arch", arch)
	build := exec.CommandContext(b.ctx, "go", "build", "-modfile", buildMod, "-trimpath",
		"-ldflags=-s -w -X main.version="+tag, "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if o, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build (in %s): %w\n%s", OtelProfilerDir, err, o)
	}
	slog.Info("built the OpenTelemetry eBPF profiler", "took", time.Since(start).Round(time.Second))
	img, err := b.onBase(arch, []ociimage.Entry{ociimage.HostFile(otelProfilerBinary, 0o755, bin)}, nil,
		ociimage.Config{Entrypoint: []string{otelProfilerBinary}})
	if err != nil {
		return nil, err
	}
	return img, nil
}

// otelProfilerVersions reads the versions OtelProfilerDir's go.mod requires, and fails unless
// it requires the profiler and the Collector, the latter at the release image name is tagged
// with.
func (b *builder) otelProfilerVersions(name string) (map[string]string, error) {
	dir := filepath.Join(b.root, OtelProfilerDir)
	gomod := filepath.Join(dir, "go.mod")
	data, err := b.goCmd(dir, "mod", "edit", "-json", gomod)
	if err != nil {
		return nil, err
	}
	var mf struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(data, &mf); err != nil {
		return nil, fmt.Errorf("go mod edit -json %s: %w", gomod, err)
	}
	versions := map[string]string{}
	for _, r := range mf.Require {
		versions[r.Path] = r.Version
	}
	if versions[otelProfilerModule] == "" || versions[otelcolModule] == "" {
		return nil, fmt.Errorf("%s requires no %s or no %s", gomod, otelProfilerModule, otelcolModule)
	}
	if tag := name[strings.LastIndex(name, ":")+1:]; "v"+tag != versions[otelcolModule] {
		return nil, fmt.Errorf("image %s: its tag is not the Collector release %s builds with (%s %s): move both together", name, gomod, otelcolModule, versions[otelcolModule])
	}
	return versions, nil
}

// goCmd runs the go command in dir with the module's own go.mod (GOWORK off, go.mod and go.sum
// read-only) and returns its standard output.
func (b *builder) goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(b.ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return out, nil
}
