package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// libcPath is Debian's C library; libcDebugDir holds its separate debug file (libc6-dbg).
const (
	libcPath     = "/lib/x86_64-linux-gnu/libc.so.6"
	libcDebugDir = "/usr/lib/debug/.build-id"
)

// splitBinaries returns binaries whose symbols live in a separate debug file, as distro
// packages and debuginfod have them: a PIE program split with objcopy --only-keep-debug, and
// Debian's libc with its debug file from libc6-dbg.
func splitBinaries(t *testing.T) []otlptest.Binary {
	t.Helper()
	dir := t.TempDir()
	full := testsupport.CompileC(t, otlptest.CSource+otlptest.CMain, "-O2", "-g", "-pie", "-fPIE", "-Wl,--build-id")
	prog, debug := filepath.Join(dir, "prog"), filepath.Join(dir, "prog.debug")
	for _, args := range [][]string{
		{"objcopy", "--only-keep-debug", full, debug},
		{"objcopy", "--strip-all", full, prog},
	} {
		if out, err := exec.CommandContext(t.Context(), args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	gnu := otlptest.BinaryIDs(t, libcPath).GNU
	libcDebug := filepath.Join(libcDebugDir, gnu[:2], gnu[2:]+".debug")
	if _, err := os.Stat(libcDebug); err != nil {
		t.Fatalf("libc's debug file: %v (apt-get install libc6-dbg; .ci/install-deps does)", err)
	}
	return []otlptest.Binary{
		{Name: "split-pie", Path: prog, Debug: debug, Fn: "outer", PIE: true},
		// The function the OTel eBPF profiler's frames were once answered for as __mpn_mul.
		{Name: "libc", Path: libcPath, Debug: libcDebug, Fn: "__libc_start_call_main", PIE: true},
	}
}

// TestSeparateDebugFiles: a separate debug file's program headers keep the virtual addresses
// but not the executable's file offsets, so requests with mappings, shaped like the OTel eBPF
// profiler's and like our collector's, must not be placed with them. With only the debug file
// stored such frames pass on unsymbolized (ELF virtual addresses with an all-zero mapping are
// symbolized); once the executable is known, uploaded from the node or fetched from
// debuginfod, every frame is what llvm-symbolizer reads from the debug file.
func TestSeparateDebugFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, symbolizers, debuginfod and a downstream")
	}
	bins := splitBinaries(t)
	var debugs, exes []string
	for _, b := range bins {
		debugs, exes = append(debugs, b.Debug), append(exes, b.Path)
	}

	t.Run("upload", func(t *testing.T) {
		sym := testsupport.StartSymbolizer(t, "")
		sym.Upload(t, debugs...)
		rt := newRoundTripper(t, sym)
		rt.check(t, otlptest.ShapeEBPFZero, bins, true)
		rt.check(t, otlptest.ShapeEBPF, bins, false)
		rt.check(t, otlptest.ShapePprof, bins, false)
		// What the collector does on the node: upload the executable it runs.
		sym.Upload(t, append([]string{"--type", "executable", "--source", "node"}, exes...)...)
		rt.check(t, otlptest.ShapeEBPF, bins, true)
		rt.check(t, otlptest.ShapePprof, bins, true)
	})

	t.Run("debuginfod", func(t *testing.T) {
		dir := t.TempDir()
		for _, b := range bins {
			for _, p := range []string{b.Path, b.Debug} {
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, b.Name+"-"+filepath.Base(p)), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		up := testsupport.StartDebuginfod(t, dir)
		for _, b := range bins {
			gnu := otlptest.BinaryIDs(t, b.Path).GNU
			up.WaitForBuildID(t, gnu, time.Minute)
			waitExecutable(t, up.URL(), gnu)
		}
		sym := testsupport.StartSymbolizer(t, "", "--debuginfod-url", up.URL(), "--debuginfod-timeout", "1m")
		rt := newRoundTripper(t, sym)
		rt.check(t, otlptest.ShapeEBPF, bins, true)
		rt.check(t, otlptest.ShapePprof, bins, true)
	})
}

// roundTripper sends requests through a gateway to a sink, counting what it sent.
type roundTripper struct {
	g    *gateway
	sk   *sink
	sent int64
}

func newRoundTripper(t *testing.T, sym *testsupport.Symbolizer) *roundTripper {
	t.Helper()
	sk := startSink(t)
	// Building libc's index on a busy machine may take seconds: the deadline is not under test.
	g := startGateway(t, gwConfig{Symbolizer: sym.URL(), Downstream: sk.addr, Timeout: 2 * time.Minute, Deadline: 2 * time.Minute})
	return &roundTripper{g: g, sk: sk}
}

// check sends one request of shape sh and checks that it comes out unchanged but for symbols,
// and that its frames are symbolized as llvm-symbolizer does, or, with want false, not at all.
func (rt *roundTripper) check(t *testing.T, sh otlptest.Shape, bins []otlptest.Binary, want bool) {
	t.Helper()
	pd, cases := otlptest.BuildRequest(t, sh, bins)
	in := pprofile.NewProfiles()
	pd.CopyTo(in)
	if err := rt.g.send(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	rt.sent += int64(len(cases))
	rt.sk.settle(t, rt.sent, 3*time.Minute)
	reqs := rt.sk.received()
	out := otlptest.Resolve(reqs[len(reqs)-1])
	if err := otlptest.Compare(otlptest.Resolve(in), out); err != nil {
		t.Fatal(err)
	}
	if want {
		otlptest.CheckFrames(t, out, cases)
		t.Logf("%s: %d addresses symbolized as llvm-symbolizer does", sh, len(cases))
		return
	}
	for i, c := range cases {
		if l := out[i].Stack[0].Lines; len(l) != 0 {
			t.Fatalf("%s %s %#x: symbolized with only a debug file's program headers: %+v", sh, c.Bin.Name, c.VAddr, l)
		}
	}
	t.Logf("%s: %d addresses passed on unsymbolized", sh, len(cases))
}

// waitExecutable waits until debuginfod serves the executable of a build ID.
func waitExecutable(t *testing.T, base, gnu string) {
	t.Helper()
	url := base + "/buildid/" + gnu + "/executable"
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		code, _ := testsupport.Get(t, url)
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("debuginfod does not serve %s: %d", url, code)
		}
	}
}
