// Command imagebuild builds profsym's container images without a container engine and without
// pulling anything, as OCI image-layout tarballs that `ctr -n k8s.io images import` loads: the
// three service images as the Dockerfiles in deploy/docker define them (it reads each one's
// final stage and runs its build stage's go build), over an offline stand-in for their
// distroless base; and the images a cluster on this machine runs beside them (the pod sandbox's
// pause image, Redis and MinIO under the names the chart and the manifests give them, and the
// workloads the end-to-end test profiles).
//
//	go run ./deploy/imagebuild -out bin/images [-arch amd64,arm64] [-only symbolizer,pause]
//
// It writes OUT/linux-ARCH/NAME.tar per image and OUT/index.json and OUT/images.txt listing
// them (images.txt: platform, image name, tarball path relative to OUT, one image a line).
// Design: docs/design/0009-offline-images.md.
package main

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"github.com/profsym/profsym/deploy/imagebuild/images"
	"github.com/profsym/profsym/pkg/dockerfile"
	"github.com/profsym/profsym/pkg/ociimage"
	"github.com/profsym/profsym/pkg/toolpins"
)

// Services are the images defined by a Dockerfile in deploy/docker (NAME.Dockerfile).
var Services = []string{"symbolizer", "gateway", "collector"}

// PauseImage is the pod sandbox image (images.PauseImage, defined with the test cluster's).
const PauseImage = images.PauseImage

// Workload images, profiled by the cluster's end-to-end test.
const (
	WorkloadC      = "localhost/profsym/workload-c:e2e"
	WorkloadGo     = "localhost/profsym/workload-go:e2e"
	WorkloadPython = "localhost/profsym/workload-python:e2e"
)

// IndexEntry is one image tarball written.
type IndexEntry struct {
	Key      string `json:"key"`      // symbolizer, redis, workload-c...
	Name     string `json:"name"`     // the full image name it imports as
	Platform string `json:"platform"` // linux/amd64
	File     string `json:"file"`     // relative to the output folder
	Digest   string `json:"digest"`   // the manifest's
	Bytes    int64  `json:"bytes"`    // the tarball's size
}

type builder struct {
	ctx  context.Context
	root string // the repository
	tmp  string
	base map[string]v1.Layer // arch -> the distroless stand-in's layer
}

func main() {
	out := flag.String("out", "bin/images", "folder to write the image tarballs and the index to")
	archs := flag.String("arch", "amd64", "architectures, comma-separated: amd64, arm64 (redis, minio, workload-c and workload-python are amd64 only)")
	only := flag.String("only", "", "build only these images, comma-separated (default all): "+strings.Join(allKeys(), ","))
	root := flag.String("repo", ".", "the repository's root")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *root, *out, strings.Split(*archs, ","), *only)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func allKeys() []string {
	return append(slices.Clone(Services), "pause", "redis", "minio", "workload-c", "workload-go", "workload-python", "otel-ebpf-profiler")
}

// amd64Only are the images made of this machine's Debian binaries or C compiler, and MinIO
// (go install cannot put a cross-compiled binary in a tools folder).
var amd64Only = map[string]bool{"redis": true, "minio": true, "workload-c": true, "workload-python": true}

func run(ctx context.Context, root, out string, archs []string, only string) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	// Absolute: the build stages' go build commands run in other folders (services/gateway).
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("-repo %s: not the repository's root (no go.mod): %w", root, err)
	}
	keys := allKeys()
	if only != "" {
		keys = strings.Split(only, ",")
		for _, k := range keys {
			if !slices.Contains(allKeys(), k) {
				return fmt.Errorf("-only: no image %q (known: %s)", k, strings.Join(allKeys(), ", "))
			}
		}
	}
	for _, a := range archs {
		if _, ok := ociimage.LibDirs[a]; !ok {
			return fmt.Errorf("-arch: %q not supported (amd64, arm64)", a)
		}
	}
	names, err := imageNames(root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	b := &builder{ctx: ctx, root: root, tmp: tmp, base: map[string]v1.Layer{}}
	var index []IndexEntry
	for _, arch := range archs {
		for _, k := range keys {
			if amd64Only[k] && arch != "amd64" {
				slog.Info("skipped: built for amd64 only", "image", k, "arch", arch)
				continue
			}
			start := time.Now()
			img, err := b.image(k, arch, names[k])
			if err != nil {
				return fmt.Errorf("%s (linux/%s): %w", k, arch, err)
			}
			rel := filepath.Join("linux-"+arch, k+".tar")
			file := filepath.Join(out, rel)
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				return err
			}
			if err := ociimage.WriteArchive(file, img, names[k]); err != nil {
				return err
			}
			d, err := img.Digest()
			if err != nil {
				return err
			}
			st, err := os.Stat(file)
			if err != nil {
				return err
			}
			full, _ := ociimage.Normalize(names[k])
			index = append(index, IndexEntry{k, full, "linux/" + arch, filepath.ToSlash(rel), d.String(), st.Size()})
			slog.Info("image written", "name", full, "platform", "linux/"+arch, "file", file, "bytes", st.Size(), "took", time.Since(start).Round(time.Millisecond))
		}
	}
	return writeIndex(out, index)
}

