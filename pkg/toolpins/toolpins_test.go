package toolpins

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string
		want          Pins
	}{
		{name: "comments and blanks", in: "# c\n\nminio github.com/minio/minio v1.2.3 .\n",
			want: Pins{{Name: "minio", Module: "github.com/minio/minio", Version: "v1.2.3", Package: "."}}},
		{name: "package path", in: "helm helm.sh/helm/v3 v3.21.4 ./cmd/helm\n",
			want: Pins{{Name: "helm", Module: "helm.sh/helm/v3", Version: "v3.21.4", Package: "./cmd/helm"}}},
		{name: "three fields", in: "a b v1\n", err: "want 4 fields"},
		{name: "release tag", in: "m github.com/minio/minio RELEASE.2025-09-07T16-13-09Z .\n", err: "not an exact module version"},
		{name: "latest", in: "m example.com/m vlatest .\n", err: "not an exact module version"},
		{name: "twice", in: "a example.com/a v1.0.0 .\na example.com/a v1.0.1 .\n", err: "named twice"},
		{name: "package not relative", in: "a example.com/a v1.0.0 cmd/a\n", err: "not . or ./path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse: err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Parse = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if got := (Pin{Module: "helm.sh/helm/v3", Version: "v3.21.4", Package: "./cmd/helm"}).Install(); got != "helm.sh/helm/v3/cmd/helm@v3.21.4" {
		t.Fatalf("Install = %s", got)
	}
}

// moduleVersion is a version of a module the repository builds, and where it is named.
type moduleVersion struct {
	module.Version
	where string
}

