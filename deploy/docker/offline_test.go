package docker_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"sigs.k8s.io/yaml"

	"github.com/profsym/profsym/pkg/dockerfile"
	"github.com/profsym/profsym/pkg/freeport"
	"github.com/profsym/profsym/pkg/testsupport"
)

// The offline builder's output, built once for the package's tests (go run ./deploy/imagebuild,
// every image, linux/amd64) into a folder removed by TestMain.
var offline struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if offline.dir != "" {
		_ = os.RemoveAll(offline.dir)
	}
	os.Exit(code)
}

// builtImages returns the output folder of the offline builder, building it on first use.
func builtImages(t *testing.T) string {
	t.Helper()
	// What the images are made of besides this repository: Debian's packages (MinIO comes from
	// the module proxy, built once into the tools folder).
	testsupport.NeedTools(t, "gcc", "redis-server", "python3", "dpkg-query")
	offline.once.Do(func() {
		dir, err := os.MkdirTemp("", "profsym-images-")
		if err != nil {
			offline.err = err
			return
		}
		offline.dir = dir
		start := time.Now()
		cmd := exec.CommandContext(context.Background(), "go", "run", "./deploy/imagebuild", "-out", dir, "-arch", "amd64")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			offline.err = fmt.Errorf("go run ./deploy/imagebuild: %w\n%s", err, out)
			return
		}
		t.Logf("offline images built in %s", time.Since(start).Round(time.Second))
	})
	if offline.err != nil {
		t.Fatal(offline.err)
	}
	return offline.dir
}

type indexEntry struct {
	Key, Name, Platform, File, Digest string
	Bytes                             int64
}

func readIndex(t *testing.T, dir string) map[string]indexEntry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var es []indexEntry
	if err := json.Unmarshal(b, &es); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	m := map[string]indexEntry{}
	for _, e := range es {
		m[e.Key] = e
	}
	return m
}

// imageFile is one file of an image's layers (the top-most layer's, as the runtime sees it).
type imageFile struct {
	hdr  *tar.Header
	data []byte // regular files under 256 MiB
}

// readImage reads an OCI layout tarball: its name annotation, config, and files.
func readImage(t *testing.T, archive string) (string, *v1.ConfigFile, map[string]imageFile) {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.CommandContext(t.Context(), "tar", "-xf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf %s: %v\n%s", archive, err, out)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s: not an OCI image layout: %v", archive, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%s: %d manifests, want 1", archive, len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]imageFile{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: layer: %v", archive, err)
			}
			f := imageFile{hdr: h}
			if h.Typeflag == tar.TypeReg && h.Size < 256<<20 {
				if f.data, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
			files["/"+strings.TrimSuffix(h.Name, "/")] = f
		}
		_ = rc.Close()
	}
	return im.Manifests[0].Annotations["io.containerd.image.name"], cf, files
}

// finalStage returns the raw instructions of a Dockerfile's last stage and its base.
func finalStage(t *testing.T, name string) (string, []dockerfile.Instruction) {
	t.Helper()
	ins := parse(t, filepath.Join(repoRoot, "deploy", "docker", name+".Dockerfile"))
	last := 0
	for i, in := range ins {
		if in.Cmd == "FROM" {
			last = i
		}
	}
	return ins[last].Args, ins[last+1:]
}

// kustomizeImages reads the service images' names and tags from the kustomize base (the objects
// rendered from the chart into deploy/k8s/base/generated): the manifests' names, which the
// offline images must carry for the manifests to run unchanged.
func kustomizeImages(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy/k8s/base/generated/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/k8s/base/generated: no rendered manifests (%v)", err)
	}
	m := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
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
				t.Fatalf("%s: %v", f, err)
			}
			for _, c := range d.Spec.Template.Spec.Containers {
				m[c.Name] = c.Image
			}
		}
	}
	return m
}

