package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/profsym/profsym/demo/pipeline"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
)

// uploadOnlyProgram is a binary the symbolizer has never seen: it waits in a loop below two
// named functions.
const uploadOnlyProgram = `#include <unistd.h>
__attribute__((noinline)) int spin_inner(int x) { for (int i = 0; i < 1000; i++) x = x * 7 + i; return x; }
__attribute__((noinline)) int spin_outer(int x) { return spin_inner(x) + 1; }
int main(void) { for (int n = 0;; n++) { spin_outer(n); usleep(100000); } }
`

// TestUploadOnly: the collector in upload-only mode (no sampling, as beside the OpenTelemetry
// eBPF profiler) finds a running binary the symbolizer has never seen and uploads it; a request
// shaped like the eBPF profiler's, which names the binary by its htlhash only, then comes out of
// the gateway symbolized.
func TestUploadOnly(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	root := moduleRoot(t)
	dir := t.TempDir()
	logs, otlpDir := filepath.Join(dir, "logs"), filepath.Join(dir, "otlp")
	for _, d := range []string{logs, otlpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"symbolizer", "gateway", "collector"} {
				t.Logf("%s log (last lines):\n%s", name, pipeline.TailFile(filepath.Join(logs, name+".log"), 25))
			}
		}
	})
	bins, err := pipeline.BuildServices(ctx, root, filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "spin")
	if err := os.WriteFile(prog+".c", []byte(uploadOnlyProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "gcc", "-O2", "-g", "-o", prog, prog+".c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	ids, err := buildid.FromFile(prog)
	if err != nil {
		t.Fatal(err)
	}

	const token = "e2e-upload-only-token"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sym, sp, err := pipeline.StartService(ctx, "symbolizer", filepath.Join(logs, "symbolizer.log"), bins.Symbolizer, 1, 30*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{"serve", "--listen", addr, "--store-dir", filepath.Join(dir, "store"), "--upload-token", token},
				"http://" + addr + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sym.Stop(syscall.SIGKILL, time.Second) })
	symURL := "http://127.0.0.1:" + strconv.Itoa(sp[0])

	otlpFile := filepath.Join(otlpDir, "profiles.otlp.pb")
	gw, gp, err := pipeline.StartGateway(ctx, bins.Gateway, filepath.Join(dir, "gateway.yaml"), filepath.Join(logs, "gateway.log"),
		pipeline.GatewayConfig{Symbolizer: symURL, OutputFile: otlpFile}, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop(syscall.SIGKILL, time.Second) })

	spin, err := pipeline.Start("spin", filepath.Join(logs, "spin.log"), prog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spin.Stop(syscall.SIGKILL, time.Second) })

	col, _, err := pipeline.StartService(ctx, "collector", filepath.Join(logs, "collector.log"), bins.Collector, 1, 60*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{"--upload-only", "--scan-interval", "1s", "--metrics-addr", addr,
				"--symbolizer-url", symURL, "--upload-token-file", tokenFile,
				// The machine's other binaries (MinIO is 150 MB) stay out of the way.
				"--upload-max-bytes", "1048576", "--upload-bytes-per-second", "67108864",
			}, "http://" + addr + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { col.Stop(syscall.SIGKILL, time.Second) })
	waitForUpload(t, symURL, ids.GNU, 60*time.Second)

	// The OTel eBPF profiler's shape: ELF virtual addresses, the mapping in the same space,
	// the htlhash as the only ID, native frame types, timestamps instead of values.
	lo, hi, err := pipeline.FuncRange(prog, "spin_inner")
	if err != nil {
		t.Fatal(err)
	}
	addrs := make([]uint64, 0, hi-lo)
	for a := lo; a < hi; a++ {
		addrs = append(addrs, a)
	}
	pd, err := pipeline.ProfilerRequest(prog, buildid.IDs{HTLHash: ids.HTLHash}, addrs, map[string]string{"host.name": "node-e2e"})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(gp.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := pprofileotlp.NewGRPCClient(cc).Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd)); err != nil {
		t.Fatalf("export to the gateway: %v", err)
	}
	if err := gw.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("stop gateway: %v", err)
	}
	if err := col.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("stop collector: %v", err)
	}
	out, err := pipeline.ReadOTLPFile(otlpFile)
	if err != nil {
		t.Fatal(err)
	}
	stacks, err := pipeline.Stacks(out)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(hi - lo)
	if got := pipeline.TotalSamples(stacks); got != want {
		t.Fatalf("gateway wrote %d samples, the request had %d", got, want)
	}
	for _, s := range stacks {
		if len(s.Frames) != 1 || s.Frames[0].Function != "spin_inner" {
			t.Fatalf("frame of the htlhash-only request: %+v, want spin_inner", s.Frames)
		}
	}
	t.Logf("%d addresses named by htlhash only came out symbolized after the upload-only collector uploaded the binary", want)
}
