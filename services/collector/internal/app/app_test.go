//go:build linux

package app

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/services/collector/internal/exporter"
)

func parse(t *testing.T, env map[string]string, args ...string) (*CLI, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var cli CLI
	k, err := kong.New(&cli, kong.Name("collector"), kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Parse(args)
	return &cli, err
}

func TestFlagsAndEnvironment(t *testing.T) {
	cli, err := parse(t, nil, "--output-file", "/tmp/x")
	if err != nil {
		t.Fatal(err)
	}
	if cli.Frequency != 19 || cli.Interval != 10*time.Second || cli.MetricsAddr != "127.0.0.1:9464" {
		t.Errorf("defaults: %+v", cli)
	}
	cli, err = parse(t, map[string]string{"PROFSYM_FREQUENCY": "99", "PROFSYM_PIDS": "1,2", "PROFSYM_GATEWAY": "gw:4317", "K8S_NODE_NAME": "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if cli.Frequency != 99 || len(cli.PID) != 2 || cli.PID[1] != 2 || cli.Gateway != "gw:4317" || cli.K8sNodeName != "n1" {
		t.Errorf("environment not applied: %+v", cli)
	}
	for _, bad := range [][]string{
		{"--output-file", "x", "--frequency", "0"},
		{"--output-file", "x", "--interval", "10ms"},
		{}, // neither gateway nor output file
		{"--output-file", "x", "--log-level", "loud"},
	} {
		if err := os.Unsetenv("PROFSYM_GATEWAY"); err != nil {
			t.Fatal(err)
		}
		if _, err := parse(t, nil, bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestCgroupID(t *testing.T) {
	var root string
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var fs syscall.Statfs_t
		if syscall.Statfs(p, &fs) == nil && fs.Type == cgroup2Magic {
			root = p
			break
		}
	}
	if root == "" {
		t.Skip("no cgroup v2 mount")
	}
	id, err := CgroupID(root)
	if err != nil || id == 0 {
		t.Fatalf("CgroupID(%s) = %d, %v", root, id, err)
	}
	if rel, err := CgroupID("."); err != nil || rel != id {
		t.Errorf("relative root: %d, %v; want %d", rel, err, id)
	}
	if _, err := CgroupID("/tmp"); err == nil {
		t.Error("/tmp accepted as a cgroup")
	}
	if _, err := CgroupID("does/not/exist"); err == nil {
		t.Error("missing cgroup accepted")
	}
}

func TestReadiness(t *testing.T) {
	var r readiness
	h := handler(prometheus.NewRegistry(), &r, "not attached", slog.New(slog.DiscardHandler))
	var body string
	get := func(path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
		body = rec.Body.String()
		return rec.Code
	}
	if get("/healthz") != 200 || get("/readyz") != 503 {
		t.Error("before attach: want healthz 200, readyz 503")
	}
	r.set("unwinder: frame-pointers (the kernel refused the CFI unwinder: x)\n")
	if get("/readyz") != 200 || body != "ok\nunwinder: frame-pointers (the kernel refused the CFI unwinder: x)\n" {
		t.Errorf("after attach: want readyz 200 with the mode, got body %q", body)
	}
	if get("/metrics") != 200 {
		t.Error("after attach: want metrics 200")
	}
}

// TestRunWritesOutputFile runs the whole collector for a few intervals into an output file.
func TestRunWritesOutputFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for eBPF")
	}
	out := filepath.Join(t.TempDir(), "profiles.pb")
	cli := &CLI{Frequency: 99, Interval: time.Second, OutputFile: out, MetricsAddr: "127.0.0.1:0",
		LogLevel: "info", LogFormat: "text", GatewayTimeout: time.Second, BufferBytes: 1 << 20, BufferRequests: 4,
		MaxSamplesPerInterval: 1 << 16, PID: []uint32{uint32(os.Getpid())}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Keep this process busy so the pid filter lets samples through.
	go func() {
		x := 0
		for ctx.Err() == nil {
			x++
		}
	}()
	runErr := make(chan error, 1)
	go func() { runErr <- cli.Run(ctx, slog.Default(), "test") }()
	// Until two intervals were written, at most 60 s: loading the eBPF programs decodes
	// the kernel's BTF, which takes many seconds under the race detector on a busy host.
	for start := time.Now(); time.Since(start) < 60*time.Second; time.Sleep(200 * time.Millisecond) {
		raw, _ := os.ReadFile(out)
		if recs, _ := exporter.ReadRecords(bytes.NewReader(raw)); len(recs) >= 2 {
			break
		}
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := exporter.ReadRecords(bytes.NewReader(raw))
	if err != nil || len(recs) < 2 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	for i, rec := range recs {
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(rec); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if err := otlpprofiles.ValidateStrict(req.Profiles()); err != nil {
			t.Errorf("record %d: %v", i, err)
		}
	}
}

func TestCPUPeriodPoints(t *testing.T) {
	for _, tt := range []struct{ hz, want int }{
		{19, 19}, {99, 99}, {20, 2}, {10, 1}, {25, 5}, {100, 10}, {7, 7}, {250, 25}, {1, 1},
	} {
		if got := cpuPeriodPoints(tt.hz); got != tt.want {
			t.Errorf("cpuPeriodPoints(%d) = %d, want %d", tt.hz, got, tt.want)
		}
	}
}