// TestOfflineImagesFollowDockerfiles holds the offline build to the Dockerfiles: each service
// image's config says what the Dockerfile's final stage says (USER, ENTRYPOINT, CMD, ENV, WORKDIR,
// EXPOSE; linux/amd64), its layers hold a static x86-64 binary at the path the Dockerfile copies
// it to, which runs, over the distroless static nonroot layout (users root and nonroot 65532,
// /home/nonroot, /tmp 1777, the CA bundle, the time zones), under the name the manifests give it.
func TestOfflineImagesFollowDockerfiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the images (the three services for linux/amd64)")
	}
	dir := builtImages(t)
	index := readIndex(t, dir)
	names := kustomizeImages(t)
	for _, s := range services {
		t.Run(s.name, func(t *testing.T) {
			e, ok := index[s.name]
			if !ok {
				t.Fatalf("index.json has no %s image", s.name)
			}
			name, cf, files := readImage(t, filepath.Join(dir, e.File))
			if name != names[s.name] || e.Name != name {
				t.Errorf("image name %q (index %q), the manifests run %q", name, e.Name, names[s.name])
			}
			if cf.OS != "linux" || cf.Architecture != "amd64" {
				t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
			}
			base, final := finalStage(t, s.name)
			if base != "gcr.io/distroless/static-debian12:nonroot" {
				t.Fatalf("the Dockerfile's image stage starts FROM %s: the offline base stands in for distroless/static-debian12:nonroot", base)
			}
			wantEnv := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
			wantWorkdir, wantUser := "/home/nonroot", "65532"
			var wantEntry, wantCmd []string
			var wantPorts []string
			var copies [][2]string
			for _, in := range final {
				switch in.Cmd {
				case "USER":
					wantUser = in.Args
				case "ENTRYPOINT":
					if err := json.Unmarshal([]byte(in.Args), &wantEntry); err != nil {
						t.Fatalf("line %d: %v", in.Line, err)
					}
				case "CMD":
					if err := json.Unmarshal([]byte(in.Args), &wantCmd); err != nil {
						t.Fatalf("line %d: %v", in.Line, err)
					}
				case "WORKDIR":
					wantWorkdir = in.Args
				case "ENV":
					wantEnv = append(wantEnv, strings.Fields(in.Args)...)
				case "EXPOSE":
					for _, p := range strings.Fields(in.Args) {
						if !strings.Contains(p, "/") {
							p += "/tcp"
						}
						wantPorts = append(wantPorts, p)
					}
				case "COPY":
					f := strings.Fields(in.Args)
					copies = append(copies, [2]string{f[len(f)-2], f[len(f)-1]})
				}
			}
			c := cf.Config
			if c.User != wantUser || wantUser != "65532:65532" {
				t.Errorf("User %q, the Dockerfile says %q (want 65532:65532)", c.User, wantUser)
			}
			if !slices.Equal(c.Entrypoint, wantEntry) || len(wantEntry) == 0 {
				t.Errorf("Entrypoint %q, the Dockerfile says %q", c.Entrypoint, wantEntry)
			}
			if !slices.Equal(c.Cmd, wantCmd) {
				t.Errorf("Cmd %q, the Dockerfile says %q", c.Cmd, wantCmd)
			}
			if !slices.Equal(c.Env, wantEnv) {
				t.Errorf("Env %q, want %q", c.Env, wantEnv)
			}
			if c.WorkingDir != wantWorkdir {
				t.Errorf("WorkingDir %q, want %q", c.WorkingDir, wantWorkdir)
			}
			var ports []string
			for p := range c.ExposedPorts {
				ports = append(ports, p)
			}
			sort.Strings(ports)
			sort.Strings(wantPorts)
			if !slices.Equal(ports, wantPorts) {
				t.Errorf("ExposedPorts %v, the Dockerfile says %v", ports, wantPorts)
			}
			if len(copies) != 1 {
				t.Fatalf("the Dockerfile's image stage copies %v: want the one binary", copies)
			}
			dst := copies[0][1]
			if dst != wantEntry[0] {
				t.Errorf("the binary is copied to %s, the entrypoint runs %s", dst, wantEntry[0])
			}
			checkBinary(t, files, dst)
			checkDistrolessLayout(t, files)
		})
	}
}

