package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/alecthomas/kong"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/testsupport"
)

// startLogged serves like start, its log (info and up) kept in a buffer the test reads.
func startLogged(t *testing.T, args ...string) (*running, *testsupport.Buffer) {
	t.Helper()
	var cli struct {
		Serve Config `cmd:""`
	}
	p, err := kong.New(&cli, kong.Exit(func(int) { t.Fatal("kong exit") }))
	if err != nil {
		t.Fatal(err)
	}
	full := append([]string{"serve", "--store-dir", t.TempDir(), "--upload-token", token, "--temp-dir", t.TempDir()}, args...)
	if _, err := p.Parse(full); err != nil {
		t.Fatalf("parse %v: %v", full, err)
	}
	var buf testsupport.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, &cli.Serve, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &running{url: "http://" + ln.Addr().String(), srv: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.ServeListener(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("serve: %v", err)
		}
		s.Close()
		if t.Failed() {
			t.Logf("symbolizer log:\n%s", buf.String())
		}
	})
	return r, &buf
}

// logLines returns the lines of log that match re.
func logLines(log *testsupport.Buffer, re string) []string {
	var out []string
	for _, l := range strings.Split(log.String(), "\n") {
		if regexp.MustCompile(re).MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// metricValue reads one series from /metrics (-1 when absent).
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	_, body := testsupport.Get(t, url+"/metrics")
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return -1
}

// A store that goes away is said once when it goes (WARN), and once when it is back (INFO),
// however many calls failed meanwhile; the gauge and the error counter follow.
func TestStoreOutageIsLoggedOnceAndItsEnd(t *testing.T) {
	dir := t.TempDir()
	r, log := startLogged(t, "--store-dir", dir)
	if v := metricValue(t, r.url, `symbolizer_degraded{dependency="store"}`); v != 0 {
		t.Fatalf("store gauge before the outage = %v", v)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if code, _ := testsupport.Get(t, r.url+"/readyz"); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz with the store gone = %d", code)
		}
	}
	if n := len(logLines(log, `level=WARN msg="store degraded`)); n != 1 {
		t.Fatalf("%d WARN lines for 20 failed calls, want 1:\n%s", n, log.String())
	}
	if v := metricValue(t, r.url, `symbolizer_degraded{dependency="store"}`); v != 1 {
		t.Fatalf("store gauge during the outage = %v", v)
	}
	if v := metricValue(t, r.url, `symbolizer_store_errors_total{op="ping"}`); v < 20 {
		t.Fatalf("store ping errors = %v, want >= 20", v)
	}
	// The folder store's own layout, as NewFolder makes it.
	if err := os.MkdirAll(filepath.Join(dir, ".tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _ := testsupport.Get(t, r.url+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with the store back = %d", code)
	}
	ended := logLines(log, `level=INFO msg="store recovered"`)
	// The 20 probes and whatever else touched the store meanwhile (the coverage writer).
	if len(ended) != 1 || !regexp.MustCompile(`failures=[2-9][0-9]\b`).MatchString(ended[0]) {
		t.Fatalf("recovery lines = %q\n%s", ended, log.String())
	}
	if v := metricValue(t, r.url, `symbolizer_degraded{dependency="store"}`); v != 0 {
		t.Fatalf("store gauge after the outage = %v", v)
	}
}

// An upstream debuginfod that stops answering is said once (not once per failed fetch) and its
// return once, with the gauge; a real Debian debuginfod behind Toxiproxy, taken away by
// disabling the proxy.
func TestDebuginfodUpstreamOutageIsLoggedOnceAndItsEnd(t *testing.T) {
	up := testsupport.StartDebuginfod(t, t.TempDir())
	tox := testsupport.StartToxiproxy(t)
	proxy := tox.Proxy("debuginfod", strings.TrimPrefix(up.URL(), "http://"))
	upURL := "http://" + proxy.Listen
	r, log := startLogged(t, "--debuginfod-url", upURL, "--debuginfod-timeout", "2s")
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	gauge := fmt.Sprintf(`symbolizer_degraded{dependency="debuginfod %s"}`, upURL)
	ask := func(i int) {
		t.Helper()
		// A build ID no one has, a new one each time: the negative cache does not answer.
		id := fmt.Sprintf("%040x", 0xabc000+i)
		req := connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: id, Addresses: []uint64{0x1000}}}})
		resp, err := client.Symbolize(t.Context(), req)
		if err != nil {
			t.Fatalf("Symbolize with the upstream away: %v (a module's upstream is not the request's fault)", err)
		}
		if st := resp.Msg.Modules[0].Status; st == symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
			t.Fatalf("module %s resolved from nowhere", id)
		}
	}
	ask(0)
	if v := metricValue(t, r.url, gauge); v != 0 {
		t.Fatalf("gauge with the upstream up = %v", v)
	}
	if err := proxy.Disable(); err != nil {
		t.Fatal(err)
	}
	// Fewer failures than open the upstream's circuit (5), so that its return is seen at once.
	for i := 1; i <= 4; i++ {
		ask(i)
	}
	if n := len(logLines(log, `level=WARN msg="debuginfod upstream .* degraded`)); n != 1 {
		t.Fatalf("%d WARN lines for 4 failed fetches, want 1:\n%s", n, log.String())
	}
	if v := metricValue(t, r.url, gauge); v != 1 {
		t.Fatalf("gauge with the upstream away = %v", v)
	}
	if err := proxy.Enable(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ask(5)
	ended := logLines(log, `level=INFO msg="debuginfod upstream .* recovered"`)
	if len(ended) != 1 || !strings.Contains(ended[0], "failures=4") {
		t.Fatalf("recovery lines = %q\n%s", ended, log.String())
	}
	if v := metricValue(t, r.url, gauge); v != 0 {
		t.Fatalf("gauge after the upstream is back = %v", v)
	}
	t.Logf("upstream back: the first fetch after it recovered took %v", time.Since(start).Round(time.Millisecond))
}
