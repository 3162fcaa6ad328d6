package testsupport

import (
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const minioRegion = "us-east-1"

// MinIO is a single-drive MinIO server child process on 127.0.0.1 with
// fresh random credentials.
type MinIO struct {
	t         testing.TB
	srv       *server
	accessKey string
	secretKey string
}

// StartMinIO starts a MinIO server on a free loopback port and waits until
// /minio/health/ready answers 200. The binary is $PROFSYM_MINIO, else
// ${PROFSYM_TOOLS:-$HOME/.cache/profsym/bin}/minio, else minio in PATH.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	bin := minioBinary(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		t.Fatalf("create MinIO data dir: %v", err)
	}
	m := &MinIO{
		t:         t,
		accessKey: "profsym-" + randomHex(t, 4),
		secretKey: randomHex(t, 16),
	}
	spec := launchSpec{
		name:  "minio",
		bin:   bin,
		ports: 2,
		args: func(ports []int) []string {
			// The console port is pinned as well: left alone MinIO picks a
			// random one that can collide with another test's server.
			return []string{
				"server", dataDir,
				"--address", minioAddr(ports[0]),
				"--console-address", minioAddr(ports[1]),
			}
		},
		// Inherited MINIO_* settings (a developer's own server) must not
		// change the test server.
		env: childEnv(func(key string) bool { return strings.HasPrefix(key, "MINIO_") },
			"MINIO_ROOT_USER="+m.accessKey,
			"MINIO_ROOT_PASSWORD="+m.secretKey,
			"MINIO_BROWSER=off",
			"MINIO_SITE_REGION="+minioRegion,
			"MINIO_UPDATE=off",
		),
		dir: dir,
		ready: func(ctx context.Context, ports []int) error {
			return httpStatus(ctx, "http://"+minioAddr(ports[0])+"/minio/health/ready", http.StatusOK)
		},
	}
	m.srv = newServer(t, spec, dir)
	took, err := m.srv.start()
	if err != nil {
		t.Fatalf("start minio: %v", err)
	}
	t.Logf("minio ready at %s in %v", m.Endpoint(), took.Round(1e6))
	return m
}

// Endpoint returns host:port of the S3 API, as minio-go and most S3
// clients take it (without scheme; the server speaks plain HTTP).
func (m *MinIO) Endpoint() string {
	m.srv.mu.Lock()
	defer m.srv.mu.Unlock()
	return minioAddr(m.srv.ports[0])
}

// AccessKey returns the root user's access key.
func (m *MinIO) AccessKey() string { return m.accessKey }

// SecretKey returns the root user's secret key.
func (m *MinIO) SecretKey() string { return m.secretKey }

// Region returns the region the server reports and signs for.
func (m *MinIO) Region() string { return minioRegion }

// Stop stops the server.
func (m *MinIO) Stop() {
	m.t.Helper()
	if err := m.srv.stop(); err != nil {
		m.t.Fatalf("stop minio: %v", err)
	}
}

// Kill ends MinIO with SIGKILL, as a crash or an OOM kill would: no graceful shutdown.
func (m *MinIO) Kill() {
	m.t.Helper()
	if err := m.srv.kill(); err != nil {
		m.t.Fatalf("kill minio: %v", err)
	}
}

// Restart starts MinIO again on the same ports and data (after Stop or Kill, or while it runs).
func (m *MinIO) Restart() {
	m.t.Helper()
	took, err := m.srv.restart()
	if err != nil {
		m.t.Fatalf("restart minio: %v", err)
	}
	m.t.Logf("minio restarted at %s in %v", m.Endpoint(), took.Round(1e6))
}

// MinIOBinary is the MinIO server binary the tests run: a large real Go program (about
// 150 MB with its DWARF), also useful as one. It fails a test whose binary has no symbol table
// or no DWARF: a stripped build says so here rather than as the symbolizer's "no symbol
// section" deep in a drill.
func MinIOBinary(t testing.TB) string {
	t.Helper()
	path := minioBinary(t)
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("MinIO as a large Go program: %v", err)
	}
	defer func() { _ = f.Close() }()
	for _, name := range []string{".symtab", ".debug_info"} {
		if f.Section(name) == nil {
			t.Fatalf("%s has no %s section (built stripped): rebuild it with .ci/install-deps, which keeps MinIO's symbols and DWARF", path, name)
		}
	}
	return path
}

// Client returns a minio-go client with the root credentials.
func (m *MinIO) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(m.Endpoint(), &minio.Options{
		Creds:  credentials.NewStaticV4(m.accessKey, m.secretKey, ""),
		Secure: false,
		Region: minioRegion,
	})
	if err != nil {
		t.Fatalf("minio client for %s: %v", m.Endpoint(), err)
	}
	return c
}

// NewBucket creates the bucket name and returns a client for the server.
func (m *MinIO) NewBucket(t testing.TB, name string) *minio.Client {
	t.Helper()
	c := m.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: minioRegion}); err != nil {
		t.Fatalf("create bucket %q on %s: %v", name, m.Endpoint(), err)
	}
	return c
}

func minioAddr(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func minioBinary(t testing.TB) string {
	t.Helper()
	const install = "install it with .ci/install-deps (it builds the MinIO that .ci/pins names into ${PROFSYM_TOOLS:-$HOME/.cache/profsym/bin})"
	if path := os.Getenv("PROFSYM_MINIO"); path != "" {
		ok, err := isExecutable(path)
		if err != nil || !ok {
			t.Fatalf("PROFSYM_MINIO=%s is not an executable file (%v): %s", path, err, install)
		}
		return path
	}
	if dir := toolsDir(); dir != "" {
		path := filepath.Join(dir, "minio")
		if ok, err := isExecutable(path); err != nil {
			t.Fatalf("check %s: %v", path, err)
		} else if ok {
			return path
		}
	}
	return lookBinary(t, "minio", install)
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random credentials: %v", err)
	}
	return hex.EncodeToString(b)
}

// httpStatus does one GET and wants the given status.
func httpStatus(ctx context.Context, url string, want int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("GET %s: status %d, want %d", url, resp.StatusCode, want)
	}
	return nil
}
