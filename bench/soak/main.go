// Command soak runs the whole pipeline for a long while under steady load and prints, every
// interval, what should stay flat: each service's resident memory, goroutines and open files,
// the p99 of the load's export round trip, and samples in and out. The real collector samples
// the machine (eBPF, so run it as root) and a load generator sends requests shaped like the OTel
// eBPF profiler's; the symbolizer keeps its store in MinIO and its results in Redis.
//
//	go run ./bench/soak -duration 30m
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	// The gateway gzips its exports.
	_ "google.golang.org/grpc/encoding/gzip"

	"github.com/profsym/profsym/demo/pipeline"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/freeport"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

func main() {
	duration := flag.Duration("duration", 30*time.Minute, "How long the load runs.")
	every := flag.Duration("every", time.Minute, "How often a line is printed.")
	rate := flag.Int("rate", 20, "Requests per second sent by the load generator (besides the collector's own).")
	tools := flag.String("tools", filepath.Join(os.Getenv("HOME"), ".cache", "profsym", "bin"), "Where .ci/install-deps put MinIO.")
	flag.Parse()
	if err := run(*duration, *every, *rate, *tools); err != nil {
		log.Fatal(err)
	}
}

func run(duration, every time.Duration, rate int, tools string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := pipeline.ModuleRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "profsym-soak-")
	if err != nil {
		return err
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			log.Printf("remove %s: %v", dir, err)
		}
	}()
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	log.Printf("building the services (logs in %s while it runs)", logs)
	bins, err := pipeline.BuildServices(ctx, root, filepath.Join(dir, "bin"))
	if err != nil {
		return err
	}
	wl, err := pipeline.CompileWorkload(ctx, root, filepath.Join(dir, "workload"))
	if err != nil {
		return err
	}
	var procs []*pipeline.Proc
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			_ = procs[i].Stop(syscall.SIGTERM, 30*time.Second)
		}
	}()
	start := func(name string, nports int, args func([]int) ([]string, string), bin string) ([]int, error) {
		p, ports, err := pipeline.StartService(ctx, name, filepath.Join(logs, name+".log"), bin, nports, time.Minute, args)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		return ports, nil
	}

	// Redis speaks no HTTP: it is ready when it takes a connection.
	redisPorts, err := freeport.Ports(1)
	if err != nil {
		return err
	}
	redisAddr := "127.0.0.1:" + strconv.Itoa(redisPorts[0])
	redis, err := pipeline.Start("redis", filepath.Join(logs, "redis.log"), "redis-server",
		"--bind", "127.0.0.1", "--port", strconv.Itoa(redisPorts[0]), "--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return err
	}
	procs = append(procs, redis)
	if err := waitTCP(ctx, redisAddr, 30*time.Second); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	const minioUser, minioPass = "profsym-soak", "profsym-soak-secret"
	if err := os.Setenv("MINIO_ROOT_USER", minioUser); err != nil {
		return err
	}
	if err := os.Setenv("MINIO_ROOT_PASSWORD", minioPass); err != nil {
		return err
	}
	minioPorts, err := start("minio", 2, func(p []int) ([]string, string) {
		return []string{"server", filepath.Join(dir, "minio"), "--address", "127.0.0.1:" + strconv.Itoa(p[0]),
			"--console-address", "127.0.0.1:" + strconv.Itoa(p[1])}, "http://127.0.0.1:" + strconv.Itoa(p[0]) + "/minio/health/ready"
	}, filepath.Join(tools, "minio"))
	if err != nil {
		return err
	}
	const token = "soak-token"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	symPorts, err := start("symbolizer", 1, func(p []int) ([]string, string) {
		addr := "127.0.0.1:" + strconv.Itoa(p[0])
		return []string{"serve", "--listen", addr, "--upload-token", token,
			"--s3-endpoint", "127.0.0.1:" + strconv.Itoa(minioPorts[0]), "--s3-bucket", "soak", "--s3-insecure", "--s3-create-bucket",
			"--s3-access-key", minioUser, "--s3-secret-key", minioPass,
			"--redis-url", "redis://" + redisAddr + "/0"}, "http://" + addr + "/readyz"
	}, bins.Symbolizer)
	if err != nil {
		return err
	}
	symURL := "http://127.0.0.1:" + strconv.Itoa(symPorts[0])
	if out, err := exec.CommandContext(ctx, bins.Symbolizer, "upload", "--server", symURL, "--token", token, "--progress", "plain", wl.Debug).CombinedOutput(); err != nil {
		return fmt.Errorf("upload the workload's debuginfo: %w\n%s", err, out)
	}

	sk, err := startSink()
	if err != nil {
		return err
	}
	gw, gwPorts, err := pipeline.StartGateway(ctx, bins.Gateway, filepath.Join(dir, "gateway.yaml"), filepath.Join(logs, "gateway.log"),
		pipeline.GatewayConfig{Symbolizer: symURL, Downstream: sk.addr, JSONLogs: true}, time.Minute)
	if err != nil {
		return err
	}
	procs = append(procs, gw)
	colPorts, err := start("collector", 1, func(p []int) ([]string, string) {
		addr := "127.0.0.1:" + strconv.Itoa(p[0])
		return []string{"--gateway", gwPorts.GRPCAddr(), "--gateway-insecure", "--interval", "10s",
			"--metrics-addr", addr, "--upload-debuginfo", "--symbolizer-url", symURL, "--upload-token-file", tokenFile,
			"--upload-max-bytes", "1048576"}, "http://" + addr + "/readyz"
	}, bins.Collector)
	if err != nil {
		return err
	}
	work, err := pipeline.Start("workload", filepath.Join(logs, "workload.log"), wl.Stripped)
	if err != nil {
		return err
	}
	procs = append(procs, work)

	ids, err := buildid.FromFile(wl.Stripped)
	if err != nil {
		return err
	}
	lo, hi, err := pipeline.FuncRange(wl.Debug, "main")
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient(gwPorts.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	// A client that only sent: a failed close loses nothing.
	defer func() { _ = cc.Close() }()
	gen := &generator{client: pprofileotlp.NewGRPCClient(cc), path: wl.Stripped, ids: ids, lo: lo, hi: hi}
	loadCtx, stopLoad := context.WithTimeout(ctx, duration)
	defer stopLoad()
	go gen.run(loadCtx, time.Second/time.Duration(max(rate, 1)))

	// The Collector's own telemetry has no goroutine count: the gateway's column is its Go heap.
	watched := []struct {
		name, metrics string
		proc          *pipeline.Proc
		gauge, column string
		scale         float64
	}{
		{"gateway", gwPorts.MetricsURL(), procs[3], "otelcol_process_runtime_heap_alloc_bytes", "heapMiB", 1 << 20},
		{"symbolizer", symURL + "/metrics", procs[2], "go_goroutines", "gorout", 1},
		{"collector", "http://127.0.0.1:" + strconv.Itoa(colPorts[0]) + "/metrics", procs[4], "go_goroutines", "gorout", 1},
	}
	head := fmt.Sprintf("%8s", "interval")
	for _, w := range watched {
		head += fmt.Sprintf(" | %-10s %7s %7s %6s", w.name, "RSS MiB", w.column, "files")
	}
	fmt.Println(head + " | p99 ms  sent/s  out/s  errors")
	t := time.NewTicker(every)
	defer t.Stop()
	var lastSent, lastOut int64
	for n := 1; ; n++ {
		select {
		case <-loadCtx.Done():
			log.Printf("done: %d requests sent by the load generator, %d export errors; the downstream received %d requests", gen.sent.Load(), gen.errors.Load(), sk.requests.Load())
			return nil
		case <-t.C:
		}
		line := fmt.Sprintf("%8d", n)
		for _, w := range watched {
			line += fmt.Sprintf(" | %-10s %7d %7.0f %6d", "", pipeline.RSS(w.proc.PID())>>20, gauge(ctx, w.metrics, w.gauge)/w.scale, openFiles(w.proc.PID()))
		}
		sent, out := gen.sent.Load(), sk.requests.Load()
		secs := every.Seconds()
		fmt.Printf("%s | %6.1f %7.1f %6.1f %6d\n", line, gen.p99().Seconds()*1000, float64(sent-lastSent)/secs, float64(out-lastOut)/secs, gen.errors.Load())
		lastSent, lastOut = sent, out
	}
}

