package testsupport

import (
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/freeport"
)

// FreePort returns a TCP port that was free on every local address a moment
// ago. Another process may take it before the caller binds it; the servers
// in this package retry with another port when that happens.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Port()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return port
}

// CompileC writes src to a fresh temporary directory, compiles it with gcc
// and returns the path of the binary. args go to gcc after the source file,
// so both compiler flags (-g -O2) and linker flags (-Wl,--build-id, -lm)
// work.
func CompileC(t testing.TB, src string, args ...string) string {
	t.Helper()
	gcc := lookBinary(t, "gcc", aptHint("gcc"))
	dir := t.TempDir()
	srcPath := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatalf("write C source: %v", err)
	}
	out := filepath.Join(dir, "prog")
	cmdArgs := append([]string{"-o", out, srcPath}, args...)
	cmd := exec.CommandContext(t.Context(), gcc, cmdArgs...)
	cmd.Dir = dir
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(cmdArgs, " "), err, output)
	}
	return out
}

// BuildGo writes src as the main package of a module of its own in dir (created if need be),
// builds it with the go command and returns the binary's path. env adds to the build's
// environment (CGO_ENABLED=0 or 1, say); the caller's workspace and GOFLAGS are left out.
func BuildGo(t testing.TB, dir, src string, env ...string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module testprog\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "testprog")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS="), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// RequireTools fails the test unless every tool is in PATH: the tools .ci/install-deps
// installs, which a pipeline must not pass by skipping.
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required (bash .ci/install-deps installs it): %v", tool, err)
		}
	}
}

// lookBinary finds name in PATH or fails the test saying how to install it.
func lookBinary(t testing.TB, name, hint string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is required by this test but was not found (%v): %s", name, err, hint)
	}
	return path
}

// ToolPath returns the path of a tool .ci/install-deps put in the tools folder
// (${PROFSYM_TOOLS:-$HOME/.cache/profsym/bin}), or "" when it is not there.
func ToolPath(name string) string {
	p := filepath.Join(toolsDir(), name)
	if ok, err := isExecutable(p); err != nil || !ok {
		return ""
	}
	return p
}

// toolsDir is where .ci/install-deps puts tools that Debian does not package.
func toolsDir() string {
	if dir := os.Getenv("PROFSYM_TOOLS"); dir != "" {
		return dir
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "profsym", "bin")
}

// isExecutable reports whether path is a regular file with an execute bit.
func isExecutable(path string) (bool, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0, nil
}

func aptHint(pkg string) string {
	return "install it with `apt-get install -y " + pkg + "` or run .ci/install-deps"
}

// Get GETs url with the test's context and returns the status and the body.
func Get(t testing.TB, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, body
}

// NeedTools skips the test unless every tool is in PATH, and fails it instead when CI is set:
// a pipeline, which installs them all (.ci/install-deps), must not pass by skipping.
func NeedTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is required (bash .ci/install-deps installs it): %v", tool, err)
			}
			t.Skipf("%s not in PATH (bash .ci/install-deps installs it): %v", tool, err)
		}
	}
}

// ARM64Tools are the cross toolchain that builds arm64 test binaries on another machine
// (Debian's gcc-aarch64-linux-gnu and g++-aarch64-linux-gnu).
var ARM64Tools = []string{"aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "aarch64-linux-gnu-objcopy", "aarch64-linux-gnu-strip"}
