//go:build linux

package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/profsym/profsym/deploy/imagebuild/images"
	"github.com/profsym/profsym/pkg/ociimage"
)

// The images the cluster itself needs, built here from local files (nothing is pulled) and
// imported into containerd's k8s.io namespace before the kubelet starts.
const (
	// PauseImage is every pod's sandbox (containerd's sandbox_image): the pause image of the
	// offline image builder, under the name containerd 1.6 uses by default.
	PauseImage = images.PauseImage
	// BusyboxImage is Debian's static busybox with the applets a test needs linked in /bin
	// (images.BusyboxApplets: sh, httpd, nslookup, nc, sleep, cat, echo, ls, mkdir, sed, tail).
	BusyboxImage = "profsym.local/busybox:1"
	// CoreDNSImage is the cluster DNS: the coredns binary .ci/install-deps builds.
	CoreDNSImage = "profsym.local/coredns:" + CoreDNSVersion
)

// writeImages writes the images the cluster needs, as OCI tarballs in dir: pause.tar,
// busybox.tar and coredns.tar, for this machine's architecture. Their definitions are
// deploy/imagebuild's, which the offline image builder uses too.
func writeImages(ctx context.Context, dir, busybox, coredns string) error {
	arch := runtime.GOARCH
	pause, err := images.Pause(ctx, "", dir, arch)
	if err != nil {
		return err
	}
	bb, err := images.Busybox(busybox, arch)
	if err != nil {
		return err
	}
	dns, err := images.StaticBinary(coredns, arch)
	if err != nil {
		return err
	}
	for _, w := range []struct {
		file, ref string
		img       v1.Image
	}{{"pause.tar", PauseImage, pause}, {"busybox.tar", BusyboxImage, bb}, {"coredns.tar", CoreDNSImage, dns}} {
		if err := ociimage.WriteArchive(filepath.Join(dir, w.file), w.img, w.ref); err != nil {
			return fmt.Errorf("image %s: %w", w.ref, err)
		}
	}
	return nil
}
