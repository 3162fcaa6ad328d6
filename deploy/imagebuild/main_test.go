package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// fakeRepo writes a repository with a symbolizer Dockerfile (final stage given), a tiny Go
// program it builds, and the chart values and the dev overlay the builder takes names from.
func fakeRepo(t *testing.T, final string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"go.mod":                          "module example.com/fake\n\ngo 1.22\n",
		"cmd/hello/main.go":               "package main\n\nimport \"fmt\"\n\nvar version = \"none\"\n\nfunc main() { fmt.Println(\"hello\", version) }\n",
		"deploy/helm/profsym/values.yaml": "images:\n  registry: example.org/profsym\n  tag: \"9.9.9\"\nsymbolizer:\n  redis:\n    inCluster:\n      image: redis:1.2.3\n",
		"deploy/k8s/minio/minio.yaml":     "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n        - name: minio\n          image: quay.io/minio/minio:X\n",
		"deploy/docker/symbolizer.Dockerfile": `FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
ARG TARGETOS TARGETARCH
WORKDIR /src
COPY . .
ARG VERSION=dev
RUN GOOS=$TARGETOS GOARCH=$TARGETARCH CGO_ENABLED=0 go build -ldflags="-X main.version=${VERSION}" -o /out/hello ./cmd/hello

FROM gcr.io/distroless/static-debian12:nonroot
` + final,
	}
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The builder follows what the Dockerfile says, not what profsym's Dockerfiles happen to say
// today: another destination, user, environment, working folder and ports, in the image.
func TestServiceFollowsDockerfile(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("the distroless stand-in is made of Debian's packages: not a Debian machine")
	}
	root := fakeRepo(t, `COPY --from=build /out/hello /opt/hello
USER 1234:1234
ENV GREETING=hi
WORKDIR /work
EXPOSE 8080 9090/udp
ENTRYPOINT ["/opt/hello"]
CMD ["--loud"]
`)
	out := t.TempDir()
	if err := run(t.Context(), root, out, []string{"amd64"}, "symbolizer"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != "linux/amd64 example.org/profsym/symbolizer:9.9.9 linux-amd64/symbolizer.tar\n" {
		t.Fatalf("images.txt: %q", got)
	}
	dir := t.TempDir()
	if o, err := exec.CommandContext(t.Context(), "tar", "-xf", filepath.Join(out, "linux-amd64/symbolizer.tar"), "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, o)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "1234:1234" || !slices.Equal(c.Entrypoint, []string{"/opt/hello"}) || !slices.Equal(c.Cmd, []string{"--loud"}) ||
		c.WorkingDir != "/work" || !slices.Contains(c.Env, "GREETING=hi") || len(c.ExposedPorts) != 2 {
		t.Fatalf("config does not follow the Dockerfile: %+v", c)
	}
	if _, ok := c.ExposedPorts["9090/udp"]; !ok {
		t.Errorf("ports %v", c.ExposedPorts)
	}
	// The binary at /opt/hello, built with the Dockerfile's -ldflags (VERSION = the chart's tag).
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := ls[len(ls)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hello := filepath.Join(t.TempDir(), "hello")
	cmd := exec.CommandContext(t.Context(), "tar", "-xf", "-", "-C", filepath.Dir(hello), "--strip-components=1", "opt/hello")
	cmd.Stdin = rc
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("no /opt/hello in the top layer: %v %s", err, o)
	}
	o, err := exec.CommandContext(t.Context(), hello).CombinedOutput()
	if err != nil || strings.TrimSpace(string(o)) != "hello 9.9.9" {
		t.Fatalf("/opt/hello: %v %q, want \"hello 9.9.9\"", err, o)
	}
}

// A final stage the builder cannot reproduce stops it with the line, instead of an image that
// differs from the Dockerfile's.
func TestServiceRefusesWhatItCannotBuild(t *testing.T) {
	for final, want := range map[string]string{
		"COPY --from=build /out/hello /hello\nRUN chmod 700 /hello\nENTRYPOINT [\"/hello\"]\n": "symbolizer.Dockerfile: line 10: RUN in the final stage",
		"COPY --from=build /out/other /hello\nENTRYPOINT [\"/hello\"]\n":                       "make [/out/hello], not that",
		"COPY --from=nope /out/hello /hello\n":                                                 "no such stage",
	} {
		root := fakeRepo(t, final)
		err := run(t.Context(), root, t.TempDir(), []string{"amd64"}, "symbolizer")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("final stage %q: error %v, want %q", final, err, want)
		}
	}
}

// The profiler's image is tagged with the Collector release its module builds with, and the
// chart's otelEbpfProfiler.image names it; a tag that drifts from the module is refused.
func TestOtelProfilerPinnedToChart(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	names, err := imageNames(root)
	if err != nil {
		t.Fatal(err)
	}
	name := names["otel-ebpf-profiler"]
	if name == "" {
		t.Fatal("deploy/helm/profsym/values.yaml names no otelEbpfProfiler.image")
	}
	b := &builder{ctx: t.Context(), root: root}
	v, err := b.otelProfilerVersions(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: profiler %s, Collector %s", name, v[otelProfilerModule], v[otelcolModule])
	if _, err := b.otelProfilerVersions(name[:strings.LastIndex(name, ":")] + ":0.1.0"); err == nil || !strings.Contains(err.Error(), "move both together") {
		t.Errorf("a tag other than the module's Collector release: err %v, want it refused", err)
	}
}
