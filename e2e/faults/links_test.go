package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/profsym/profsym/demo/pipeline"
	"github.com/profsym/profsym/pkg/testsupport"
)

// TestFaultsUpstreamAndSenderLinks puts Toxiproxy on the two links TestFaults leaves out:
// between the symbolizer and a real debuginfod upstream (a second symbolizer serving its
// store on the debuginfod paths), and between a sender shaped like the collector (one request
// every 50 ms, each retried with backoff until the gateway takes it) and the gateway. Each
// fault of faults lasts a few seconds under load. Checked: every sample sent comes out once
// (a duplicate only where the sender retried a request whose answer it lost), symbolization
// resumes by itself, peak RSS stays bounded, and the symbolizer's log and metrics name an
// upstream outage.
//
// An upstream is asked only for what the store lacks, so each fault of the upstream link gets
// a binary of its own, uploaded to the upstream alone: its first fetch meets the fault.
func TestFaultsUpstreamAndSenderLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite: starts every server and injects faults; skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, logs, bins := buildSuite(ctx, t, "upstream", "symbolizer", "gateway")
	tox := testsupport.StartToxiproxy(t)
	const token = "faults-token"

	// The upstream: a symbolizer whose store is served on the debuginfod paths.
	upstream, upPorts, err := pipeline.StartService(ctx, "upstream", filepath.Join(logs, "upstream.log"), bins.Symbolizer, 1, 30*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{"serve", "--listen", addr, "--upload-token", token, "--store-dir", filepath.Join(dir, "upstream-store")},
				"http://" + addr + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { upstream.Stop(syscall.SIGKILL, time.Second) })
	upAddr := "127.0.0.1:" + strconv.Itoa(upPorts[0])
	proxies := map[string]*toxiproxy.Proxy{"symbolizer->debuginfod": tox.Proxy("debuginfod", upAddr)}
	upURL := "http://" + proxies["symbolizer->debuginfod"].Listen

	sym, sp, err := pipeline.StartService(ctx, "symbolizer", filepath.Join(logs, "symbolizer.log"), bins.Symbolizer, 1, 30*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{"serve", "--listen", addr, "--upload-token", token, "--store-dir", filepath.Join(dir, "store"),
				"--shutdown-timeout", "5s", "--result-cache-entries", "0",
				// Deadlines the faults go beyond, and a breaker that closes again within a phase.
				"--debuginfod-url", upURL, "--debuginfod-timeout", "2s", "--debuginfod-negative-ttl", "1s",
				"--debuginfod-breaker-failures", "5", "--debuginfod-breaker-open", "2s",
			}, "http://" + addr + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sym.Stop(syscall.SIGKILL, time.Second) })
	symURL := "http://127.0.0.1:" + strconv.Itoa(sp[0])

	sk := startSink(t)
	gw, gp, err := startGateway(ctx, filepath.Join(logs, "gateway.log"), bins.Gateway, symURL, sk.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop(syscall.SIGKILL, time.Second) })
	proxies["collector->gateway"] = tox.Proxy("gateway", gp.GRPCAddr())

	cc, err := grpc.NewClient(proxies["collector->gateway"].Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	snd := newSender(pprofileotlp.NewGRPCClient(cc))
	variant := 0
	// fresh compiles a binary no one has seen and uploads it to the upstream only.
	fresh := func() *target {
		t.Helper()
		variant++
		prog := testsupport.CompileC(t, program+fmt.Sprintf("int variant_%d = %d;\n", variant, variant), "-O2", "-g")
		up := exec.CommandContext(ctx, bins.Symbolizer, "upload", "--server", "http://"+upAddr, "--token", token, "--progress", "plain", prog)
		if out, err := up.CombinedOutput(); err != nil {
			t.Fatalf("upload to the upstream: %v\n%s", err, out)
		}
		tg, err := newTarget(prog)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	snd.target.Store(fresh())
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() { snd.run(loadCtx, 50*time.Millisecond); close(loadDone) }()
	if d, err := snd.recover(ctx, sk, true, 60*time.Second); err != nil {
		t.Fatalf("before any fault: %v", err)
	} else {
		t.Logf("pipeline symbolizes through the upstream (first probe after %v)", d.Round(time.Millisecond))
	}

	type row struct {
		link, fault           string
		sent, retried         int
		recovery              time.Duration
		rssGateway, rssSymbol int64
		upstreamErrors        float64
	}
	var rows []row
	for _, link := range []string{"symbolizer->debuginfod", "collector->gateway"} {
		for _, f := range faults {
			name := link + "/" + f.name
			var next *target
			if link == "symbolizer->debuginfod" {
				next = fresh()
			}
			snd.newPhase(name)
			before := failedFetches(t, symURL)
			rss := watchRSS(gw.PID(), sym.PID())
			if err := f.apply(proxies[link]); err != nil {
				t.Fatalf("%s: apply: %v", name, err)
			}
			if next != nil {
				// Profiles of the new binary from now on: its first fetch meets the fault.
				snd.target.Store(next)
			}
			time.Sleep(3 * time.Second)
			if err := f.clear(proxies[link]); err != nil {
				t.Fatalf("%s: clear: %v", name, err)
			}
			recovery, err := snd.recover(ctx, sk, true, 60*time.Second)
			peakGW, peakSym := rss()
			if err != nil {
				t.Errorf("%s: did not recover: %v", name, err)
			}
			after := failedFetches(t, symURL)
			r := row{link: link, fault: f.name, sent: snd.sentIn(name), retried: snd.retriedIn(name), recovery: recovery,
				rssGateway: peakGW, rssSymbol: peakSym,
				upstreamErrors: after - before}
			rows = append(rows, r)
			const ceiling = 1 << 30
			if peakGW > ceiling || peakSym > ceiling {
				t.Errorf("%s: peak RSS gateway %d MiB, symbolizer %d MiB", name, peakGW>>20, peakSym>>20)
			}
			// What happened is said: every fault of the upstream link makes fetches fail (each
			// goes beyond the 2 s fetch deadline or breaks the connection); the sender's
			// retries are the collector's export failures.
			if link == "symbolizer->debuginfod" && r.upstreamErrors == 0 {
				t.Errorf("%s: no failed upstream fetch counted", name)
			}
			// (A stalled connection, timeout, resumes when the toxic goes: no retry needed.)
			if link == "collector->gateway" && (f.name == "down" || f.name == "reset_peer") && r.retried == 0 {
				t.Errorf("%s: the sender never had to retry", name)
			}
		}
	}
	stopLoad()
	<-loadDone
	// Everything acknowledged reaches the downstream (the gateway's queue drains).
	acked := snd.ackedIDs()
	deadline := time.Now().Add(60 * time.Second)
	for sk.missing(acked) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	in, out, lost, dups := sk.account(acked)
	if lost > 0 {
		t.Errorf("%d acknowledged requests never reached the downstream", lost)
	}
	if in != out {
		t.Errorf("samples in %d, out %d (first deliveries)", in, out)
	}
	for phase, n := range dups {
		// A duplicate can only be a request the sender sent again after losing the answer
		// to a copy the gateway had taken: OTLP delivery is at least once.
		if !strings.HasPrefix(phase, "collector->gateway/") || n > snd.retriedIn(phase) {
			t.Errorf("%s: %d duplicated requests, %d retried sends", phase, n, snd.retriedIn(phase))
		}
	}
	// The symbolizer's log told the upstream outages, once each, and their ends.
	symLog, err := os.ReadFile(filepath.Join(logs, "symbolizer.log"))
	if err != nil {
		t.Fatal(err)
	}
	starts := strings.Count(string(symLog), "debuginfod upstream "+upURL+" degraded")
	ends := strings.Count(string(symLog), "debuginfod upstream "+upURL+" recovered")
	if starts == 0 || ends == 0 || starts > len(faults)+1 {
		t.Errorf("symbolizer log: %d outage starts and %d ends of the upstream for %d faults", starts, ends, len(faults))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-24s %-11s %6s %7s %9s %8s %8s %9s %5s\n", "link", "fault", "sent", "retried", "recovery", "gw MiB", "sym MiB", "up fails", "dup")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-24s %-11s %6d %7d %9s %8d %8d %9.0f %5d\n", r.link, r.fault, r.sent, r.retried, r.recovery.Round(10*time.Millisecond),
			r.rssGateway>>20, r.rssSymbol>>20, r.upstreamErrors, dups[r.link+"/"+r.fault])
	}
	t.Logf("requests acknowledged %d; samples in %d, out %d; lost %d; upstream outages logged %d, ended %d\n%s",
		len(acked), in, out, lost, starts, ends, b.String())
}

