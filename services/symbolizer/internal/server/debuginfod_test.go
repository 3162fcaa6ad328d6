package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/pkg/testsupport"
)

// upstreamOf compiles a test program and serves it from a real debuginfod of its own, once the
// server has indexed it.
func upstreamOf(t *testing.T) (binary, *testsupport.Debuginfod) {
	t.Helper()
	dir := t.TempDir()
	bin := compile(t, "-g", "-O1")
	data, err := os.ReadFile(bin.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prog"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	up := testsupport.StartDebuginfod(t, dir)
	up.WaitForBuildID(t, bin.ids.GNU, 30*time.Second)
	return bin, up
}

// The symbolizer fetches what it lacks from a real Debian debuginfod and stores it.
func TestDebuginfodUpstream(t *testing.T) {
	bin, up := upstreamOf(t)

	r := start(t, "--debuginfod-url", up.URL(), "--debuginfod-timeout", "10s")
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	req := &symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{
		{GnuBuildId: bin.ids.GNU, Addresses: bin.addrs},
		{GnuBuildId: strings.Repeat("cd", 20), Addresses: []uint64{1}},
	}}
	resp, err := client.Symbolize(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	m := resp.Msg.Modules
	if m[0].Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		t.Fatalf("fetched module = %v %s", m[0].Status, m[0].Message)
	}
	sameLocations(t, "via debuginfod", m[0], engineFrames(t, bin.path, bin.addrs))
	if m[1].Status != symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND {
		t.Fatalf("unknown module = %v %s", m[1].Status, m[1].Message)
	}
	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	g, err := dc.Get(context.Background(), connect.NewRequest(&debuginfov1.GetRequest{BuildId: bin.ids.GNU}))
	if err != nil || g.Msg.Debuginfo.Source != debuginfov1.UploadSource_UPLOAD_SOURCE_DEBUGINFOD {
		t.Fatalf("stored record = %v, %v", g, err)
	}

	// The upstream goes away: a missing module is reported UNAVAILABLE (not known to be
	// missing), the stored one still works.
	up.Stop()
	req.Modules[1].GnuBuildId = strings.Repeat("ef", 20)
	resp, err = client.Symbolize(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.Msg.Modules[1].Status; s != symbolizerv1.ModuleStatus_MODULE_STATUS_UNAVAILABLE {
		t.Fatalf("with the upstream down: %v", s)
	}
	if s := resp.Msg.Modules[0].Status; s != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		t.Fatalf("stored module with the upstream down: %v", s)
	}
}

// Our debuginfod paths, read by the real debuginfod-find.
func TestDebuginfodServer(t *testing.T) {
	find, err := exec.LookPath("debuginfod-find")
	if err != nil {
		t.Fatalf("debuginfod-find is required: apt-get install -y debuginfod (%v)", err)
	}
	r := start(t)
	full := compile(t, "-g")
	debugOnly := filepath.Join(t.TempDir(), "prog.debug")
	if out, err := exec.CommandContext(t.Context(), "objcopy", "--only-keep-debug", full.path, debugOnly).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v %s", err, out)
	}
	other := compile(t, "-g", "-DX=1", "-O1")
	upload(t, r.url, debugOnly, other.path)

	run := func(kind, id string) ([]byte, error) {
		cache := t.TempDir()
		cmd := exec.CommandContext(t.Context(), find, kind, id)
		cmd.Env = append(os.Environ(), "DEBUGINFOD_URLS="+r.url, "DEBUGINFOD_CACHE_PATH="+cache, "DEBUGINFOD_TIMEOUT=10")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, err
		}
		return os.ReadFile(strings.TrimSpace(string(out)))
	}
	want, _ := os.ReadFile(debugOnly)
	got, err := run("debuginfo", full.ids.GNU)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("debuginfod-find debuginfo: %v (%d bytes, want %d)", err, len(got), len(want))
	}
	// A separate debug file is not runnable: no executable.
	if _, err := run("executable", full.ids.GNU); err == nil {
		t.Fatal("a debug-only file was served as an executable")
	}
	want, _ = os.ReadFile(other.path)
	got, err = run("executable", other.ids.GNU)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("debuginfod-find executable: %v", err)
	}
	if _, err := run("debuginfo", strings.Repeat("12", 20)); err == nil {
		t.Fatal("an unknown build ID was found")
	}
	for path, code := range map[string]int{
		"/buildid/" + other.ids.GNU + "/source/x.c":     404,
		"/buildid/" + other.ids.HTLHash + "/executable": 200,
		"/buildid/ABCD/debuginfo":                       404,
		"/buildid/..%2f..%2fetc/debuginfo":              404,
	} {
		if got, _ := testsupport.Get(t, r.url+path); got != code {
			t.Errorf("GET %s = %d, want %d", path, got, code)
		}
	}
}

