package testsupport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// symbolizerDir holds the symbolizer binary once built; RemoveFixtures removes it.
var symbolizerDir string

// symbolizerBin is the real symbolizer, built once per test binary from the main module, wherever
// the test runs: `go list -m` finds the main module's directory both from the main module and
// from a module that replaces it with a local path (the Collector processor's module).
var symbolizerBin = sync.OnceValues(func() (string, error) {
	// Built once for the whole test binary, so no single test's context applies.
	ctx := context.Background()
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/profsym/profsym").Output()
	if err != nil {
		return "", fmt.Errorf("find the profsym module: %w", err)
	}
	dir, err := os.MkdirTemp("", "test-symbolizer-")
	if err != nil {
		return "", err
	}
	symbolizerDir = dir
	out := filepath.Join(dir, "symbolizer")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./services/symbolizer")
	cmd.Dir = strings.TrimSpace(string(root))
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build symbolizer: %w\n%s", err, b)
	}
	return out, nil
})

// Symbolizer is `symbolizer serve` as a child process on a loopback port, with a folder store;
// it can be stopped and started again on the same port and store (the fault drills).
type Symbolizer struct {
	bin, storeDir, redisURL string
	// Token is the bearer token uploads (and protected reads) need.
	Token string
	extra []string // more flags for serve
	port  int
	cmd   *exec.Cmd
	// exited is closed when cmd has been waited for.
	exited chan struct{}
	logs   *os.File
	// t and ctx belong to the test that owns the server: restarts in the drills live as long
	// as that test, not as the subtest that restarts them.
	t   testing.TB
	ctx context.Context
}

// StartSymbolizer builds the symbolizer (once per test binary) and runs it; redisURL may be
// empty, extra are more flags for serve. It stops when the test ends.
func StartSymbolizer(t testing.TB, redisURL string, extra ...string) *Symbolizer {
	t.Helper()
	bin, err := symbolizerBin()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &Symbolizer{bin: bin, storeDir: filepath.Join(dir, "store"), Token: "test-token", redisURL: redisURL,
		extra: extra, t: t, ctx: t.Context()}
	s.logs, err = os.Create(filepath.Join(dir, "symbolizer.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.port = FreePort(t)
	s.Start(t)
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(s.logs.Name())
			t.Logf("symbolizer log:\n%s", b[max(0, len(b)-4000):])
		}
		s.logs.Close()
	})
	return s
}

// URL is the server's base URL.
func (s *Symbolizer) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.port) }

// Start runs the server and waits for /readyz; a port taken meanwhile by someone else gets a
// new port.
func (s *Symbolizer) Start(t testing.TB) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		args := []string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", s.port), "--store-dir", s.storeDir,
			"--upload-token", s.Token, "--log-level", "warn"}
		if s.redisURL != "" {
			args = append(args, "--redis-url", s.redisURL, "--redis-timeout", "100ms")
		}
		args = append(args, s.extra...)
		cmd := exec.CommandContext(s.ctx, s.bin, args...)
		cmd.Stdout, cmd.Stderr = s.logs, s.logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		// An early exit shows through exited; the log says why.
		go func() { _ = cmd.Wait(); close(exited) }()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				if attempt < 3 {
					s.port = FreePort(t)
					goto retry
				}
				t.Fatal("symbolizer exited during start; see its log")
			default:
			}
			req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, s.URL()+"/readyz", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					s.cmd, s.exited = cmd, exited
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Errorf("kill symbolizer: %v", err)
		}
		t.Fatal("symbolizer not ready after 20s")
	retry:
	}
}

// Stop kills the server (SIGKILL: the drills want an abrupt outage) and waits for it.
func (s *Symbolizer) Stop() {
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Errorf("kill symbolizer: %v", err)
	}
	select {
	case <-s.exited:
	case <-time.After(2 * time.Second):
		s.t.Errorf("symbolizer %d still running 2 s after SIGKILL", s.cmd.Process.Pid)
	}
	s.cmd = nil
}

// Terminate asks the server to stop (SIGTERM: a rolling update's graceful stop) and waits up to
// limit for it to exit, returning how long that took; past limit it kills it and fails t.
func (s *Symbolizer) Terminate(limit time.Duration) time.Duration {
	if s.cmd == nil {
		return 0
	}
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Errorf("terminate symbolizer: %v", err)
	}
	select {
	case <-s.exited:
		s.cmd = nil
		return time.Since(start)
	case <-time.After(limit):
		s.t.Errorf("symbolizer still running %v after SIGTERM", limit)
		s.Stop()
		return time.Since(start)
	}
}

// PID is the running server's process ID (0 when stopped), for RSS samples.
func (s *Symbolizer) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// StoreDir is the server's folder store (unused when extra flags choose S3).
func (s *Symbolizer) StoreDir() string { return s.storeDir }

// Log returns what the server wrote so far, over every start.
func (s *Symbolizer) Log() string {
	b, err := os.ReadFile(s.logs.Name())
	if err != nil {
		return "read symbolizer log: " + err.Error()
	}
	return string(b)
}

// Upload sends files with the real upload client; flags such as --type may stand among the
// paths.
func (s *Symbolizer) Upload(t testing.TB, paths ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), s.bin, append([]string{"upload", "--server", s.URL(), "--token", s.Token, "--progress", "plain"}, paths...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("symbolizer upload: %v\n%s", err, b)
	}
}

// RemoveFixtures removes what the fixtures shared by a test binary (the symbolizer binary)
// left behind; a TestMain calls it after m.Run.
func RemoveFixtures() error {
	if symbolizerDir == "" {
		return nil
	}
	return os.RemoveAll(symbolizerDir)
}
