package symbolizecmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// debuginfodProgram is a C program with a function of its own per n, so that each build has
// its own build ID, and libc types that dwz can share between two builds.
func debuginfodProgram(n int) string {
	return fmt.Sprintf(`#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int fetched_%d(int x) { return x * %d + 1; }
int main(int argc, char **argv) { (void)argv; printf("%%d\n", fetched_%d(argc)); return 0; }
`, n, n+3, n)
}

// TestDebuginfodFetch: a stripped binary whose debug file is not on disk is answered with
// files and lines from the debug file a real debuginfod server has (DEBUGINFOD_URLS), and the
// dwz supplementary file that debug file names is fetched the same way; the files are kept by
// build ID, so the next run needs no server; a server that sends the file of another build
// is not believed.
func TestDebuginfodFetch(t *testing.T) {
	testsupport.RequireTools(t, "dwz", "objcopy")
	work, served := t.TempDir(), t.TempDir()
	run := func(args ...string) { t.Helper(); elfxtest.Run(t, args[0], args[1:]...) }
	// Two builds sharing their DWARF through a dwz common file that is nowhere its link says.
	var bins, stripped []string
	for i := range 2 {
		bins = append(bins, testsupport.CompileC(t, debuginfodProgram(i), "-g", "-O2", "-Wl,--build-id"))
	}
	run(append([]string{"dwz", "-m", filepath.Join(served, "common.debug"), "-M", "/nonexistent/common.debug"}, bins...)...)
	for i, bin := range bins {
		run("objcopy", "--only-keep-debug", bin, filepath.Join(served, fmt.Sprintf("p%d.debug", i)))
		s := filepath.Join(work, fmt.Sprintf("p%d", i))
		run("objcopy", "--strip-all", bin, s)
		stripped = append(stripped, s)
	}
	d := testsupport.StartDebuginfod(t, served)
	id := func(path string) string {
		ids, err := buildid.FromFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return ids.GNU
	}
	d.WaitForBuildID(t, id(bins[0]), time.Minute)

	addr := fmt.Sprintf("0x%x", elfxtest.SymbolValue(t, bins[0], "fetched_0"))
	cacheDir := t.TempDir()
	symbolize := func(urls string) (string, string) {
		t.Helper()
		var out, stderr bytes.Buffer
		c := &Cmd{Obj: stripped[0], DebugDir: []string{""}, DebuginfodURLs: urls, CacheDir: cacheDir, CacheSize: 1 << 30,
			OutputStyle: "LLVM", Inlines: true, Addresses: []string{addr}, Stderr: &stderr}
		if err := c.run(strings.NewReader(""), &out); err != nil {
			t.Fatal(err)
		}
		return out.String(), stderr.String()
	}
	out, stderr := symbolize(d.URL())
	// Without the common file the DWARF is not read at all, and a stripped binary has no name.
	if !strings.HasPrefix(out, "fetched_0\n") || !strings.Contains(out, "prog.c:") || stderr != "" {
		t.Fatalf("with debuginfod: %q (stderr %q), want fetched_0 at prog.c", out, stderr)
	}
	kept, err := filepath.Glob(filepath.Join(cacheDir, "debuginfod", "*", "debuginfo"))
	if err != nil || len(kept) != 2 || !slices.Contains(kept, filepath.Join(cacheDir, "debuginfod", id(bins[0]), "debuginfo")) {
		t.Fatalf("kept files %v (%v), want the debug file and the common file", kept, err)
	}
	// inspect reports what symbolize used, and where it came from.
	inspectDir := t.TempDir()
	var rep bytes.Buffer
	ic := &InspectCmd{File: stripped[0], DebugDir: []string{""}, DebuginfodURLs: d.URL(), CacheDir: inspectDir, JSON: true}
	if err := ic.run(&rep); err != nil {
		t.Fatal(err)
	}
	var got struct {
		DebugFile        string `json:"debug_file"`
		DebugFileFoundBy string `json:"debug_file_found_by"`
		Supplementary    struct {
			FoundBy string `json:"found_by"`
			Missing bool   `json:"missing"`
		} `json:"supplementary"`
		Fidelity string `json:"fidelity"`
	}
	if err := json.Unmarshal(rep.Bytes(), &got); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, rep.String())
	}
	if got.DebugFileFoundBy != "debuginfod" || got.DebugFile != filepath.Join(inspectDir, "debuginfod", id(bins[0]), "debuginfo") ||
		got.Supplementary.FoundBy != "debuginfod" || got.Supplementary.Missing || got.Fidelity != "full" {
		t.Fatalf("inspect with debuginfod: %+v, want the debug and common files found by debuginfod and full fidelity\n%s", got, rep.String())
	}
	// Its fetched files count against --cache-size, as symbolize's do.
	ic.CacheSize = 1
	if err := ic.run(io.Discard); err != nil {
		t.Fatal(err)
	}
	if kept, _ := filepath.Glob(filepath.Join(inspectDir, "debuginfod", "*", "debuginfo")); len(kept) > 0 {
		t.Fatalf("inspect --cache-size=1 kept %v", kept)
	}
	d.Stop()
	if again, stderr := symbolize(d.URL()); again != out || stderr != "" {
		t.Fatalf("second run without the server: %q (stderr %q), want %q", again, stderr, out)
	}

	// A build no server has is not asked for again at once: the second run, with the
	// server gone, does not try it (it would warn of the refused connection).
	empty := testsupport.StartDebuginfod(t, t.TempDir())
	missing := func(urls string) string {
		t.Helper()
		var out, stderr bytes.Buffer
		c := &Cmd{Obj: stripped[1], DebugDir: []string{""}, DebuginfodURLs: urls, CacheDir: cacheDir, CacheSize: 1 << 30,
			OutputStyle: "LLVM", Inlines: true, Addresses: []string{"0x1000"}, Stderr: &stderr}
		if err := c.run(strings.NewReader(""), &out); err != nil {
			t.Fatal(err)
		}
		return stderr.String()
	}
	if w := missing(empty.URL()); strings.Contains(w, "debuginfod:") || !strings.Contains(w, "on the debuginfod servers "+empty.URL()) {
		t.Fatalf("a build the server lacks: stderr %q, want only the symbol-table warning naming the server", w)
	}
	empty.Stop()
	if w := missing(empty.URL()); strings.Contains(w, "debuginfod:") {
		t.Fatalf("the miss was not remembered: %q", w)
	}

	// A server that answers with another build's debug file.
	wrong := t.TempDir()
	p := filepath.Join(wrong, "buildid", id(bins[1]), "debuginfo")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	other, err := os.ReadFile(filepath.Join(served, "p0.debug"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, other, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(wrong)))
	defer srv.Close()
	var out2, stderr2 bytes.Buffer
	c := &Cmd{Obj: stripped[1], DebugDir: []string{""}, DebuginfodURLs: srv.URL, NoCache: true,
		OutputStyle: "LLVM", Inlines: true, Addresses: []string{fmt.Sprintf("0x%x", elfxtest.SymbolValue(t, bins[1], "fetched_1"))}, Stderr: &stderr2}
	if err := c.run(strings.NewReader(""), &out2); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out2.String(), "prog.c") || !strings.Contains(stderr2.String(), "the file served has build ID") {
		t.Fatalf("another build's debug file: %q (stderr %q), want no file and a warning", out2.String(), stderr2.String())
	}
}