func TestGracefulShutdown(t *testing.T) {
	var inHandler atomic.Int32
	release := make(chan struct{})
	r := startWith(t, func(s *Server) {
		h := s.Handler
		s.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.HasSuffix(req.URL.Path, "/Symbolize") {
				inHandler.Add(1)
				<-release // in flight until shutdown has begun
			}
			h.ServeHTTP(w, req)
		})
	})
	bin := compile(t, "-g")
	upload(t, r.url, bin.path)
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	const n = 4
	errc := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			resp, err := client.Symbolize(context.Background(), connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: bin.ids.GNU, Addresses: bin.addrs}}}))
			if err == nil && resp.Msg.Modules[0].Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
				err = fmt.Errorf("status %v", resp.Msg.Modules[0].Status)
			}
			errc <- err
		}()
	}
	for inHandler.Load() < n {
		time.Sleep(time.Millisecond)
	}
	r.cancel()
	// Readiness turns off while in-flight requests finish.
	time.Sleep(50 * time.Millisecond)
	close(release)
	for i := 0; i < n; i++ {
		if err := <-errc; err != nil {
			t.Errorf("in-flight request: %v", err)
		}
	}
	if err := <-r.done; err != nil {
		t.Fatalf("serve returned %v", err)
	}
	r.done <- nil // for the cleanup
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, r.url+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		defer resp.Body.Close()
		t.Fatal("the server still accepts connections after shutdown")
	}
}

// A kernel module's debug file comes from a real debuginfod by its build ID (as distributions'
// debuginfod servers serve .ko files) and answers module frames: addresses of the .ko laid out
// as the kernel loads it, with an all-zero mapping.
func TestDebuginfodKernelModule(t *testing.T) {
	elfxtest.Need(t, "gcc", "ld")
	dir, serve := t.TempDir(), t.TempDir()
	obj := elfxtest.CC(t, dir, "mod.o", elfxtest.KernelModule, "-c", "-g", "-O2")
	ko := filepath.Join(serve, "mod.ko")
	elfxtest.Run(t, "ld", "-r", "--build-id", "-o", ko, obj)
	ids, err := buildid.FromFile(ko)
	if err != nil || ids.GNU == "" {
		t.Fatalf("build ID %+v, %v", ids, err)
	}
	up := testsupport.StartDebuginfod(t, serve)
	up.WaitForBuildID(t, ids.GNU, 30*time.Second)

	ef, closer, err := elfx.OpenPath(ko, elfx.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var addrs []uint64
	var names []string
	for _, sym := range elfxtest.Symbols(t, ko) {
		switch sym.Name {
		case "hot", "dispatch", "slow_path", "module_stop":
			addrs = append(addrs, ef.ELF().Sections[sym.Section].Addr+sym.Value+1)
			names = append(names, sym.Name)
		}
	}
	if len(addrs) != 4 {
		t.Fatalf("module functions found: %v", names)
	}
	r := start(t, "--debuginfod-url", up.URL(), "--debuginfod-timeout", "10s")
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	resp, err := client.Symbolize(context.Background(), connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{
		{GnuBuildId: ids.GNU, Addresses: addrs, Filename: "/lib/modules/6.1.0-57-amd64/mod.ko"},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	m := resp.Msg.Modules[0]
	if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		t.Fatalf("module via debuginfod = %v %s", m.Status, m.Message)
	}
	want := engineFrames(t, ko, addrs)
	sameLocations(t, "kernel module via debuginfod", m, want)
	got, err := symbolizecodec.Decode(m, len(addrs))
	if err != nil {
		t.Fatal(err)
	}
	for i, frames := range got {
		// The outermost frame is the function the address is in; inlined callees come first.
		if len(frames) == 0 || frames[len(frames)-1].Function != names[i] || frames[0].Line == 0 {
			t.Errorf("%s at %#x: %+v", names[i], addrs[i], frames)
		}
	}
}
