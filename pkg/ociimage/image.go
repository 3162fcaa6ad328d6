package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Config is what an image's config says to the runtime.
type Config struct {
	Arch       string // GOARCH: amd64, arm64
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Exposed    []string // "4317/tcp"
	Labels     map[string]string
}

// Image makes an OCI image (manifest and config of the OCI media types) of layers, bottom
// first, and config c, for linux/c.Arch.
func Image(layers []v1.Layer, c Config) (v1.Image, error) {
	if c.Arch == "" {
		return nil, fmt.Errorf("image config: no architecture")
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", c.Arch
	if c.Arch == "arm64" {
		cf.Variant = "v8"
	}
	cf.Created = v1.Time{Time: Epoch}
	cf.Config = v1.Config{
		User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, WorkingDir: c.WorkingDir, Labels: c.Labels,
	}
	if len(c.Exposed) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range c.Exposed {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{Layer: l, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "profsym imagebuild"}}
	}
	return mutate.Append(img, adds...)
}

// Normalize returns the full name a container runtime gives ref, as Docker and containerd
// normalize it: "redis:7.4.6" is docker.io/library/redis:7.4.6 and "profsym/x:1" is
// docker.io/profsym/x:1. A reference without a tag or with a digest is an error: images here are
// imported by name and tag.
func Normalize(ref string) (string, error) {
	if strings.Contains(ref, "@") {
		return "", fmt.Errorf("image reference %q: digests are not supported, name a tag", ref)
	}
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash || colon == len(ref)-1 {
		return "", fmt.Errorf("image reference %q: no tag", ref)
	}
	if ref != strings.TrimSpace(ref) || strings.ContainsAny(ref, " \t\n") {
		return "", fmt.Errorf("image reference %q: contains spaces", ref)
	}
	first, _, hasSlash := strings.Cut(ref, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + ref, nil
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + ref, nil
	}
	return ref, nil
}

// WriteArchive writes img as an OCI image-layout tarball (oci-layout, index.json, blobs/) named
// ref, which `ctr images import` loads under that name (the io.containerd.image.name annotation,
// as `ctr images export` writes it).
func WriteArchive(path string, img v1.Image, ref string) error {
	full, err := Normalize(ref)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".oci-layout-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	tag := full[strings.LastIndex(full, ":")+1:]
	err = p.AppendImage(img,
		layout.WithAnnotations(map[string]string{"io.containerd.image.name": full, "org.opencontainers.image.ref.name": tag}),
		layout.WithPlatform(v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}))
	if err != nil {
		return fmt.Errorf("%s: writing the image layout: %w", ref, err)
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp) }() // gone once renamed
	if err := tarDir(f, dir); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// tarDir writes the files under dir to w, sorted, at Epoch, owned by root.
func tarDir(w io.Writer, dir string) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	tw := tar.NewWriter(w)
	for _, p := range files {
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: Epoch, Mode: 0o644, Format: tar.FormatPAX}
		if info.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