// TestPinsServed asks the module proxy for the zip of every pinned tool and of every module a
// go.mod of the repository requires directly: a version the proxy no longer serves fails here,
// on the machine whose module cache still holds it. It asks the proxy by HTTP, not through the
// go command, which answers from the module cache when it has the version.
func TestPinsServed(t *testing.T) {
	if testing.Short() {
		t.Skip("asks the module proxy over the network")
	}
	root := repoRoot(t)
	proxy := moduleProxy(t)
	pins, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var want []moduleVersion
	for _, p := range pins {
		want = append(want, moduleVersion{module.Version{Path: p.Module, Version: p.Version}, File + " " + p.Name})
	}
	for _, gm := range gitFiles(t, root, "*go.mod") {
		data, err := os.ReadFile(filepath.Join(root, gm))
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.ParseLax(gm, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		replaced := map[string]bool{}
		for _, r := range f.Replace {
			replaced[r.Old.Path] = true
		}
		for _, r := range f.Require {
			// The repository's own modules come from the tree, not the proxy.
			if r.Indirect || replaced[r.Mod.Path] || strings.HasPrefix(r.Mod.Path, "github.com/profsym/profsym") {
				continue
			}
			want = append(want, moduleVersion{r.Mod, gm})
		}
	}
	missing := unserved(t, proxy, want)
	if len(missing) > 0 {
		t.Fatalf("the module proxy %s does not serve %d pinned module version(s); pin versions it serves "+
			"(check one with: curl -I %s/<module>/@v/<version>.zip):\n%s", proxy, len(missing), proxy, strings.Join(missing, "\n"))
	}
	t.Logf("%d module versions asked of %s, all served", len(want), proxy)
}

// TestUnservedVersionFails checks the check: a version the proxy refuses is reported, so that a
// pin changed to such a version fails TestPinsServed.
func TestUnservedVersionFails(t *testing.T) {
	if testing.Short() {
		t.Skip("asks the module proxy over the network")
	}
	proxy := moduleProxy(t)
	// The MinIO release tag the offline image used to be built from: the proxy answers 403.
	bad := moduleVersion{module.Version{Path: "github.com/minio/minio", Version: "RELEASE.2025-09-07T16-13-09Z"}, "test"}
	good := moduleVersion{module.Version{Path: "golang.org/x/mod", Version: "v0.42.0"}, "test"}
	missing := unserved(t, proxy, []moduleVersion{good, bad})
	if len(missing) != 1 || !strings.Contains(missing[0], "RELEASE.2025-09-07T16-13-09Z") {
		t.Fatalf("unserved = %q, want only the MinIO release tag", missing)
	}
}

// refPattern finds a module or package path followed by @version in the repository's files.
var refPattern = regexp.MustCompile(`([a-z0-9.-]+\.[a-z]{2,}(?:/[A-Za-z0-9_.~-]+)+)@(v[0-9][0-9A-Za-z.+-]*[0-9A-Za-z]|RELEASE\.[0-9A-Za-z-]+)`)

// TestReferencesAgree finds every MODULE@VERSION written in the repository's scripts, programs
// and docs (go install hints, builder configs, READMEs) and the version constants that name a
// pinned tool, and wants each to be pinned, at the version the pins give.
func TestReferencesAgree(t *testing.T) {
	root := repoRoot(t)
	pins, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	for _, f := range gitFiles(t, root, "*.go", "*.sh", "*.md", "*.yaml", "*.yml", "Makefile", ".ci/*") {
		if strings.HasPrefix(f, "gen/") || strings.HasSuffix(f, "_test.go") && strings.HasPrefix(f, "pkg/toolpins/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range refPattern.FindAllStringSubmatch(string(data), -1) {
			ref, version := m[1], m[2]
			p, ok := pinOf(pins, ref)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: %s@%s is not pinned in %s", f, ref, version, File))
			case p.Version != version:
				problems = append(problems, fmt.Sprintf("%s: %s@%s, but %s pins %s", f, ref, version, File, p.Version))
			}
		}
	}
	// Version constants that tests compare installed binaries with.
	for _, c := range []struct{ file, pattern, pin, prefix string }{
		{"pkg/testsupport/kubeapiserver.go", `KubeVersion = "([^"]+)"`, "kubernetes", ""},
		{"e2e/cluster/cluster.go", `KubeVersion += "([^"]+)"`, "kubernetes", ""},
		{"e2e/cluster/cluster.go", `CoreDNSVersion = "([^"]+)"`, "coredns", "v"},
	} {
		data, err := os.ReadFile(filepath.Join(root, c.file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(c.pattern).FindSubmatch(data)
		p, err := pins.Get(c.pin)
		if err != nil {
			t.Fatal(err)
		}
		if m == nil {
			problems = append(problems, fmt.Sprintf("%s: no %s", c.file, c.pattern))
		} else if c.prefix+string(m[1]) != p.Version {
			problems = append(problems, fmt.Sprintf("%s: %s, but %s pins %s at %s", c.file, m[0], File, c.pin, p.Version))
		}
	}
	if len(problems) > 0 {
		t.Fatalf("references that disagree with %s:\n%s", File, strings.Join(problems, "\n"))
	}
}

// pinOf finds the pin whose module holds ref (a module or package path).
func pinOf(pins Pins, ref string) (Pin, bool) {
	for _, p := range pins {
		if ref == p.Module || strings.HasPrefix(ref, p.Module+"/") {
			return p, true
		}
	}
	return Pin{}, false
}

// unserved asks proxy for each module version's zip, a few at a time, and returns those it
// does not serve, each with where it is named and what the proxy said.
func unserved(t *testing.T, proxy string, want []moduleVersion) []string {
	t.Helper()
	sort.Slice(want, func(i, j int) bool { return want[i].String() < want[j].String() })
	want = slices.CompactFunc(want, func(a, b moduleVersion) bool { return a.Version == b.Version })
	var (
		mu      sync.Mutex
		missing []string
		wg      sync.WaitGroup
		sem     = make(chan struct{}, 16)
	)
	client := &http.Client{Timeout: 30 * time.Second}
	for _, mv := range want {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := served(t.Context(), client, proxy, mv.Version); err != nil {
				mu.Lock()
				missing = append(missing, fmt.Sprintf("%s@%s (%s): %v", mv.Path, mv.Version.Version, mv.where, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Strings(missing)
	return missing
}

func served(ctx context.Context, client *http.Client, proxy string, mv module.Version) error {
	p, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	v, err := module.EscapeVersion(mv.Version)
	if err != nil {
		return err
	}
	var last error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * time.Second)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, proxy+"/"+p+"/@v/"+v+".zip", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err // the network: try again
			continue
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode >= 500:
			last = fmt.Errorf("HTTP %s", resp.Status)
		default:
			return fmt.Errorf("HTTP %s", resp.Status)
		}
	}
	return last
}

// moduleProxy is the first proxy of GOPROXY; without one the test cannot ask.
func moduleProxy(t *testing.T) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "env", "GOPROXY").Output()
	if err != nil {
		t.Fatalf("go env GOPROXY: %v", err)
	}
	for _, p := range strings.FieldsFunc(strings.TrimSpace(string(out)), func(r rune) bool { return r == ',' || r == '|' }) {
		if p != "direct" && p != "off" {
			return strings.TrimSuffix(p, "/")
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("GOPROXY=%s names no module proxy to ask", out)
	}
	t.Skipf("GOPROXY=%s names no module proxy to ask", out)
	return ""
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func gitFiles(t *testing.T, root string, patterns ...string) []string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", append([]string{"ls-files", "--"}, patterns...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return strings.Fields(string(out))
}
