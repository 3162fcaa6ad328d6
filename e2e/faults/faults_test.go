// Package faults injects faults on every link of the pipeline with Toxiproxy, under a steady
// load of requests shaped like the OTel eBPF profiler's, and checks that nothing is lost, that
// symbolization resumes by itself, that memory stays bounded and that the metrics say what
// happened.
package faults

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	// The gateway gzips its exports: the sink must read gzip.
	_ "google.golang.org/grpc/encoding/gzip"

	"github.com/profsym/profsym/demo/pipeline"
	"github.com/profsym/profsym/pkg/testsupport"
)

const program = `#include <stdio.h>
static inline __attribute__((always_inline)) int leaf(int x) { return x * 3 + (x >> 2); }
__attribute__((noinline)) int hot(int x) { int s = 0; for (int i = 0; i < x; i++) s += leaf(i ^ x); return s; }
int main(int c, char **v) { (void)v; printf("%d\n", hot(c + 100)); return 0; }
`

// requestKey is the resource attribute that names each request, so the sink can tell a lost
// request from a duplicated one.
const requestKey = "test.request"

// fault is one way a link misbehaves.
type fault struct {
	name  string
	apply func(p *toxiproxy.Proxy) error
	clear func(p *toxiproxy.Proxy) error
}

func toxic(typ string, attrs toxiproxy.Attributes) fault {
	return fault{
		name: typ,
		apply: func(p *toxiproxy.Proxy) error {
			_, err := p.AddToxic("fault", typ, "downstream", 1, attrs)
			return err
		},
		clear: func(p *toxiproxy.Proxy) error { return p.RemoveToxic("fault") },
	}
}

var faults = []fault{
	// Beyond every deadline: the gateway's symbolize (1s) and export (2s) timeouts and the
	// symbolizer's Redis timeout (100ms).
	toxic("latency", toxiproxy.Attributes{"latency": 3000}),
	toxic("bandwidth", toxiproxy.Attributes{"rate": 4}), // KB/s
	toxic("reset_peer", toxiproxy.Attributes{"timeout": 50}),
	toxic("timeout", toxiproxy.Attributes{"timeout": 0}), // data stops, the connection stays open
	{
		name:  "down",
		apply: func(p *toxiproxy.Proxy) error { return p.Disable() },
		clear: func(p *toxiproxy.Proxy) error { return p.Enable() },
	},
}