func writeIndex(out string, index []IndexEntry) error {
	sort.Slice(index, func(i, j int) bool { return index[i].File < index[j].File })
	j, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "index.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	var txt strings.Builder
	for _, e := range index {
		fmt.Fprintf(&txt, "%s %s %s\n", e.Platform, e.Name, e.File)
	}
	return os.WriteFile(filepath.Join(out, "images.txt"), []byte(txt.String()), 0o644)
}

// imageNames reads the names the chart and the manifests run: the service images'
// registry/NAME:tag and the in-cluster Redis from the chart's values, MinIO from the dev
// overlays' deploy/k8s/minio, so that both run unchanged on what this builds.
func imageNames(root string) (map[string]string, error) {
	var values struct {
		Images struct {
			Registry, Tag string
		}
		Symbolizer struct {
			Redis struct {
				InCluster struct{ Image string } `json:"inCluster"`
			}
		}
		OtelEbpfProfiler struct {
			Image struct{ Repository, Tag string }
		} `json:"otelEbpfProfiler"`
	}
	vp := filepath.Join(root, "deploy/helm/profsym/values.yaml")
	b, err := os.ReadFile(vp)
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		return nil, fmt.Errorf("%s: %w", vp, err)
	}
	if values.Images.Registry == "" || values.Images.Tag == "" || values.Symbolizer.Redis.InCluster.Image == "" {
		return nil, fmt.Errorf("%s: images.registry, images.tag or symbolizer.redis.inCluster.image is empty", vp)
	}
	names := map[string]string{
		"redis": values.Symbolizer.Redis.InCluster.Image, "pause": PauseImage,
		"workload-c": WorkloadC, "workload-go": WorkloadGo, "workload-python": WorkloadPython,
	}
	for _, s := range Services {
		names[s] = values.Images.Registry + "/" + s + ":" + values.Images.Tag
	}
	// collector.mode otel-ebpf-profiler's image (otelprofiler.go).
	if p := values.OtelEbpfProfiler.Image; p.Repository != "" && p.Tag != "" {
		names["otel-ebpf-profiler"] = p.Repository + ":" + p.Tag
	}
	mp := filepath.Join(root, "deploy/k8s/minio/minio.yaml")
	if names["minio"], err = containerImage(mp, "minio"); err != nil {
		return nil, err
	}
	return names, nil
}

// containerImage returns the image of the container named name in the manifests of file.
func containerImage(file, name string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		var d struct {
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct{ Name, Image string }
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == name {
				return c.Image, nil
			}
		}
	}
	return "", fmt.Errorf("%s: no container %q", file, name)
}

func (b *builder) baseLayer(arch string) (v1.Layer, error) {
	if l, ok := b.base[arch]; ok {
		return l, nil
	}
	es, err := ociimage.StaticBase("/")
	if err != nil {
		return nil, err
	}
	l, err := ociimage.Layer(es)
	if err != nil {
		return nil, err
	}
	b.base[arch] = l
	return l, nil
}

func (b *builder) baseLabels() (map[string]string, error) {
	v, err := ociimage.PackageVersions(b.ctx, ociimage.BasePackages...)
	if err != nil {
		return nil, err
	}
	return map[string]string{
		"org.opencontainers.image.base.name": ociimage.DistrolessStatic,
		"dev.profsym.image.base":             "offline stand-in for " + ociimage.DistrolessStatic + ", files of Debian's " + v,
	}, nil
}

