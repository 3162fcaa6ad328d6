package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/profsym/profsym/demo/pipeline"
	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
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
// Redis) -> an OTLP file, with the stripped workload running and its debuginfo uploaded as CI
// would, and checks the symbolized output against what the collector sent.
func TestPipeline(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	// Generous: a cold build on a loaded machine takes minutes; the run itself is checked
	// against its own bound below.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
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

	// Two more builds for node-side upload: one nobody uploaded from CI (another -O level,
	// so another build ID), and the CI build with only its debug sections stripped (same
	// build ID, symbol table kept), which the node must not replace the CI upload with.
	nodeOnly := filepath.Join(dir, "workload", "workload-O1")
	if out, err := exec.CommandContext(ctx, "gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", nodeOnly, wl.Source).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	ciOnNode := filepath.Join(dir, "workload", "workload-symtab")
	if out, err := exec.CommandContext(ctx, "strip", "--strip-debug", "-o", ciOnNode, wl.Debug).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, out)
	}
	nodeOnlyID, ciID := gnuBuildID(t, nodeOnly), gnuBuildID(t, wl.Debug)
	if gnuBuildID(t, ciOnNode) != ciID {
		t.Fatal("strip --strip-debug changed the build ID")
	}

	// From here on the pipeline runs: its time is bounded (the build above depends on the
	// build cache and the machine's load, and is bounded by ctx).
	runStart := time.Now()
	minio := testsupport.StartMinIO(t)
	const bucket = "profsym-e2e"
	minio.NewBucket(t, bucket)
	redis := testsupport.StartRedis(t)

	const token = "e2e-upload-token"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
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

	otlpFile := filepath.Join(otlpDir, "profiles.otlp.pb")
	gw, gp, err := pipeline.StartGateway(ctx, bins.Gateway, filepath.Join(dir, "gateway.yaml"), filepath.Join(logs, "gateway.log"),
		pipeline.GatewayConfig{Symbolizer: symURL, OutputFile: otlpFile,
			// Within the 5s the collector gives its last export at shutdown.
			Timeout: 3 * time.Second, Deadline: 3 * time.Second}, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop(syscall.SIGKILL, time.Second) })

	sent := filepath.Join(dir, "collector-sent.otlp")
	col, _, err := pipeline.StartService(ctx, "collector", filepath.Join(logs, "collector.log"), bins.Collector, 1, 60*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{"--gateway", gp.GRPCAddr(), "--gateway-insecure",
				"--frequency", "99", "--interval", "3s", "--output-file", sent, "--metrics-addr", addr,
				"--upload-debuginfo", "--symbolizer-url", symURL, "--upload-token-file", tokenFile,
				// Small cap: the test's own binaries (MinIO is 150 MB) would hold the queue
				// up; the workload builds are a few kB.
				"--upload-bytes-per-second", "67108864", "--upload-max-bytes", "1048576",
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
	for _, bin := range []string{nodeOnly, ciOnNode} {
		// Four seconds: enough to be sampled, little taken from the main workload.
		p, err := pipeline.Start(filepath.Base(bin), filepath.Join(logs, filepath.Base(bin)+".log"), bin, "4")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(syscall.SIGKILL, time.Second) })
	}
	select {
	case <-time.After(9 * time.Second):
	case <-work.Done():
		t.Fatalf("workload exited early: %v", work.Err())
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	stop(work, syscall.SIGTERM, 5*time.Second)
	waitForUpload(t, symURL, nodeOnlyID, 30*time.Second)
	stop(col, syscall.SIGINT, 30*time.Second)
	stop(gw, syscall.SIGTERM, 40*time.Second)
	checkNodeUploads(t, symURL, nodeOnlyID, ciID)
	stop(sym, syscall.SIGTERM, 15*time.Second)

	in, err := pipeline.ReadDelimited(sent)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pipeline.ReadOTLPFile(otlpFile)
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
	t.Logf("collector sent %d requests, %d samples; gateway wrote %d requests, %d samples", len(in), nIn, len(out), nOut)
	if nIn == 0 || nIn != nOut {
		t.Fatalf("samples: collector sent %d, gateway wrote %d; want equal and non-zero", nIn, nOut)
	}

	checkWorkload(t, outStacks, strconv.Itoa(work.PID()))
	checkKernelFrames(t, outStacks)
	if d := time.Since(runStart); d > 90*time.Second {
		t.Errorf("the pipeline run took %v, want under 90s", d)
	} else {
		t.Logf("pipeline run (servers up, 9s of sampling, ordered stop, checks) took %v", d.Round(time.Millisecond))
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
	known := map[string]bool{}
	for _, fn := range pipeline.WorkloadFunctions {
		known[fn] = true
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
			// The C runtime's start code (_start) is linked in without line info.
			if !known[f.Function] || strings.HasSuffix(f.File, "workload.c") && f.Line > 0 {
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
		t.Errorf("workload frames: %d, symbolized %d, with workload.c:line (or outside the workload's own functions) %d; want all", userFrames, symbolized, withLine)
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

func gnuBuildID(t *testing.T, path string) string {
	t.Helper()
	ids, err := buildid.FromFile(path)
	if err != nil || ids.GNU == "" {
		t.Fatalf("build ID of %s: %q, %v", path, ids.GNU, err)
	}
	return ids.GNU
}

// waitForUpload waits until the symbolizer has id: the collector uploads in the background
// and stops uploading when it stops.
func waitForUpload(t *testing.T, symURL, id string, timeout time.Duration) {
	t.Helper()
	c := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, symURL)
	deadline := time.Now().Add(timeout)
	for {
		_, err := c.Get(context.Background(), connect.NewRequest(&debuginfov1.GetRequest{BuildId: id}))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the collector did not upload %s within %v: %v", id, timeout, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkNodeUploads checks the collector's node-side upload through the S3 store: the build
// nobody uploaded came from the node, and the CI upload was kept although the node ran a
// file with the same build ID and symbols.
func checkNodeUploads(t *testing.T, symURL, nodeOnlyID, ciID string) {
	t.Helper()
	c := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, symURL)
	get := func(id string) *debuginfov1.Debuginfo {
		resp, err := c.Get(context.Background(), connect.NewRequest(&debuginfov1.GetRequest{BuildId: id}))
		if err != nil {
			t.Errorf("Get %s: %v", id, err)
			return nil
		}
		return resp.Msg.GetDebuginfo()
	}
	if rec := get(nodeOnlyID); rec != nil && (rec.GetSource() != debuginfov1.UploadSource_UPLOAD_SOURCE_NODE ||
		rec.GetType() != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE) {
		t.Errorf("build only the node ran: source %v type %v, want a NODE EXECUTABLE upload", rec.GetSource(), rec.GetType())
	}
	if rec := get(ciID); rec != nil && (rec.GetSource() != debuginfov1.UploadSource_UPLOAD_SOURCE_CI ||
		rec.GetType() != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO) {
		t.Errorf("CI build: source %v type %v after the node ran it, want the CI DEBUGINFO upload kept", rec.GetSource(), rec.GetType())
	}
}
