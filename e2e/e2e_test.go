package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/profsym/profsym/demo/pipeline"
	"github.com/profsym/profsym/pkg/testsupport"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: starts real servers and loads eBPF programs; skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("end-to-end test: the collector loads eBPF programs, which needs root (run go test as root)")
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestPipeline runs collector -> gateway -> symbolizer (S3 store on MinIO, result cache in
// Redis) -> OTLP files, with the stripped workload running and its debuginfo uploaded as CI
// would, and checks the symbolized output against what the collector sent.
func TestPipeline(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	root := moduleRoot(t)
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	otlpDir := filepath.Join(dir, "otlp")
	for _, d := range []string{logs, otlpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A failing run leaves the service logs in the test output.
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"symbolizer", "gateway", "collector"} {
				t.Logf("%s log (last lines):\n%s", name, pipeline.TailFile(filepath.Join(logs, name+".log"), 25))
			}
		}
	})

	start := time.Now()
	bins, err := pipeline.BuildServices(ctx, root, filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	wl, err := pipeline.CompileWorkload(ctx, root, filepath.Join(dir, "workload"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built services and workload in %v", time.Since(start).Round(time.Millisecond))

	minio := testsupport.StartMinIO(t)
	const bucket = "profsym-e2e"
	minio.NewBucket(t, bucket)
	redis := testsupport.StartRedis(t)

	const token = "e2e-upload-token"
	stop := func(p *pipeline.Proc, sig syscall.Signal, grace time.Duration) {
		t.Helper()
		if err := p.Stop(sig, grace); err != nil {
			t.Errorf("stop %s: %v\n%s", p.Name, err, p.Tail(20))
		}
	}
	sym, sp, err := pipeline.StartService(ctx, "symbolizer", filepath.Join(logs, "symbolizer.log"), bins.Symbolizer, 1, 30*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{"serve", "--listen", addr,
				"--s3-endpoint", minio.Endpoint(), "--s3-bucket", bucket, "--s3-region", minio.Region(),
				"--s3-access-key", minio.AccessKey(), "--s3-secret-key", minio.SecretKey(), "--s3-insecure",
				"--redis-url", redis.URL(), "--upload-token", token, "--shutdown-timeout", "5s",
			}, "http://" + addr + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sym.Stop(syscall.SIGKILL, time.Second) })
	symURL := "http://127.0.0.1:" + strconv.Itoa(sp[0])

	// CI uploads the unstripped build (presigned PUT to MinIO); the stripped copy runs.
	up := exec.CommandContext(ctx, bins.Symbolizer, "upload", "--server", symURL, "--token", token, "--progress", "plain", wl.Debug)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("symbolizer upload: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "uploaded") {
		t.Fatalf("symbolizer upload did not upload:\n%s", out)
	}

	gw, gp, err := pipeline.StartService(ctx, "gateway", filepath.Join(logs, "gateway.log"), bins.Gateway, 3, 30*time.Second,
		func(p []int) ([]string, string) {
			return []string{
				"--grpc-listen", "127.0.0.1:" + strconv.Itoa(p[0]),
				"--http-listen", "127.0.0.1:" + strconv.Itoa(p[1]),
				"--admin-listen", "127.0.0.1:" + strconv.Itoa(p[2]),
				"--symbolizer-url", symURL, "--output-dir", otlpDir, "--shutdown-timeout", "20s",
				// Within the 5s the collector gives its last export at shutdown.
				"--symbolize-timeout", "3s",
			}, "http://127.0.0.1:" + strconv.Itoa(p[2]) + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop(syscall.SIGKILL, time.Second) })

	sent := filepath.Join(dir, "collector-sent.otlp")
	col, _, err := pipeline.StartService(ctx, "collector", filepath.Join(logs, "collector.log"), bins.Collector, 1, 60*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{"--gateway", "127.0.0.1:" + strconv.Itoa(gp[0]), "--gateway-insecure",
				"--frequency", "99", "--interval", "3s", "--output-file", sent, "--metrics-addr", addr,
			}, "http://" + addr + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { col.Stop(syscall.SIGKILL, time.Second) })

	work, err := pipeline.Start("workload", filepath.Join(logs, "workload.log"), wl.Stripped)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { work.Stop(syscall.SIGKILL, time.Second) })
	select {
	case <-time.After(9 * time.Second):
	case <-work.Done():
		t.Fatalf("workload exited early: %v", work.Err())
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	stop(work, syscall.SIGTERM, 5*time.Second)
	stop(col, syscall.SIGINT, 30*time.Second)
	stop(gw, syscall.SIGTERM, 40*time.Second)
	stop(sym, syscall.SIGTERM, 15*time.Second)

	in, err := pipeline.ReadDelimited(sent)
	if err != nil {
		t.Fatal(err)
	}
	out, files, err := pipeline.ReadOTLPDir(otlpDir)
	if err != nil {
		t.Fatal(err)
	}
	inStacks, err := pipeline.Stacks(in)
	if err != nil {
		t.Fatalf("collector output: %v", err)
	}
	outStacks, err := pipeline.Stacks(out)
	if err != nil {
		t.Fatalf("gateway output: %v", err)
	}
	nIn, nOut := pipeline.TotalSamples(inStacks), pipeline.TotalSamples(outStacks)
	t.Logf("collector sent %d requests, %d samples; gateway wrote %d files, %d samples", len(in), nIn, len(files), nOut)
	if nIn == 0 || nIn != nOut {
		t.Fatalf("samples: collector sent %d, gateway wrote %d; want equal and non-zero", nIn, nOut)
	}

	checkWorkload(t, outStacks, strconv.Itoa(work.PID()))
	checkKernelFrames(t, outStacks)
	if d := time.Since(start); d > 120*time.Second {
		t.Errorf("end-to-end run took %v, want it bounded under 120s", d)
	}
}

// checkWorkload checks the workload's samples: both hot chains appear fully symbolized,
// frames carry workload.c file:line, and the always_inline helpers are inline frames.
func checkWorkload(t *testing.T, stacks []pipeline.Stack, pid string) {
	t.Helper()
	var mine []pipeline.Stack
	for _, s := range stacks {
		if s.PID == pid {
			mine = append(mine, s)
		}
	}
	total := pipeline.TotalSamples(mine)
	if total < 10 {
		t.Fatalf("only %d samples of the workload (pid %s); the machine may be overloaded", total, pid)
	}
	chains := make([]int64, len(pipeline.HotChains))
	var userFrames, symbolized, withLine int
	inlined := map[string]bool{}
	for _, s := range mine {
		var names []string
		for _, f := range s.Frames {
			if f.Kind == "kernel" {
				continue
			}
			names = append(names, f.Function)
			if filepath.Base(f.Mapping) != "workload" {
				continue
			}
			userFrames++
			if f.Function != "" {
				symbolized++
			}
			if strings.HasSuffix(f.File, "workload.c") && f.Line > 0 {
				withLine++
			}
			if f.Inlined {
				inlined[f.Function] = true
			}
		}
		for i, chain := range pipeline.HotChains {
			if len(names) >= len(chain) && slices.Equal(names[:len(chain)], chain) {
				chains[i] += s.Samples
			}
		}
	}
	t.Logf("workload: %d samples; hot chains %v; %d of %d workload frames symbolized, %d with workload.c:line; inline frames of %v",
		total, chains, symbolized, userFrames, withLine, inlined)
	for i, n := range chains {
		if n == 0 {
			t.Errorf("no sample has the chain %v", pipeline.HotChains[i])
		}
	}
	if chains[0]+chains[1] < total/2 {
		t.Errorf("the hot chains hold %d of %d workload samples, want at least half", chains[0]+chains[1], total)
	}
	if userFrames == 0 || symbolized != userFrames || withLine != userFrames {
		t.Errorf("workload frames: %d, symbolized %d, with workload.c:line %d; want all", userFrames, symbolized, withLine)
	}
	for _, fn := range pipeline.InlineFunctions {
		if !inlined[fn] {
			t.Errorf("%s never appears as an inline frame", fn)
		}
	}
}

func checkKernelFrames(t *testing.T, stacks []pipeline.Stack) {
	t.Helper()
	var kernel, named int
	for _, s := range stacks {
		for _, f := range s.Frames {
			if f.Kind == "kernel" {
				kernel++
				if f.Function != "" {
					named++
				}
			}
		}
	}
	t.Logf("kernel frames: %d, named %d", kernel, named)
	if kernel == 0 {
		t.Fatal("no kernel frames in the output")
	}
	if named != kernel {
		t.Errorf("%d of %d kernel frames have no name", kernel-named, kernel)
	}
}
