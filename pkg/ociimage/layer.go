// Package ociimage assembles OCI container images without a container engine or a registry:
// layers from files of this machine, an offline stand-in for the distroless static base, the
// image config, and OCI image-layout tarballs that `ctr images import` loads. The offline image
// builder (deploy/imagebuild) drives it from the Dockerfiles in deploy/docker.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the time every file and the image config carry, so that the same inputs make the
// same digests (reproducible images).
var Epoch = time.Unix(0, 0).UTC()

// Entry is one file, directory or symbolic link of a layer.
type Entry struct {
	Path     string // absolute, inside the image
	Mode     os.FileMode
	UID, GID int
	// One of: Data (a regular file's bytes), Source (a file of this machine to copy),
	// Link (a symbolic link's target); a directory has Mode&os.ModeDir and none of them.
	Data   []byte
	Source string
	Link   string
}

// Dir, File, HostFile and Symlink make entries owned by root.
func Dir(p string, perm os.FileMode) Entry { return Entry{Path: p, Mode: os.ModeDir | perm} }
func File(p string, perm os.FileMode, data string) Entry {
	return Entry{Path: p, Mode: perm, Data: []byte(data)}
}
func HostFile(p string, perm os.FileMode, src string) Entry {
	return Entry{Path: p, Mode: perm, Source: src}
}
func Symlink(p, target string) Entry {
	return Entry{Path: p, Mode: os.ModeSymlink | 0o777, Link: target}
}

// Layer makes a gzip-compressed OCI layer of entries. Parent directories that no entry names
// are added (root, 0755); entries are written sorted by path, each at Epoch, so the layer's
// digest depends on its contents only. A Source is read when the layer is made.
func Layer(entries []Entry) (v1.Layer, error) {
	byPath := map[string]Entry{}
	for _, e := range entries {
		if !path.IsAbs(e.Path) || path.Clean(e.Path) != e.Path {
			return nil, fmt.Errorf("layer entry %q: want a clean absolute path", e.Path)
		}
		if _, dup := byPath[e.Path]; dup {
			return nil, fmt.Errorf("layer entry %q: named twice", e.Path)
		}
		byPath[e.Path] = e
	}
	for _, e := range entries {
		for d := path.Dir(e.Path); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = Dir(d, 0o755)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := byPath[p]
		h := &tar.Header{
			Name: strings.TrimPrefix(p, "/"), Mode: int64(e.Mode.Perm()), Uid: e.UID, Gid: e.GID,
			ModTime: Epoch, Format: tar.FormatPAX,
		}
		if e.Mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		var body []byte
		switch {
		case e.Mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case e.Mode&os.ModeSymlink != 0:
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.Link
		case e.Source != "":
			b, err := os.ReadFile(e.Source)
			if err != nil {
				return nil, fmt.Errorf("layer entry %s: %w", p, err)
			}
			body = b
		default:
			body = e.Data
		}
		if h.Typeflag == 0 {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
		if _, err := tw.Write(body); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
}
