// Package images defines the images that are not a service of profsym but that a cluster on
// this machine runs: the pod sandbox's pause image, and the small images of one static binary
// (busybox, coredns) the test cluster of e2e/cluster needs. The offline image builder
// (deploy/imagebuild) and the test cluster both build them here, so each has one definition.
package images

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/profsym/profsym/pkg/ociimage"
)

// PauseImage is the pod sandbox image: the name containerd 1.6 uses when its CRI configuration
// names none (sandbox_image), so a containerd with the defaults never tries to pull it.
const PauseImage = "registry.k8s.io/pause:3.6"

// PausePackage is the sandbox's program (in this module).
const PausePackage = "github.com/profsym/profsym/deploy/imagebuild/pause"

// GoBuild builds package pkg of the module dir is in (dir "" is the working folder) for
// linux/arch, static (CGO_ENABLED=0), to out.
func GoBuild(ctx context.Context, dir, arch, out, pkg string, flags ...string) error {
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, o)
	}
	return nil
}

// Pause builds the sandbox program for linux/arch in tmp (dir: a folder of this module, "" the
// working folder) and returns its image: the program alone at /pause, run as 65535:65535, as
// the upstream pause image (the sandbox holds namespaces only: no base files).
func Pause(ctx context.Context, dir, tmp, arch string) (v1.Image, error) {
	bin := filepath.Join(tmp, arch, "pause")
	if err := GoBuild(ctx, dir, arch, bin, PausePackage, "-trimpath", "-ldflags=-s -w"); err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	l, err := ociimage.Layer([]ociimage.Entry{ociimage.HostFile("/pause", 0o755, bin)})
	if err != nil {
		return nil, err
	}
	return ociimage.Image([]v1.Layer{l}, ociimage.Config{Arch: arch, User: "65535:65535", Entrypoint: []string{"/pause"}})
}

// BusyboxApplets are linked in the busybox image's /bin.
var BusyboxApplets = []string{"sh", "httpd", "nslookup", "sleep", "cat", "echo", "ls", "mkdir", "sed", "tail", "nc"}

// Busybox returns an image of a static busybox (Debian's busybox-static: /bin/busybox) for
// linux/arch with BusyboxApplets linked in /bin, a /tmp, and /bin/sh as its entrypoint.
func Busybox(busybox, arch string) (v1.Image, error) {
	if err := static(busybox); err != nil {
		return nil, err
	}
	es := []ociimage.Entry{
		ociimage.HostFile("/bin/busybox", 0o755, busybox),
		ociimage.Dir("/tmp", os.ModeSticky|0o777),
	}
	for _, a := range BusyboxApplets {
		es = append(es, ociimage.Symlink("/bin/"+a, "busybox"))
	}
	l, err := ociimage.Layer(es)
	if err != nil {
		return nil, fmt.Errorf("busybox image: %w", err)
	}
	return ociimage.Image([]v1.Layer{l}, ociimage.Config{Arch: arch, Entrypoint: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}})
}

// StaticBinary returns an image of one static executable at /NAME (its base name), its
// entrypoint, for linux/arch.
func StaticBinary(bin, arch string) (v1.Image, error) {
	if err := static(bin); err != nil {
		return nil, err
	}
	p := "/" + filepath.Base(bin)
	l, err := ociimage.Layer([]ociimage.Entry{ociimage.HostFile(p, 0o755, bin)})
	if err != nil {
		return nil, err
	}
	return ociimage.Image([]v1.Layer{l}, ociimage.Config{Arch: arch, Entrypoint: []string{p}})
}

// static fails unless path is an executable that runs in an image with nothing else in it.
func static(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: an image of it alone would not run", path)
		}
	}
	return nil
}