func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite: starts every server and injects faults for minutes; skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	_, logs, bins := buildSuite(ctx, t, "symbolizer", "gateway")
	prog := testsupport.CompileC(t, program, "-O2", "-g")
	tg, err := newTarget(prog)
	if err != nil {
		t.Fatal(err)
	}

	redis := testsupport.StartRedis(t)
	minio := testsupport.StartMinIO(t)
	minio.NewBucket(t, "faults")
	tox := testsupport.StartToxiproxy(t)
	proxies := map[string]*toxiproxy.Proxy{
		"symbolizer->redis": tox.Proxy("redis", redis.Addr()),
		"symbolizer->minio": tox.Proxy("minio", minio.Endpoint()),
	}

	const token = "faults-token"
	sym, sp, err := pipeline.StartService(ctx, "symbolizer", filepath.Join(logs, "symbolizer.log"), bins.Symbolizer, 1, 30*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{"serve", "--listen", addr, "--upload-token", token, "--shutdown-timeout", "5s",
				"--s3-endpoint", proxies["symbolizer->minio"].Listen, "--s3-bucket", "faults", "--s3-region", minio.Region(),
				"--s3-access-key", minio.AccessKey(), "--s3-secret-key", minio.SecretKey(), "--s3-insecure",
				// Every answer goes through Redis: no in-process result cache in front of it.
				"--redis-url", "redis://" + proxies["symbolizer->redis"].Listen + "/0", "--redis-timeout", "100ms",
				"--result-cache-entries", "0",
			}, "http://" + addr + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sym.Stop(syscall.SIGKILL, time.Second) })
	symAddr := "127.0.0.1:" + strconv.Itoa(sp[0])
	up := exec.CommandContext(ctx, bins.Symbolizer, "upload", "--server", "http://"+symAddr, "--token", token, "--progress", "plain", prog)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("symbolizer upload: %v\n%s", err, out)
	}
	proxies["gateway->symbolizer"] = tox.Proxy("symbolizer", symAddr)

	sk := startSink(t)
	proxies["gateway->downstream"] = tox.Proxy("downstream", sk.addr)
	gw, gp, err := startGateway(ctx, filepath.Join(logs, "gateway.log"), bins.Gateway,
		"http://"+proxies["gateway->symbolizer"].Listen, proxies["gateway->downstream"].Listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop(syscall.SIGKILL, time.Second) })
	metricsURL := gp.MetricsURL()

	cc, err := grpc.NewClient(gp.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ld := newSender(pprofileotlp.NewGRPCClient(cc))
	ld.target.Store(tg)
	sk.mu.Lock()
	sk.phase = ld.phaseName
	sk.mu.Unlock()
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() { ld.run(loadCtx, 50*time.Millisecond); close(loadDone) }()

	// Everything works before any fault.
	if d, err := ld.recover(ctx, sk, true, 60*time.Second); err != nil {
		m := scrape(t, metricsURL)
		t.Fatalf("before any fault: %v (downstream received %d requests; gateway: %v samples in, %v exported, %v frames symbolized, %v unsymbolized)", err,
			sk.deliveries(), m.sum(metricAccepted), m.sum(metricSent), m.sum(metricResolved), m.sum(metricUnsymbolized))
	} else {
		t.Logf("pipeline symbolizes (first probe after %v)", d.Round(time.Millisecond))
	}

	type row struct {
		link, fault               string
		sent, dup                 int
		recovery                  time.Duration
		rssGateway, rssSymbolizer int64
		unresolvedDelta, queued   float64
		heldDelta                 float64
	}
	var rows []row
	for _, link := range []string{"gateway->symbolizer", "symbolizer->redis", "symbolizer->minio", "gateway->downstream"} {
		for _, f := range faults {
			name := link + "/" + f.name
			ld.newPhase(name)
			before := scrape(t, metricsURL)
			rss := watchRSS(gw.PID(), sym.PID())
			if err := f.apply(proxies[link]); err != nil {
				t.Fatalf("%s: apply: %v", name, err)
			}
			time.Sleep(4 * time.Second)
			during := scrape(t, metricsURL)
			if err := f.clear(proxies[link]); err != nil {
				t.Fatalf("%s: clear: %v", name, err)
			}
			// Symbolization (or, for the downstream, delivery) resumes by itself.
			recovery, err := ld.recover(ctx, sk, link != "gateway->downstream", 90*time.Second)
			peakGW, peakSym := rss()
			if err != nil {
				t.Errorf("%s: did not recover: %v", name, err)
			}
			after := scrape(t, metricsURL)
			rows = append(rows, row{link: link, fault: f.name, sent: ld.sentIn(name), recovery: recovery,
				rssGateway: peakGW, rssSymbolizer: peakSym,
				unresolvedDelta: after.sum(metricUnsymbolized) - before.sum(metricUnsymbolized),
				queued:          during.sum(metricQueueSize),
				heldDelta:       after.sum(metricHeld) - before.sum(metricHeld)})
			// Memory stays bounded: a generous ceiling, far above a healthy process, far below
			// a leak or a queue without bound over a few seconds of load.
			const ceiling = 1 << 30
			if peakGW > ceiling || peakSym > ceiling {
				t.Errorf("%s: peak RSS gateway %d MiB, symbolizer %d MiB", name, peakGW>>20, peakSym>>20)
			}
			// The metrics say what happened: a symbolizer that cannot be reached leaves
			// frames unsymbolized; a slow one is busy, not down, so its frames are held until it
			// answers (or counted unsymbolized at the hold's end); with a downstream that cannot
			// be reached requests wait in the sending queue, retried.
			switch {
			case link == "gateway->symbolizer" && f.name == "down":
				if rows[len(rows)-1].unresolvedDelta == 0 {
					t.Errorf("%s: no location counted unresolved", name)
				}
			case link == "gateway->symbolizer" && (f.name == "latency" || f.name == "timeout"):
				// A symbolizer that takes the request and never answers looks, from the
				// gateway, like a busy one: its call ends at the deadline, and the profile is
				// held. Whether the hold outlasts the fault (then the frames are symbolized
				// after all) or ends first (then they are counted unsymbolized) is the race of
				// a loaded machine; one of the two must be seen.
				if r := rows[len(rows)-1]; r.unresolvedDelta == 0 && r.heldDelta == 0 {
					t.Errorf("%s: no location counted unresolved and no profile held", name)
				}
			case link == "gateway->downstream" && (f.name == "down" || f.name == "timeout" || f.name == "latency"):
				if rows[len(rows)-1].queued == 0 {
					t.Errorf("%s: the sending queue was empty at the end of the fault", name)
				}
			}
		}
	}
	stopLoad()
	<-loadDone
	// Nothing lost: every request the gateway acknowledged reaches the downstream (its queue
	// drains). Only then is it stopped: a stop interrupts the retries under way, whose requests
	// the persistent queue keeps for the next start (TestDrillRestartWhileDownstreamDown in the
	// gateway's tests) and an in-memory queue drops, saying how many.
	acked := ld.ackedIDs()
	for deadline := time.Now().Add(60 * time.Second); sk.missing(acked) > 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	if err := gw.Stop(syscall.SIGTERM, 90*time.Second); err != nil {
		t.Errorf("stop gateway: %v", err)
	}

	_, _, lost, _ := sk.account(acked)
	// A duplicate belongs to the fault under which it arrived.
	dups := sk.duplicatesByArrival()
	for i := range rows {
		rows[i].dup = dups[rows[i].link+"/"+rows[i].fault]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %-11s %6s %5s %9s %8s %8s %13s %5s %7s\n", "link", "fault", "sent", "dup", "recovery", "gw MiB", "sym MiB", "unsymbolized", "held", "queued")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-22s %-11s %6d %5d %9s %8d %8d %13.0f %5.0f %7.0f\n", r.link, r.fault, r.sent, r.dup, r.recovery.Round(10*time.Millisecond),
			r.rssGateway>>20, r.rssSymbolizer>>20, r.unresolvedDelta, r.heldDelta, r.queued)
	}
	t.Logf("requests acknowledged %d, delivered %d distinct, lost %d, duplicated %d\n%s", len(acked), sk.deliveries(), lost, total(dups), b.String())
	if lost > 0 {
		t.Errorf("%d acknowledged requests never reached the downstream", lost)
	}
	for phase, n := range dups {
		// An export whose answer is lost (the link dropped after the downstream took it) is
		// sent again: OTLP delivery is at least once. Elsewhere a duplicate is a bug.
		if !strings.HasPrefix(phase, "gateway->downstream/") {
			t.Errorf("%s: %d duplicated requests", phase, n)
		}
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// metrics is a scrape of Prometheus text: sums by metric name over every label set.
type metrics map[string]float64

var sampleRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([0-9.eE+-]+)$`)

func scrape(t *testing.T, url string) metrics {
	t.Helper()
	code, body := testsupport.Get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d", url, code)
	}
	m := metrics{}
	for _, line := range strings.Split(string(body), "\n") {
		if sm := sampleRe.FindStringSubmatch(line); sm != nil {
			v, err := strconv.ParseFloat(sm[3], 64)
			if err == nil {
				m[sm[1]] += v
			}
		}
	}
	return m
}

// The gateway's own telemetry (the Collector's, and the symbolize processor's) the suite reads.
const (
	metricAccepted     = "otelcol_receiver_accepted_profile_samples"
	metricSent         = "otelcol_exporter_sent_profile_samples"
	metricQueueSize    = "otelcol_exporter_queue_size"
	metricResolved     = "otelcol_processor_symbolize_frames_resolved"
	metricUnsymbolized = "otelcol_processor_symbolize_frames_unsymbolized"
	metricHeld         = "otelcol_processor_symbolize_held"
)

// sum is the value of a metric over every label set, under its name with or without the
// _total suffix Prometheus gives counters.
func (m metrics) sum(name string) float64 { return m[name] + m[name+"_total"] }

// watchRSS samples the resident set of the processes until the returned function is called,
// which returns the peaks.
func watchRSS(pids ...int) func() (int64, int64) {
	peaks := make([]atomic.Int64, len(pids))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			for i, pid := range pids {
				if v := pipeline.RSS(pid); v > peaks[i].Load() {
					peaks[i].Store(v)
				}
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() (int64, int64) {
		close(stop)
		<-done
		return peaks[0].Load(), peaks[1].Load()
	}
}
