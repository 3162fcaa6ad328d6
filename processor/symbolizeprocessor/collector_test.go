package symbolizeprocessor

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	// The OTLP exporter compresses with gzip by default; a backend decompresses.
	_ "google.golang.org/grpc/encoding/gzip"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// builderModule is the Collector Builder the manifest is written for; the module proxy serves
// it (docs/design/0002-collector-integration.md).
const builderModule = "go.opentelemetry.io/collector/cmd/builder@v0.164.0"

// builder returns the pinned ocb, installed into the project's tools directory when absent.
func builder(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("PROFSYM_TOOLS")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Skipf("no tools directory for the Collector Builder: %v", err)
		}
		dir = filepath.Join(home, ".cache", "profsym", "bin")
	}
	bin := filepath.Join(dir, "builder")
	if out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput(); err == nil && strings.Contains(string(out), "0.164.0") {
		return bin
	}
	cmd := exec.CommandContext(t.Context(), "go", "install", builderModule)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		// CI installs tools from the module proxy: there a missing builder is a failure.
		if os.Getenv("CI") != "" {
			t.Fatalf("cannot install the Collector Builder (%s): %v\n%s", builderModule, err, out)
		}
		t.Skipf("cannot install the Collector Builder (%s): %v\n%s", builderModule, err, out)
	}
	return bin
}

// buildCollector builds testdata/builder-config.yaml with ocb into dir, with the repository's
// root replacing the profsym module, and returns the binary. It runs beside the test's other
// setup, so it returns errors rather than ending the test.
func buildCollector(ctx context.Context, ocb, dir string) (string, error) {
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/profsym/profsym").Output()
	if err != nil {
		return "", fmt.Errorf("find the profsym module: %w", err)
	}
	manifest, err := os.ReadFile(filepath.Join("testdata", "builder-config.yaml"))
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "out")
	m := regexp.MustCompile(`(?m)^  output_path: .*$`).ReplaceAllString(string(manifest), "  output_path: "+out)
	m += fmt.Sprintf("  - github.com/profsym/profsym => %s\n", strings.TrimSpace(string(root)))
	path := filepath.Join(dir, "builder-config.yaml")
	if err := os.WriteFile(path, []byte(m), 0o644); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 25*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ocb, "--config", path)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("ocb: %w\n%s", err, b)
	}
	return filepath.Join(out, "otelcol-symbolize"), nil
}

// downstream is an OTLP/gRPC profiles endpoint that records what arrives.
type downstream struct {
	addr string
	mu   sync.Mutex
	got  []pprofile.Profiles
}

func startDownstream(t *testing.T) *downstream {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &downstream{addr: l.Addr().String()}
	s := otlptest.NewProfilesServer(d.Export)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return d
}

func (d *downstream) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	// Decoded from the wire for this call alone: string-table references in resource
	// attributes come resolved, as a backend reads them.
	pd := req.Profiles()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, pd)
	return pprofileotlp.NewExportResponse(), nil
}

func (d *downstream) wait(t *testing.T, n int, timeout time.Duration) []pprofile.Profiles {
	t.Helper()
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		d.mu.Lock()
		got := append([]pprofile.Profiles(nil), d.got...)
		d.mu.Unlock()
		if len(got) >= n {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("downstream has fewer than %d requests after %v", n, timeout)
	return nil
}

// rawCodec sends bytes as they are: the request goes out as the OTel eBPF profiler's exporter
// sends it, resource attributes as string-table references (pdata's marshaler writes them so),
// which pdata's gRPC client would not produce.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

const exportMethod = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// TestCollectorBuild builds a real Collector with ocb (OTLP receiver, this processor, OTLP
// exporter), runs it against the real symbolizer with uploaded test binaries, sends it requests
// shaped like the OTel eBPF profiler's (ELF virtual addresses, GNU, Go and htlhash build IDs,
// kernel frames, a Go binary, resource attributes as string-table references) and like pprof's
// (a PIE shared library relocated at runtime), and checks what reaches a downstream OTLP
// receiver: every native frame as llvm-symbolizer reads it, everything else as it was sent.
func TestCollectorBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Collector with ocb (minutes)")
	}
	ocb := builder(t)
	// The build is the slow part; the fixtures are built meanwhile.
	type built struct {
		bin string
		err error
	}
	collectorBin := make(chan built, 1)
	buildDir := t.TempDir()
	begin := time.Now()
	go func() {
		bin, err := buildCollector(t.Context(), ocb, buildDir)
		collectorBin <- built{bin, err}
	}()
	bins := otlptest.Binaries(t)
	sym := testsupport.StartSymbolizer(t, "")
	paths := make([]string, len(bins))
	for i, b := range bins {
		paths[i] = b.Path
	}
	sym.Upload(t, paths...)
	down := startDownstream(t)
	b := <-collectorBin
	if b.err != nil {
		t.Fatal(b.err)
	}
	bin := b.bin
	t.Logf("ocb built the Collector in %v", time.Since(begin).Round(time.Second))

	port := testsupport.FreePort(t)
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
processors:
  symbolize:
    endpoint: %s
    deadline: 10s
exporters:
  otlp_grpc:
    endpoint: %s
    tls:
      insecure: true
    retry_on_failure:
      enabled: false
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      processors: [symbolize]
      exporters: [otlp_grpc]
`, port, sym.URL(), down.addr)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "collector.log")
	logs, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd := exec.CommandContext(t.Context(), bin, "--config", cfgPath, "--feature-gates=service.profilesSupport")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("collector log:\n%s", b[max(0, len(b)-6000):])
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitListening(t, addr, 30*time.Second)

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i, sh := range []otlptest.Shape{otlptest.ShapeEBPF, otlptest.ShapeEBPFZero, otlptest.ShapePprof} {
		t.Run(string(sh), func(t *testing.T) {
			pd, cases := otlptest.BuildRequest(t, sh, bins)
			in := otlptest.Resolve(pd)
			body, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
			if err != nil {
				t.Fatal(err)
			}
			var resp []byte
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if err := conn.Invoke(ctx, exportMethod, &body, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
				t.Fatalf("export to the Collector: %v", err)
			}
			got := down.wait(t, i+1, 30*time.Second)
			outPD := got[i]
			if err := otlpprofiles.Validate(outPD); err != nil {
				t.Fatalf("output invalid: %v", err)
			}
			out := otlptest.Resolve(outPD)
			if err := otlptest.Compare(in, out); err != nil {
				t.Fatal(err)
			}
			otlptest.CheckFrames(t, out, cases)
			if err := otlpprofiles.Orphans(outPD); err != nil {
				t.Errorf("output dictionary: %v", err)
			}
			t.Logf("%s: %d addresses symbolized through the Collector as llvm-symbolizer does", sh, len(cases))
		})
	}
}

func waitListening(t *testing.T, addr string, timeout time.Duration) {
	t.Helper()
	end := time.Now().Add(timeout)
	var d net.Dialer
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		c, err := d.DialContext(ctx, "tcp", addr)
		cancel()
		if err == nil {
			_ = c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("collector not listening on %s after %v", addr, timeout)
}