// generator sends eBPF-profiler-shaped requests and keeps the round trips of the last interval.
type generator struct {
	client       pprofileotlp.GRPCClient
	path         string
	ids          buildid.IDs
	lo, hi       uint64
	sent, errors atomic.Int64
	mu           sync.Mutex
	latencies    []time.Duration
}

func (g *generator) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		addrs := make([]uint64, 50)
		for i := range addrs {
			addrs[i] = g.lo + rand.Uint64N(g.hi-g.lo)
		}
		pd, err := pipeline.ProfilerRequest(g.path, g.ids, addrs, map[string]string{"host.name": "soak"})
		if err != nil {
			log.Print(err)
			return
		}
		begin := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = g.client.Export(rctx, pprofileotlp.NewExportRequestFromProfiles(pd))
		cancel()
		if err != nil {
			g.errors.Add(1)
			continue
		}
		g.sent.Add(1)
		g.mu.Lock()
		g.latencies = append(g.latencies, time.Since(begin))
		g.mu.Unlock()
	}
}

// p99 returns the 99th percentile round trip since the last call.
func (g *generator) p99() time.Duration {
	g.mu.Lock()
	l := g.latencies
	g.latencies = nil
	g.mu.Unlock()
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	return l[min(len(l)-1, len(l)*99/100)]
}

// sink is the downstream: it counts what it receives.
type sink struct {
	addr     string
	requests atomic.Int64
}

func startSink() (*sink, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{addr: ln.Addr().String()}
	srv := otlptest.NewProfilesServer(s.Export)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Printf("sink: %v", err)
		}
	}()
	return s, nil
}

func (s *sink) Export(context.Context, pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	s.requests.Add(1)
	return pprofileotlp.NewExportResponse(), nil
}

func openFiles(pid int) int {
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

// gauge reads one unlabeled metric from a Prometheus endpoint; -1 when it cannot.
func gauge(ctx context.Context, url, name string) float64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return -1
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.eE+-]+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return -1
	}
	return v
}

func waitTCP(ctx context.Context, addr string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not accepting connections: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