// startGateway runs the gateway against symbolizerURL, exporting to downstream, with the
// deadlines of TestFaults (symbolizer calls 1 s, export 2 s) and no symbol cache in front of
// the symbolizer, and its sending queue on disk as in production; its configuration and queue
// are kept beside its log.
func startGateway(ctx context.Context, logPath, bin, symbolizerURL, downstream string) (*pipeline.Proc, pipeline.GatewayPorts, error) {
	noCache := 0
	dir := filepath.Dir(logPath)
	return pipeline.StartGateway(ctx, bin, filepath.Join(dir, "gateway.yaml"), logPath,
		pipeline.GatewayConfig{Symbolizer: symbolizerURL, Timeout: time.Second, Deadline: 2 * time.Second,
			CacheEntries: &noCache, Downstream: downstream, StorageDir: filepath.Join(dir, "gateway-queue")}, 60*time.Second)
}

// failedFetches is the symbolizer's count of upstream fetches that failed or were not tried
// (open circuit).
func failedFetches(t *testing.T, base string) float64 {
	t.Helper()
	code, body := testsupport.Get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("GET %s/metrics: %d", base, code)
	}
	n := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		sm := sampleRe.FindStringSubmatch(line)
		if sm == nil || sm[1] != "symbolizer_debuginfod_fetches_total" ||
			!strings.Contains(sm[2], `result="error"`) && !strings.Contains(sm[2], `result="open_circuit"`) {
			continue
		}
		v, err := strconv.ParseFloat(sm[3], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		n += v
	}
	return n
}