// checkBinary: the file is in the image, executable, a static x86-64 ELF, and runs (--help).
func checkBinary(t *testing.T, files map[string]imageFile, p string) {
	t.Helper()
	f, ok := files[p]
	if !ok {
		t.Fatalf("no %s in the image's layers", p)
	}
	if f.hdr.Typeflag != tar.TypeReg || f.hdr.Mode&0o111 != 0o111 || f.data == nil {
		t.Fatalf("%s: type %c mode %o: want an executable regular file", p, f.hdr.Typeflag, f.hdr.Mode)
	}
	ef, err := elf.NewFile(bytes.NewReader(f.data))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	if ef.Machine != elf.EM_X86_64 {
		t.Errorf("%s: machine %v", p, ef.Machine)
	}
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s: has a program interpreter: not static, distroless static cannot run it", p)
		}
	}
	bin := filepath.Join(t.TempDir(), path.Base(p))
	if err := os.WriteFile(bin, f.data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin, "--help").CombinedOutput()
	if err != nil || !strings.Contains(strings.ToLower(string(out)), "usage") {
		t.Errorf("%s --help: %v\n%s", p, err, out)
	}
}

// checkDistrolessLayout: what distroless static nonroot has and a service relies on.
func checkDistrolessLayout(t *testing.T, files map[string]imageFile) {
	t.Helper()
	want := func(p string, typ byte, mode int64, uid int) imageFile {
		f, ok := files[p]
		if !ok {
			t.Errorf("no %s in the image", p)
			return imageFile{}
		}
		if f.hdr.Typeflag != typ || f.hdr.Mode != mode || f.hdr.Uid != uid {
			t.Errorf("%s: type %c mode %o uid %d, want %c %o %d", p, f.hdr.Typeflag, f.hdr.Mode, f.hdr.Uid, typ, mode, uid)
		}
		return f
	}
	if f := want("/etc/passwd", tar.TypeReg, 0o644, 0); !bytes.Contains(f.data, []byte("\nnonroot:x:65532:65532:nonroot:/home/nonroot:")) || !bytes.HasPrefix(f.data, []byte("root:x:0:0:")) {
		t.Errorf("/etc/passwd: %q", f.data)
	}
	if f := want("/etc/group", tar.TypeReg, 0o644, 0); !bytes.Contains(f.data, []byte("\nnonroot:x:65532:")) {
		t.Errorf("/etc/group: %q", f.data)
	}
	want("/home/nonroot", tar.TypeDir, 0o700, 65532)
	want("/tmp", tar.TypeDir, 0o1777, 0)
	if f := want("/etc/ssl/certs/ca-certificates.crt", tar.TypeReg, 0o644, 0); bytes.Count(f.data, []byte("BEGIN CERTIFICATE")) < 50 {
		t.Errorf("the CA bundle holds %d certificates", bytes.Count(f.data, []byte("BEGIN CERTIFICATE")))
	}
	if f := want("/usr/share/zoneinfo/Europe/Paris", tar.TypeReg, 0o644, 0); !bytes.HasPrefix(f.data, []byte("TZif")) {
		t.Error("/usr/share/zoneinfo/Europe/Paris is not a TZif file")
	}
	if f := want("/etc/os-release", tar.TypeReg, 0o644, 0); !bytes.Contains(f.data, []byte("VERSION_ID=\"12\"")) {
		t.Errorf("/etc/os-release: %q, want Debian 12's", f.data)
	}
	want("/etc/nsswitch.conf", tar.TypeReg, 0o644, 0)
	for p := range files {
		if strings.HasPrefix(p, "/bin/") || p == "/bin/sh" || strings.HasPrefix(p, "/usr/bin/") {
			t.Errorf("%s: distroless static has no shell or programs besides the service", p)
		}
	}
}

// containerd is a containerd this test started, with its own root, state and socket.
type containerd struct {
	sock string
	ns   string
}