func (b *builder) image(key, arch, name string) (v1.Image, error) {
	if slices.Contains(Services, key) {
		return b.service(key, arch)
	}
	switch key {
	case "pause":
		return images.Pause(b.ctx, b.root, b.tmp, arch)
	case "workload-go":
		// DWARF kept (no -s -w): the test symbolizes from the binary the collector uploads.
		bin, err := b.goBuild(arch, "gochain", "./deploy/imagebuild/workloads/gochain", "-trimpath")
		if err != nil {
			return nil, err
		}
		return b.onBase(arch, []ociimage.Entry{ociimage.HostFile("/app/gochain", 0o755, bin)}, nil,
			ociimage.Config{Entrypoint: []string{"/app/gochain"}})
	case "workload-c":
		bin := filepath.Join(b.tmp, "cchain")
		src := filepath.Join(b.root, "deploy/imagebuild/workloads/cchain/chain.c")
		cmd := exec.CommandContext(b.ctx, "gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", bin, src)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("gcc %s: %w\n%s", src, err, out)
		}
		return b.onBase(arch, []ociimage.Entry{ociimage.HostFile("/app/cchain", 0o755, bin)}, []string{bin},
			ociimage.Config{Entrypoint: []string{"/app/cchain"}})
	case "workload-python":
		return b.python(arch)
	case "otel-ebpf-profiler":
		return b.otelProfiler(arch, name)
	case "redis":
		return b.redis(arch)
	case "minio":
		return b.minio(arch, name)
	}
	return nil, fmt.Errorf("no image %q", key)
}

// onBase makes an image of the distroless stand-in, one layer of files and of the shared
// libraries elfs need, with the base's config under c (Arch set here).
func (b *builder) onBase(arch string, files []ociimage.Entry, elfs []string, c ociimage.Config) (v1.Image, error) {
	base, err := b.baseLayer(arch)
	if err != nil {
		return nil, err
	}
	if len(elfs) > 0 {
		libs, err := ociimage.SharedLibs("/", arch, elfs...)
		if err != nil {
			return nil, err
		}
		files = append(files, libs...)
	}
	l, err := ociimage.Layer(files)
	if err != nil {
		return nil, err
	}
	labels, err := b.baseLabels()
	if err != nil {
		return nil, err
	}
	c.Arch, c.Labels = arch, labels
	if c.User == "" {
		c.User = ociimage.BaseConfig.User
	}
	if c.WorkingDir == "" {
		c.WorkingDir = ociimage.BaseConfig.WorkingDir
	}
	c.Env = append(slices.Clone(ociimage.BaseConfig.Env), c.Env...)
	return ociimage.Image([]v1.Layer{base, l}, c)
}

// goBuild builds a package of the root module for linux/arch, static.
func (b *builder) goBuild(arch, name, pkg string, flags ...string) (string, error) {
	out := filepath.Join(b.tmp, arch, name)
	return out, images.GoBuild(b.ctx, b.root, arch, out, pkg, flags...)
}

// service builds the image deploy/docker/KEY.Dockerfile defines: its build stages' go build
// commands run here as written (ARGs expanded: TARGETOS=linux, TARGETARCH=arch, VERSION=the
// chart's tag), and its final stage's COPY --from, USER, ENTRYPOINT, CMD, ENV, WORKDIR and EXPOSE
// applied over the offline stand-in for its base.
func (b *builder) service(key, arch string) (v1.Image, error) {
	df := filepath.Join(b.root, "deploy/docker", key+".Dockerfile")
	ins, err := dockerfile.ParseFile(df)
	if err != nil {
		return nil, err
	}
	global, stages, err := dockerfile.Stages(ins)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", df, err)
	}
	final := stages[len(stages)-1]
	spec, err := dockerfile.ImageOf(final)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", df, err)
	}
	if spec.Base != ociimage.DistrolessStatic {
		return nil, fmt.Errorf("%s:%d: the image starts FROM %s; the offline builder has a stand-in for %s only", df, final.From.Line, spec.Base, ociimage.DistrolessStatic)
	}
	names, err := imageNames(b.root)
	if err != nil {
		return nil, err
	}
	tag := names[key][strings.LastIndex(names[key], ":")+1:]
	var files []ociimage.Entry
	built := map[string]map[string]string{} // stage -> output in the stage -> file here
	for _, c := range spec.Copies {
		if built[c.From] == nil {
			st, ok := dockerfile.Lookup(stages, c.From)
			if !ok {
				return nil, fmt.Errorf("%s:%d: COPY --from=%s: no such stage", df, c.Line, c.From)
			}
			outs, err := b.stageBuilds(df, global, st, arch, tag)
			if err != nil {
				return nil, err
			}
			built[c.From] = outs
		}
		src, ok := built[c.From][c.Src]
		if !ok {
			return nil, fmt.Errorf("%s:%d: COPY --from=%s %s: the stage's go build commands make %v, not that", df, c.Line, c.From, c.Src, keys(built[c.From]))
		}
		dst := c.Dst
		if strings.HasSuffix(dst, "/") {
			dst += path.Base(c.Src)
		}
		files = append(files, ociimage.HostFile(dst, 0o755, src))
	}
	cfg := ociimage.Config{
		User: spec.User, Entrypoint: spec.Entrypoint, Cmd: spec.Cmd, Env: spec.Env, WorkingDir: spec.WorkingDir, Exposed: spec.Exposed,
	}
	return b.onBase(arch, files, nil, cfg)
}

