package server

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/uploadcli"
)

// TestCoverage: what Symbolize resolved and what it could not is listed per binary, the most
// unresolved first and with the reason, merged across replicas sharing a store, through the API,
// the CLI, the metrics and the /ui/ page as a browser shows it.
func TestCoverage(t *testing.T) {
	storeDir := t.TempDir()
	a := start(t, "--store-dir", storeDir, "--coverage-interval", "50ms")
	b := start(t, "--store-dir", storeDir, "--coverage-interval", "50ms")
	bin := compile(t, "-g", "-O2")
	upload(t, a.url, bin.path)

	missing := strings.Repeat("ab", 20)
	symbolize := func(url string, mods ...*symbolizerv1.Module) {
		t.Helper()
		c := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, url)
		if _, err := c.Symbolize(context.Background(), connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: mods})); err != nil {
			t.Fatal(err)
		}
	}
	resolvedAddrs := bin.addrs[:len(bin.addrs)-2] // the last two resolve to nothing
	symbolize(a.url,
		&symbolizerv1.Module{GnuBuildId: bin.ids.GNU, Addresses: resolvedAddrs, Filename: "/usr/bin/prog"},
		&symbolizerv1.Module{GnuBuildId: missing, Addresses: make([]uint64, 40), Filename: "/opt/app/server"},
		&symbolizerv1.Module{Htlhash: "0123456789abcdef0123456789abcdef", Addresses: make([]uint64, 5)},
	)
	// The other replica is asked about the missing binary too: the list adds both.
	symbolize(b.url, &symbolizerv1.Module{GnuBuildId: missing, Addresses: make([]uint64, 60), Filename: "/opt/app/server-2"})

	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, a.url)
	var entries []*debuginfov1.Coverage
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := dc.ListCoverage(context.Background(), connect.NewRequest(&debuginfov1.ListCoverageRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		entries = resp.Msg.GetEntries()
		if len(entries) == 3 && entries[0].GetFramesAsked() == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica b's tally never reached replica a: %v", entries)
		}
		time.Sleep(50 * time.Millisecond)
	}
	first, second, last := entries[0], entries[1], entries[2]
	if first.GetBuildId() != missing || first.GetFramesResolved() != 0 || first.GetReason() != debuginfov1.CoverageReason_COVERAGE_REASON_NO_DEBUGINFO ||
		len(first.GetFilenames()) != 2 {
		t.Fatalf("most unresolved = %v", first)
	}
	if second.GetBuildIdType() != debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH || second.GetFramesAsked() != 5 {
		t.Fatalf("second = %v", second)
	}
	if last.GetBuildId() != bin.ids.GNU || last.GetFramesAsked() != uint64(len(resolvedAddrs)) || last.GetFramesResolved() == 0 ||
		last.GetFidelity() != debuginfov1.CoverageFidelity_COVERAGE_FIDELITY_FULL {
		t.Fatalf("resolved binary = %v", last)
	}
	resp, err := dc.ListCoverage(context.Background(), connect.NewRequest(&debuginfov1.ListCoverageRequest{
		Reason: debuginfov1.CoverageReason_COVERAGE_REASON_NO_DEBUGINFO, Limit: 1}))
	if err != nil || len(resp.Msg.GetEntries()) != 1 || resp.Msg.GetTotal() != 2 {
		t.Fatalf("filtered by reason, limit 1: %v, %v", resp, err)
	}
	if _, err := dc.ListCoverage(context.Background(), connect.NewRequest(&debuginfov1.ListCoverageRequest{Reason: 99})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("unknown reason: %v", err)
	}

	t.Run("cli", func(t *testing.T) {
		var out bytes.Buffer
		cmd := &uploadcli.MissingCmd{Conn: uploadcli.Conn{Server: a.url, Timeout: time.Minute}, Limit: 100, Out: &out}
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "UNRESOLVED") || !strings.Contains(lines[1], missing) || !strings.Contains(lines[1], "no_debuginfo") {
			t.Fatalf("table:\n%s", out.String())
		}
		t.Logf("symbolizer debuginfo missing:\n%s", out.String())
		out.Reset()
		cmd.Paths = true
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(out.String()); len(got) != 2 || !slices.Contains(got, "/opt/app/server") || !slices.Contains(got, "/opt/app/server-2") {
			t.Fatalf("--paths: %q", out.String())
		}
		out.Reset()
		cmd.Paths, cmd.JSON, cmd.All = false, true, true
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(out.String(), "\n"); n != 3 {
			t.Fatalf("--json --all: %d lines\n%s", n, out.String())
		}
		if err := (&uploadcli.MissingCmd{Conn: uploadcli.Conn{Server: a.url}, Reason: "nope"}).Run(); err == nil || !strings.Contains(err.Error(), "no_debuginfo") {
			t.Fatalf("unknown --reason: %v", err)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		// Both replicas' frames: 100 + 5 without debuginfo, the rest resolved but for the
		// addresses outside every function. The gauge follows the next write of the tally.
		asked := 105 + len(resolvedAddrs)
		want := 105 / float64(asked)
		re := regexp.MustCompile(`symbolizer_coverage_unresolved_ratio\{reason="no_debuginfo"\} ([0-9.e-]+)`)
		var got string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			code, body := testsupport.Get(t, a.url+"/metrics")
			m := re.FindSubmatch(body)
			if code != http.StatusOK || m == nil {
				t.Fatalf("/metrics (%d) has no unresolved ratio for no_debuginfo", code)
			}
			got = string(m[1])
			if v, err := strconv.ParseFloat(got, 64); err == nil && math.Abs(v-want) < 1e-9 {
				return
			}
		}
		t.Fatalf("no_debuginfo ratio = %s, want 105/%d", got, asked)
	})

	t.Run("ui", func(t *testing.T) {
		dom := browse(t, a.url+"/ui/", "coverage.png")
		for _, want := range []string{"Symbolization coverage", missing, "no debuginfo", "/opt/app/server", bin.ids.GNU, "all resolved", "full (inlines)"} {
			if !strings.Contains(dom, want) {
				t.Errorf("/ui/ as the browser renders it lacks %q", want)
			}
		}
		// The most unresolved binary is the first row of the table.
		rows := strings.Split(dom, "<tr>")
		if len(rows) < 3 || !strings.Contains(rows[2], missing) {
			t.Errorf("first row is not the most unresolved binary")
		}
		rec := browse(t, a.url+"/ui/buildid/gnu/"+bin.ids.GNU, "record.png")
		for _, want := range []string{"Stored debuginfo", "debuginfo", "/buildid/" + bin.ids.GNU + "/debuginfo", "known", "yes (version"} {
			if !strings.Contains(rec, want) {
				t.Errorf("record page lacks %q", want)
			}
		}
		gone := browse(t, a.url+"/ui/buildid/gnu/"+missing, "")
		if !strings.Contains(gone, "Nothing is stored under this ID") || !strings.Contains(gone, "no debuginfo") {
			t.Errorf("missing binary's page:\n%s", gone)
		}
		if code, _ := testsupport.Get(t, a.url+"/ui/buildid/gnu/zz"); code != http.StatusBadRequest {
			t.Errorf("malformed ID: %d", code)
		}
	})
}