func (c containerd) ctr(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "ctr", append([]string{"--address", c.sock, "-n", c.ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func startContainerd(t *testing.T) containerd {
	t.Helper()
	// A short folder: the socket's path must fit in a sockaddr_un.
	dir, err := os.MkdirTemp("", "ctd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), filepath.Join(dir, "c.sock"), filepath.Join(dir, "c.sock.ttrpc"), filepath.Join(dir, "opt"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), "containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c := containerd{sock: filepath.Join(dir, "c.sock"), ns: "profsym-imagetest"}
	t.Cleanup(func() {
		// Containers first (their shims outlive containerd otherwise), then containerd itself.
		out, _ := exec.CommandContext(context.Background(), "ctr", "--address", c.sock, "-n", c.ns, "tasks", "ls", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.CommandContext(context.Background(), "ctr", "--address", c.sock, "-n", c.ns, "tasks", "kill", "-s", "SIGKILL", id).Run()
			_ = exec.CommandContext(context.Background(), "ctr", "--address", c.sock, "-n", c.ns, "tasks", "rm", "-f", id).Run()
		}
		out, _ = exec.CommandContext(context.Background(), "ctr", "--address", c.sock, "-n", c.ns, "containers", "ls", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.CommandContext(context.Background(), "ctr", "--address", c.sock, "-n", c.ns, "containers", "rm", id).Run()
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Logf("containerd exited: %v", err)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Logf("containerd killed after 20 s: %v", <-done)
		}
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("containerd log (tail):\n%s", tail(string(b), 30))
		}
		// The overlay snapshots are unmounted with their containers; the root goes with dir.
	})
	for {
		if err := exec.CommandContext(t.Context(), "ctr", "--address", c.sock, "version").Run(); err == nil {
			return c
		}
		select {
		case err := <-done:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("containerd exited: %v\n%s", err, tail(string(b), 30))
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// runDetached starts a container of image with the host's network (loopback only is used) and
// returns a function that stops it with SIGTERM and returns its exit status and output, and the
// output so far.
func (c containerd) runDetached(t *testing.T, image, id string, extra []string, args ...string) (func() (int, string), *testsupport.Buffer) {
	t.Helper()
	out := &testsupport.Buffer{}
	cmdArgs := append(append([]string{"--address", c.sock, "-n", c.ns, "run", "--rm", "--net-host"}, extra...), image, id)
	cmd := exec.CommandContext(context.Background(), "ctr", append(cmdArgs, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	var code int
	stop := func() (int, string) {
		once.Do(func() {
			for {
				select {
				case <-done:
					code = cmd.ProcessState.ExitCode()
					return
				default:
				}
				_ = exec.CommandContext(context.Background(), "ctr", "--address", c.sock, "-n", c.ns, "tasks", "kill", "-s", "SIGTERM", id).Run()
				select {
				case <-done:
				case <-time.After(time.Second):
				}
			}
		})
		return code, out.String()
	}
	t.Cleanup(func() { stop() })
	return stop, out
}

func get(t *testing.T, url string) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp, resp.Body.Close()
}

// waitFor polls check until it returns nil or the test's deadline.
func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	var err error
	for i := 0; ; i++ {
		if err = check(); err == nil {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
		if i == 1200 {
			t.Fatalf("%s after 2 minutes: %v", what, err)
		}
	}
}

// TestOfflineImagesRunInContainerd loads every image the offline builder writes into a
// containerd of its own (own root, state, socket and namespace) with `ctr images import`, as the
// cluster does, and runs them there as the chart runs them: the symbolizer serving /healthz on
// loopback as user 65532, Redis with the chart's arguments as 999 on a read-only root, MinIO as
// 1000 with its data folder mounted, the pause image stopping on SIGTERM, and the workloads.
func TestOfflineImagesRunInContainerd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the images and runs containerd")
	}
	testsupport.NeedTools(t, "containerd", "runc", "ctr")
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("containerd needs root, and CI runs as root")
		}
		t.Skip("containerd needs root")
	}
	dir := builtImages(t)
	c := startContainerd(t)
	f, err := os.Open(filepath.Join(dir, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			t.Fatalf("images.txt: line %q: want PLATFORM NAME FILE", sc.Text())
		}
		out := c.ctr(t, "images", "import", filepath.Join(dir, fs[2]))
		if !strings.Contains(out, fs[1]) {
			t.Errorf("ctr images import %s: %q does not name %s", fs[2], out, fs[1])
		}
		names = append(names, fs[1])
	}
	listed := strings.Fields(c.ctr(t, "images", "ls", "-q"))
	for _, n := range names {
		if !slices.Contains(listed, n) {
			t.Errorf("image %s not listed after import: %v", n, listed)
		}
	}
	idx := readIndex(t, dir)
	image := func(key string) string { return idx[key].Name }

	t.Run("symbolizer", func(t *testing.T) {
		out := c.ctr(t, "run", "--rm", image("symbolizer"), "sym-help", "/usr/local/bin/symbolizer", "--help")
		if !strings.Contains(out, "Usage: symbolizer") {
			t.Fatalf("symbolizer --help in the container: %q", out)
		}
		port, err := freeport.Port()
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		// The image's own entrypoint and user; /tmp is the only folder nonroot may write.
		stop, _ := c.runDetached(t, image("symbolizer"), "sym-serve", nil, "/usr/local/bin/symbolizer", "serve", "--listen", addr, "--store-dir", "/tmp/store")
		waitFor(t, "symbolizer /healthz", func() error {
			resp, err := get(t, "http://"+addr+"/healthz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		})
		if code, out := stop(); code != 0 {
			t.Errorf("symbolizer exited %d on SIGTERM:\n%s", code, out)
		}
	})
	t.Run("redis", func(t *testing.T) {
		port, err := freeport.Port()
		if err != nil {
			t.Fatal(err)
		}
		// The chart's arguments, after the image's entrypoint, as its user, on a read-only root.
		stop, _ := c.runDetached(t, image("redis"), "redis", []string{"--read-only"}, "/usr/bin/redis-server",
			"--save", "", "--appendonly", "no", "--maxmemory", "512mb", "--maxmemory-policy", "allkeys-lru", "--protected-mode", "no",
			"--bind", "127.0.0.1", "--port", fmt.Sprint(port))
		waitFor(t, "redis PING", func() error {
			conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(t.Context(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				return err
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := conn.Write([]byte("PING\r\n")); err != nil {
				return err
			}
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil {
				return err
			}
			if line != "+PONG\r\n" {
				return fmt.Errorf("PING answered %q", line)
			}
			return nil
		})
		if code, out := stop(); code != 0 {
			t.Errorf("redis exited %d on SIGTERM:\n%s", code, out)
		}
	})
	t.Run("minio", func(t *testing.T) {
		ports, err := freeport.Ports(2)
		if err != nil {
			t.Fatal(err)
		}
		data := t.TempDir()
		if err := os.Chown(data, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		stop, _ := c.runDetached(t, image("minio"), "minio",
			[]string{"--read-only", "--mount", "type=bind,src=" + data + ",dst=/data,options=rbind:rw",
				"--env", "MINIO_BROWSER=off", "--env", "MINIO_ROOT_USER=profsym-test", "--env", "MINIO_ROOT_PASSWORD=profsym-test-secret"},
			"/usr/bin/minio", "server", "/data", "--address", addr, "--console-address", fmt.Sprintf("127.0.0.1:%d", ports[1]))
		waitFor(t, "minio /minio/health/ready", func() error {
			resp, err := get(t, "http://"+addr+"/minio/health/ready")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		})
		stop()
	})
	t.Run("pause", func(t *testing.T) {
		stop, output := c.runDetached(t, image("pause"), "pause", nil)
		// A SIGTERM before the program's handler is in place ends it with the Go runtime's
		// status 2: wait for the line it prints once the handler is installed.
		waitFor(t, "pause waiting", func() error {
			if out := output.String(); !strings.Contains(out, "pause: waiting for SIGTERM") {
				return fmt.Errorf("output so far: %q", out)
			}
			return nil
		})
		if code, out := stop(); code != 0 {
			t.Errorf("pause exited %d on SIGTERM, want 0:\n%s", code, out)
		}
	})
	for key, banner := range map[string]string{
		"workload-c": "cchain: spinning", "workload-go": "gochain: spinning", "workload-python": "pyloop: spinning",
	} {
		t.Run(key, func(t *testing.T) {
			stop, output := c.runDetached(t, image(key), key, nil)
			waitFor(t, key+" in its loop", func() error {
				if !strings.Contains(output.String(), banner) {
					return fmt.Errorf("output %q", output.String())
				}
				return nil
			})
			// Each stops on SIGTERM with status 0.
			code, out := stop()
			if code != 0 || !strings.Contains(out, banner) {
				t.Errorf("%s: exit %d, output %q, want 0 and %q", key, code, out, banner)
			}
		})
	}
}