func keys(m map[string]string) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// stageBuilds runs a build stage's go build commands for linux/arch and returns the file each
// made, by the path it has in the stage.
func (b *builder) stageBuilds(df string, global []dockerfile.Instruction, st dockerfile.Stage, arch, version string) (map[string]string, error) {
	gbs, err := dockerfile.GoBuilds(global, st, map[string]string{
		"TARGETOS": "linux", "TARGETARCH": arch, "BUILDPLATFORM": "linux/amd64", "TARGETPLATFORM": "linux/" + arch, "VERSION": version,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", df, err)
	}
	if len(gbs) == 0 {
		return nil, fmt.Errorf("%s: stage %q runs no go build", df, st.Name)
	}
	// The build stage's Go: golang:1.26.8-bookworm is Go 1.26.8, which GOTOOLCHAIN selects (the
	// go command fetches that toolchain from the module proxy when this machine's differs).
	ver, ok := strings.CutPrefix(st.Base, "golang:")
	if ok {
		ver, _, _ = strings.Cut(ver, "-")
	}
	if !ok || strings.Count(ver, ".") != 2 {
		return nil, fmt.Errorf("%s:%d: the build stage starts FROM %s: the offline builder knows golang:X.Y.Z[-variant] images only", df, st.From.Line, st.Base)
	}
	outs := map[string]string{}
	for _, gb := range gbs {
		host := filepath.Join(b.tmp, arch, st.Name, strings.TrimPrefix(gb.Output, "/"))
		args := slices.Clone(gb.Args)
		for i, a := range args {
			if a == "-o" {
				args[i+1] = host
			} else if strings.HasPrefix(a, "-o=") {
				args[i] = "-o=" + host
			}
		}
		cmd := exec.CommandContext(b.ctx, "go", args...)
		cmd.Dir = filepath.Join(b.root, gb.Dir)
		// GOWORK=off: the stage builds with the module's own go.mod, as in the container.
		cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=go"+ver), gb.Env...)
		slog.Info("go build", "dockerfile", filepath.Base(df), "line", gb.Line, "go", ver, "dir", gb.Dir, "env", strings.Join(gb.Env, " "), "args", strings.Join(gb.Args, " "))
		if o, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s:%d: go %s (in %s): %w\n%s", df, gb.Line, strings.Join(args, " "), gb.Dir, err, o)
		}
		outs[gb.Output] = host
	}
	return outs, nil
}

func (b *builder) redis(arch string) (v1.Image, error) {
	// Debian's /usr/bin/redis-server is a link to redis-check-rdb, which chooses what to be by
	// its argv[0]: the image holds the file itself at /usr/bin/redis-server.
	bin, err := filepath.EvalSymlinks("/usr/bin/redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server (Debian package redis-server): %w", err)
	}
	files := []ociimage.Entry{
		ociimage.HostFile("/usr/bin/redis-server", 0o755, bin),
		{Path: "/data", Mode: os.ModeDir | 0o755, UID: 999, GID: 999},
	}
	// The chart runs it as 999:999 with arguments only (the upstream image's entrypoint takes
	// them as redis-server's); /data is its working directory there too.
	return b.onBase(arch, files, []string{bin}, ociimage.Config{
		User: "999:999", Entrypoint: []string{"/usr/bin/redis-server"}, WorkingDir: "/data",
	})
}

