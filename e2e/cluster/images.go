//go:build linux

package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images the cluster itself needs, built here from local files (nothing is pulled) and
// imported into containerd's k8s.io namespace before the kubelet starts.
const (
	// PauseImage is every pod's sandbox (containerd's sandbox_image).
	PauseImage = "profsym.local/pause:1"
	// BusyboxImage is Debian's static busybox with the applets a test needs linked in /bin:
	// sh, httpd, nslookup, nc, sleep, cat, echo, ls, mkdir, sed, tail.
	BusyboxImage = "profsym.local/busybox:1"
	// CoreDNSImage is the cluster DNS: the coredns binary .ci/install-deps builds.
	CoreDNSImage = "profsym.local/coredns:" + CoreDNSVersion
)

// imageFile is one entry of an image's single layer: a regular file (Data), a directory
// (Dir) or a symbolic link (Link).
type imageFile struct {
	Name string
	Mode int64
	Data []byte
	Dir  bool
	Link string
}

// imageConfig is what the image runs.
type imageConfig struct {
	Entrypoint []string
	Cmd        []string
	WorkingDir string
}

// writeImage writes a one-layer image of files as a docker-archive tarball at path, tagged
// ref, for this machine's architecture.
func writeImage(path, ref string, files []imageFile, cfg imageConfig) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, strings.TrimSuffix(f.Name, "/")+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("image %s: %s: %w", ref, f.Name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return fmt.Errorf("image %s: %s: %w", ref, f.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerTar := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return fmt.Errorf("image %s: layer: %w", ref, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{
		Entrypoint: cfg.Entrypoint,
		Cmd:        cfg.Cmd,
		WorkingDir: cfg.WorkingDir,
		Env:        []string{"PATH=/bin"},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("image %s: write %s: %w", ref, path, err)
	}
	return nil
}

// pauseSource is the sandbox process: it holds the pod's namespaces, exits on SIGINT or
// SIGTERM and reaps any child that ends up with it.
const pauseSource = `#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
	struct sigaction sa = {0};
	sa.sa_handler = quit;
	sigaction(SIGINT, &sa, 0);
	sigaction(SIGTERM, &sa, 0);
	sa.sa_handler = reap;
	sa.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, 0);
	for (;;) pause();
}
`

// buildPauseImage compiles the sandbox process statically with gcc and writes its image.
func buildPauseImage(ctx context.Context, dir, path string) error {
	src := filepath.Join(dir, "pause.c")
	bin := filepath.Join(dir, "pause")
	if err := os.WriteFile(src, []byte(pauseSource), 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "gcc", "-static", "-Os", "-s", "-o", bin, src).CombinedOutput(); err != nil {
		return fmt.Errorf("gcc pause: %w: %s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	return writeImage(path, PauseImage, []imageFile{{Name: "pause", Mode: 0o755, Data: data}},
		imageConfig{Entrypoint: []string{"/pause"}})
}

// busyboxApplets are linked in the busybox image's /bin.
var busyboxApplets = []string{"sh", "httpd", "nslookup", "sleep", "cat", "echo", "ls", "mkdir", "sed", "tail", "nc"}

// buildBusyboxImage writes an image of Debian's static busybox (package busybox-static).
func buildBusyboxImage(path, busybox string) error {
	data, err := staticBinary(busybox)
	if err != nil {
		return err
	}
	files := []imageFile{{Name: "bin", Dir: true, Mode: 0o755}, {Name: "bin/busybox", Mode: 0o755, Data: data}, {Name: "tmp", Dir: true, Mode: 0o1777}}
	for _, a := range busyboxApplets {
		files = append(files, imageFile{Name: "bin/" + a, Link: "busybox", Mode: 0o777})
	}
	return writeImage(path, BusyboxImage, files, imageConfig{Entrypoint: []string{"/bin/sh"}})
}

// buildCoreDNSImage writes an image of the coredns binary.
func buildCoreDNSImage(path, coredns string) error {
	data, err := staticBinary(coredns)
	if err != nil {
		return err
	}
	return writeImage(path, CoreDNSImage, []imageFile{{Name: "coredns", Mode: 0o755, Data: data}},
		imageConfig{Entrypoint: []string{"/coredns"}})
}

// staticBinary reads an executable that must run in an image with nothing else in it.
func staticBinary(path string) ([]byte, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is dynamically linked: an image of it alone would not run", path)
		}
	}
	return os.ReadFile(path)
}
