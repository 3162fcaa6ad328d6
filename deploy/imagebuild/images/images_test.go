package images

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// files lists the single layer of img: path -> type flag and link target.
func files(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 {
		t.Fatalf("%d layers, want 1", len(ls))
	}
	rc, err := ls[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = string(h.Typeflag) + h.Linkname
	}
}

func TestPause(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	img, err := Pause(t.Context(), "", t.TempDir(), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != "amd64" || cf.Config.User != "65535:65535" || !slices.Equal(cf.Config.Entrypoint, []string{"/pause"}) {
		t.Errorf("config: arch %s user %q entrypoint %q", cf.Architecture, cf.Config.User, cf.Config.Entrypoint)
	}
	if f := files(t, img); f["pause"] != string(tar.TypeReg) || len(f) != 1 {
		t.Errorf("layer: %v, want the program alone at /pause", f)
	}
}

func TestBusybox(t *testing.T) {
	const bb = "/bin/busybox"
	if err := static(bb); err != nil {
		t.Skipf("no static busybox (Debian's busybox-static): %v", err)
	}
	img, err := Busybox(bb, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	f := files(t, img)
	if f["bin/busybox"] != string(tar.TypeReg) || f["tmp/"] != string(tar.TypeDir) {
		t.Errorf("layer: %v", f)
	}
	for _, a := range BusyboxApplets {
		if f["bin/"+a] != string(tar.TypeSymlink)+"busybox" {
			t.Errorf("bin/%s: %q, want a link to busybox", a, f["bin/"+a])
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cf.Config.Env, "PATH=/bin") {
		t.Errorf("env %q lacks PATH=/bin", cf.Config.Env)
	}
}

func TestStaticBinaryRefusesDynamic(t *testing.T) {
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skip(err)
	}
	if _, err := StaticBinary(sh, "amd64"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("StaticBinary(%s) = %v, want a dynamically-linked error", sh, err)
	}
	junk := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(junk, []byte("not an ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := StaticBinary(junk, "amd64"); err == nil || !strings.Contains(err.Error(), junk) {
		t.Errorf("StaticBinary(junk) = %v, want an error naming the file", err)
	}
}