// browse loads url in headless Chromium and returns the DOM it rendered; with shot it also
// keeps a screenshot in the test's artifact directory.
func browse(t *testing.T, url, shot string) string {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is needed (apt-get install -y chromium; .ci/install-deps does): %v", err)
	}
	// Flags that keep Chromium from reaching out to the network this machine does not have.
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1400,700"}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, chromium, append(args, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v", url, err)
	}
	if shot != "" {
		path := filepath.Join(t.ArtifactDir(), shot)
		if b, err := exec.CommandContext(ctx, chromium, append(args, "--screenshot="+path, url)...).CombinedOutput(); err != nil {
			t.Fatalf("chromium --screenshot: %v\n%s", err, b)
		}
		if st, err := os.Stat(path); err != nil || st.Size() < 1000 {
			t.Fatalf("screenshot %s: %v", path, err)
		}
		t.Logf("screenshot of %s: %s", url, path)
	}
	return string(out)
}

// TestKernelCoverage: a kernel image or module the collector names (vmlinux-RELEASE,
// /lib/modules/RELEASE/MODULE.ko) whose debuginfo is not stored is listed with its release and
// the distribution package of its debuginfo, through the API, the CLI (one line per release
// after the table) and /ui/ (escaped like every name from a request).
func TestKernelCoverage(t *testing.T) {
	r := start(t)
	id := func(b string) string { return strings.Repeat(b, 20) }
	c := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	mods := []*symbolizerv1.Module{
		{GnuBuildId: id("c1"), Addresses: make([]uint64, 9), Filename: "vmlinux-6.1.0-57-amd64"},
		{GnuBuildId: id("c2"), Addresses: make([]uint64, 8), Filename: "/lib/modules/6.1.0-57-amd64/brd.ko"},
		{GnuBuildId: id("c3"), Addresses: make([]uint64, 6), Filename: "/lib/modules/6.5.6-300.fc39.x86_64/xfs.ko"},
		{GnuBuildId: id("c4"), Addresses: make([]uint64, 5), Filename: "vmlinux-6.12.38+deb13-amd64"},
		{GnuBuildId: id("c5"), Addresses: make([]uint64, 4), Filename: "vmlinux-6.10.10-arch1-1"},
		{GnuBuildId: id("c6"), Addresses: make([]uint64, 3), Filename: "vmlinux-6.1<b>bold</b>"},
	}
	if _, err := c.Symbolize(context.Background(), connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: mods})); err != nil {
		t.Fatal(err)
	}

	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	resp, err := dc.ListCoverage(context.Background(), connect.NewRequest(&debuginfov1.ListCoverageRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*debuginfov1.KernelDebuginfo{
		id("c1"): {Release: "6.1.0-57-amd64", Packages: []string{"linux-image-6.1.0-57-amd64-dbg (Debian)"}},
		id("c2"): {Release: "6.1.0-57-amd64", Module: "brd", Packages: []string{"linux-image-6.1.0-57-amd64-dbg (Debian)"}},
		id("c3"): {Release: "6.5.6-300.fc39.x86_64", Module: "xfs", Packages: []string{"kernel-debuginfo-6.5.6-300.fc39.x86_64 (Fedora)"}},
		id("c4"): {Release: "6.12.38+deb13-amd64", Packages: []string{"linux-image-6.12.38+deb13-amd64-dbg (Debian)"}},
		id("c5"): {Release: "6.10.10-arch1-1"},
		id("c6"): nil,
	}
	if len(resp.Msg.GetEntries()) != len(want) {
		t.Fatalf("entries: %v", resp.Msg.GetEntries())
	}
	for _, e := range resp.Msg.GetEntries() {
		if !proto.Equal(e.GetKernel(), want[e.GetBuildId()]) {
			t.Errorf("%s (%v): kernel = %v, want %v", e.GetBuildId(), e.GetFilenames(), e.GetKernel(), want[e.GetBuildId()])
		}
	}

	t.Run("cli", func(t *testing.T) {
		var out bytes.Buffer
		cmd := &uploadcli.MissingCmd{Conn: uploadcli.Conn{Server: r.url, Timeout: time.Minute}, Limit: 100, Out: &out}
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		t.Logf("symbolizer debuginfo missing:\n%s", out.String())
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		// The table keeps its header and a row per binary; a line per release follows, in the
		// table's order.
		if len(lines) != 1+len(mods)+4 || !strings.HasPrefix(lines[0], "UNRESOLVED") {
			t.Fatalf("output:\n%s", out.String())
		}
		wantLines := []string{
			"kernel 6.1.0-57-amd64: debuginfo in linux-image-6.1.0-57-amd64-dbg (Debian): upload /usr/lib/debug/boot/vmlinux-6.1.0-57-amd64 and the modules' .ko under /usr/lib/debug/lib/modules/6.1.0-57-amd64",
			"kernel 6.5.6-300.fc39.x86_64: debuginfo in kernel-debuginfo-6.5.6-300.fc39.x86_64 (Fedora; dnf debuginfo-install kernel-6.5.6-300.fc39.x86_64): upload /usr/lib/debug/lib/modules/6.5.6-300.fc39.x86_64/vmlinux and the modules' .ko.debug under /usr/lib/debug/lib/modules/6.5.6-300.fc39.x86_64",
			"kernel 6.12.38+deb13-amd64: debuginfo in linux-image-6.12.38+deb13-amd64-dbg (Debian): upload /usr/lib/debug/boot/vmlinux-6.12.38+deb13-amd64 and the modules' .ko under /usr/lib/debug/lib/modules/6.12.38+deb13-amd64",
			"kernel 6.10.10-arch1-1: no distribution package known for this release: upload its vmlinux and the modules' .ko with debug info from the kernel's build, or give the symbolizer a debuginfod server that has them (--debuginfod-url)",
		}
		if got := lines[1+len(mods):]; !slices.Equal(got, wantLines) {
			t.Errorf("kernel lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
		}
		out.Reset()
		cmd.JSON = true
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		// protojson varies its spacing on purpose: the lines are read back, not matched.
		n := 0
		for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
			var e debuginfov1.Coverage
			if err := protojson.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("--json line %q: %v", line, err)
			}
			if !strings.Contains(line, `"kernel"`) != (want[e.GetBuildId()] == nil) || !proto.Equal(e.GetKernel(), want[e.GetBuildId()]) {
				t.Errorf("--json line %s: kernel = %v, want %v", line, e.GetKernel(), want[e.GetBuildId()])
			}
			n++
		}
		if n != len(mods) {
			t.Errorf("--json: %d lines\n%s", n, out.String())
		}
	})

	t.Run("ui", func(t *testing.T) {
		// html/template writes the release's "+" as a character reference, and the name from
		// the request as text.
		_, raw := testsupport.Get(t, r.url+"/ui/")
		if !strings.Contains(string(raw), "linux-image-6.12.38&#43;deb13-amd64-dbg (Debian)") || strings.Contains(string(raw), "<b>bold</b>") {
			t.Errorf("/ui/ is not escaped as html/template escapes:\n%s", raw)
		}
		dom := browse(t, r.url+"/ui/", "kernel-coverage.png")
		for _, want := range []string{
			"kernel 6.1.0-57-amd64: debuginfo in <code>linux-image-6.1.0-57-amd64-dbg (Debian)</code>",
			"kernel 6.1.0-57-amd64, module brd: debuginfo in <code>linux-image-6.1.0-57-amd64-dbg (Debian)</code>",
			"kernel 6.5.6-300.fc39.x86_64, module xfs: debuginfo in <code>kernel-debuginfo-6.5.6-300.fc39.x86_64 (Fedora)</code>",
			"kernel 6.12.38+deb13-amd64: debuginfo in <code>linux-image-6.12.38+deb13-amd64-dbg (Debian)</code>",
			"kernel 6.10.10-arch1-1: no distribution package known",
			"vmlinux-6.1&lt;b&gt;bold&lt;/b&gt;",
		} {
			if !strings.Contains(dom, want) {
				t.Errorf("/ui/ as the browser renders it lacks %q", want)
			}
		}
		if strings.Count(dom, `class="kernel"`) != 5 {
			t.Errorf("/ui/ has %d kernel hints, want 5", strings.Count(dom, `class="kernel"`))
		}
	})
}