// minio builds the image the manifests name quay.io/minio/minio:RELEASE.X from the one MinIO
// the repository pins (.ci/pins: the module proxy does not serve MinIO's release tags), static
// as MinIO's own releases are. For the host's architecture it is the binary .ci/install-deps
// builds for the test servers (the tools folder's minio); for another, minio-VERSION-linux-ARCH
// beside it. Either is built once.
func (b *builder) minio(arch, name string) (v1.Image, error) {
	release := name[strings.LastIndex(name, ":")+1:]
	if !strings.HasPrefix(release, "RELEASE.") {
		return nil, fmt.Errorf("MinIO image %s: the tag is not a MinIO release (RELEASE.<time>)", name)
	}
	pins, err := toolpins.Load(b.root)
	if err != nil {
		return nil, err
	}
	pin, err := pins.Get("minio")
	if err != nil {
		return nil, err
	}
	bin := toolPath("minio")
	if arch != runtime.GOARCH {
		bin = toolPath("minio-" + pin.Version + "-linux-" + arch)
	}
	if err := staticBuildOf(bin, pin); err != nil {
		gobin := filepath.Join(b.tmp, "minio-gobin-"+arch)
		start := time.Now()
		slog.Info("building MinIO (once; about 3 minutes on 2 cores)", "module", pin.Install(), "for", release, "into", bin, "because", err)
		cmd := exec.CommandContext(b.ctx, "go", "install", "-trimpath", pin.Install())
		env := append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
		out := filepath.Join(gobin, "minio")
		if arch == runtime.GOARCH {
			env = append(env, "GOBIN="+gobin)
		} else {
			// go install cannot put a cross-compiled binary in GOBIN: it writes
			// GOPATH/bin/linux_ARCH, so GOPATH is a folder of its own (the module cache stays).
			modcache, err := exec.CommandContext(b.ctx, "go", "env", "GOMODCACHE").Output()
			if err != nil {
				return nil, fmt.Errorf("go env GOMODCACHE: %w", err)
			}
			env = append(env, "GOPATH="+gobin, "GOMODCACHE="+strings.TrimSpace(string(modcache)))
			out = filepath.Join(gobin, "bin", "linux_"+arch, "minio")
		}
		cmd.Env = env
		if o, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go install %s: %w\n%s", pin.Install(), err, o)
		}
		if err := copyFile(out, bin); err != nil {
			return nil, err
		}
		slog.Info("built MinIO", "version", pin.Version, "took", time.Since(start).Round(time.Second))
	}
	files := []ociimage.Entry{
		ociimage.HostFile("/usr/bin/minio", 0o755, bin),
		{Path: "/data", Mode: os.ModeDir | 0o755, UID: 1000, GID: 1000},
	}
	// The manifests run it as 1000:1000 with "server /data ..." as arguments.
	return b.onBase(arch, files, nil, ociimage.Config{
		User: "1000:1000", Entrypoint: []string{"/usr/bin/minio"}, WorkingDir: "/",
	})
}

// staticBuildOf checks that bin is pin's module at pin's version, built without cgo (the
// distroless base has no libc to load it with).
func staticBuildOf(bin string, pin toolpins.Pin) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return err
	}
	if info.Main.Path != pin.Module || info.Main.Version != pin.Version {
		return fmt.Errorf("%s is %s@%s, not the pinned %s@%s", bin, info.Main.Path, info.Main.Version, pin.Module, pin.Version)
	}
	for _, s := range info.Settings {
		if s.Key == "CGO_ENABLED" && s.Value == "0" {
			return nil
		}
	}
	return fmt.Errorf("%s is built with cgo", bin)
}

// copyFile copies an executable to dst through a temporary file beside it.
func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func (b *builder) python(arch string) (v1.Image, error) {
	bin, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		return nil, fmt.Errorf("python3 (Debian package python3-minimal): %w", err)
	}
	ver := filepath.Base(bin) // python3.11
	lib := filepath.Join("/usr/lib", ver)
	tree, err := ociimage.Tree(lib, lib)
	if err != nil {
		return nil, fmt.Errorf("the standard library (Debian package lib%s-stdlib): %w", ver, err)
	}
	files := []ociimage.Entry{
		ociimage.HostFile("/usr/bin/"+ver, 0o755, bin),
		ociimage.Symlink("/usr/bin/python3", ver),
		ociimage.HostFile("/app/loop.py", 0o644, filepath.Join(b.root, "deploy/imagebuild/workloads/pyloop/loop.py")),
	}
	elfs := []string{bin}
	for _, e := range tree {
		// Not needed to run a program: the test suite, the static library and pip's sources.
		rel := strings.TrimPrefix(e.Path, lib+"/")
		top, _, _ := strings.Cut(rel, "/")
		if top == "test" || strings.HasPrefix(top, "config-") || top == "ensurepip" || top == "idlelib" {
			continue
		}
		files = append(files, e)
		if strings.HasPrefix(rel, "lib-dynload/") && strings.HasSuffix(rel, ".so") {
			elfs = append(elfs, e.Source)
		}
	}
	return b.onBase(arch, files, elfs, ociimage.Config{
		Entrypoint: []string{"/usr/bin/python3", "/app/loop.py"},
		Env:        []string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"},
	})
}

func toolPath(name string) string {
	dir := os.Getenv("PROFSYM_TOOLS")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return name
		}
		dir = filepath.Join(home, ".cache", "profsym", "bin")
	}
	return filepath.Join(dir, name)
}
