package ociimage

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"redis:7.4.6":                      "docker.io/library/redis:7.4.6",
		"profsym/x:1":                      "docker.io/profsym/x:1",
		"ghcr.io/profsym/symbolizer:0.1.0": "ghcr.io/profsym/symbolizer:0.1.0",
		"localhost/profsym/w:e2e":          "localhost/profsym/w:e2e",
		"registry:5000/a/b:c":              "registry:5000/a/b:c",
	} {
		if got, err := Normalize(in); err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"redis", "registry:5000/a", "a@sha256:00", "a:"} {
		if got, err := Normalize(bad); err == nil {
			t.Errorf("Normalize(%q) = %q, want an error", bad, got)
		}
	}
}

// The same entries make the same layer digest; an image written and read back has its config,
// its platform and the name containerd imports it as.
func TestLayerAndArchive(t *testing.T) {
	es := []Entry{File("/a/b/c", 0o644, "x"), {Path: "/tmp", Mode: os.ModeDir | os.ModeSticky | 0o777}, Symlink("/a/l", "b/c")}
	l1, err := Layer(es)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := Layer([]Entry{es[2], es[0], es[1]})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := l1.Digest()
	d2, _ := l2.Digest()
	if d1 != d2 {
		t.Fatalf("same entries, digests %s and %s", d1, d2)
	}
	if _, err := Layer([]Entry{File("a/relative", 0o644, "")}); err == nil {
		t.Fatal("a relative path made a layer")
	}
	if _, err := Layer([]Entry{File("/x", 0o644, ""), File("/x", 0o644, "")}); err == nil {
		t.Fatal("a path named twice made a layer")
	}
	img, err := Image([]v1.Layer{l1}, Config{Arch: "arm64", User: "1:2", Entrypoint: []string{"/a/b/c"}, Exposed: []string{"80/tcp"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	archive := filepath.Join(dir, "img.tar")
	if err := WriteArchive(archive, img, "redis:1"); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.CommandContext(t.Context(), "tar", "-xf", archive, "-C", out).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, b)
	}
	idx, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["io.containerd.image.name"] != "docker.io/library/redis:1" ||
		m.Manifests[0].Platform == nil || m.Manifests[0].Platform.Architecture != "arm64" {
		t.Fatalf("index: %+v", m.Manifests)
	}
	back, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" || cf.Variant != "v8" || cf.Config.User != "1:2" || cf.Config.Entrypoint[0] != "/a/b/c" {
		t.Fatalf("config: %+v", cf)
	}
	ls, _ := back.Layers()
	rc, err := ls[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "tmp/" && h.Mode != 0o1777 {
			t.Errorf("/tmp mode %o, want 1777", h.Mode)
		}
	}
	if got := strings.Join(names, " "); got != "a/ a/b/ a/b/c a/l tmp/" {
		t.Fatalf("layer entries %q", got)
	}
}

// SharedLibs of a dynamic program of this machine finds its interpreter and libc.
func TestSharedLibs(t *testing.T) {
	bin, err := exec.LookPath("ls")
	if err != nil {
		t.Skip(err)
	}
	es, err := SharedLibs("/", "amd64", bin)
	if err != nil {
		t.Skipf("not a Debian amd64 machine: %v", err)
	}
	var paths []string
	for _, e := range es {
		paths = append(paths, e.Path)
	}
	got := strings.Join(paths, " ")
	for _, want := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"} {
		if !strings.Contains(got, want) {
			t.Errorf("shared libraries of %s: %s, no %s", bin, got, want)
		}
	}
	if _, err := SharedLibs("/", "amd64", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file: no error")
	}
}
