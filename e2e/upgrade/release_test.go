package upgrade

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the directory of the profsym module.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", "github.com/profsym/profsym").Output()
	if err != nil {
		t.Fatalf("find the profsym module: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// goBuild builds the symbolizer of the source tree in dir into out.
func goBuild(ctx context.Context, dir, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-o", out, "./services/symbolizer")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %w\n%s", dir, err, b)
	}
	return nil
}

// currentBinary builds this tree's symbolizer.
func currentBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "symbolizer")
	if err := goBuild(t.Context(), repoRoot(t), out); err != nil {
		t.Fatal(err)
	}
	return out
}

// releaseBinary returns the symbolizer of commit, built from the repository's history into the
// user's cache (profsym/upgrade/<commit>/symbolizer) the first time: about 40 s, then none.
// Without git or the commit (a shallow clone), the test skips on a developer's machine and
// fails in CI, which must fetch the history.
func releaseBinary(t *testing.T, commit string) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(cache, "profsym", "upgrade", commit, "symbolizer")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	skip := t.Skipf
	if os.Getenv("CI") != "" {
		skip = t.Fatalf
	}
	if _, err := exec.LookPath("git"); err != nil {
		skip("git is needed to build the earlier release: %v", err)
	}
	root := repoRoot(t)
	if err := exec.CommandContext(t.Context(), "git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		skip("commit %s is not in the repository's history (a shallow clone? git fetch --unshallow): %v", commit, err)
	}
	src := t.TempDir()
	archive := exec.CommandContext(t.Context(), "git", "-C", root, "archive", "--format=tar", commit)
	untar := exec.CommandContext(t.Context(), "tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archErr strings.Builder
	archive.Stderr = &archErr
	if err := archive.Start(); err != nil {
		t.Fatal(err)
	}
	if b, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("extract %s: %v\n%s", commit, err, b)
	}
	if err := archive.Wait(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, archErr.String())
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := out + fmt.Sprintf(".%d.tmp", os.Getpid())
	if err := goBuild(t.Context(), src, tmp); err != nil {
		t.Fatal(err)
	}
	// Two test processes building at once each rename a whole binary.
	if err := os.Rename(tmp, out); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	return out
}
