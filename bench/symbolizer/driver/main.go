// Command driver benchmarks a running-from-scratch `symbolizer serve` over loopback: it
// uploads one binary with `symbolizer upload`, then sends Symbolize batches of random
// addresses inside the binary's executable segment and reports, per phase, addresses per
// second, p50/p99 batch latency and the server's peak RSS.
//
//	cold    the index is neither in memory nor stored: the first batch builds it
//	stored  the serialized index is in the store, not in memory: the first batch loads it
//	warm    the index is in memory and answers (the in-process result cache is off)
//	memo    the in-process result cache holds every address of the batches (the index is in
//	        memory too): a repeated address costs a map lookup
//	cached  the index is not in memory and every address of the batch is a Redis hit
//	redis   the same batches' lookups sent straight to Redis, one pipeline of HMGETs per batch
//	        as the symbolizer sends them, with nothing else: what Redis alone costs on this
//	        machine, the floor under the cached phase
//
// --results PATH also writes the figures as JSON (for bench/report): the wall time of
// `symbolizer upload` (reading, sending and storing the binary; the cold phase measures the
// index build, from a store without the serialized index) and one object per phase.
package main

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/freeport"
	"github.com/profsym/profsym/pkg/gctune"
	"github.com/profsym/profsym/pkg/procstat"
	"github.com/profsym/profsym/pkg/symbolizecodec"
)

var (
	symbolizerBin = flag.String("symbolizer", "", "symbolizer binary")
	binary        = flag.String("binary", "", "ELF file to symbolize")
	batch         = flag.Int("batch", 10000, "addresses per batch")
	batches       = flag.Int("batches", 50, "distinct batches per measured phase")
	rounds        = flag.Int("rounds", 5, "times the warm, cached and redis phases send their batches")
	coldRuns      = flag.Int("cold-runs", 3, "server restarts for the cold and stored phases")
	work          = flag.String("work", "", "scratch directory")
	against       = flag.String("against", "", "only send the same batches in a loop to this running server (for profiling)")
	duration      = flag.Duration("duration", 20*time.Second, "how long --against runs")
	gzipResp      = flag.Bool("gzip", false, "accept gzip-compressed responses (loopback does not need them)")
	resultsPath   = flag.String("results", "", "also write the figures here as JSON")
	phases        = flag.String("phases", "cold,stored,warm,memo,cached,redis", "the phases to run, comma-separated (the upload always runs)")
)

type proc struct {
	cmd *exec.Cmd
}

func (p *proc) stop() {
	name := filepath.Base(p.cmd.Path)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		log.Printf("stop %s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		// Both servers exit 0 on SIGTERM: anything else means the measured run is suspect.
		if err != nil {
			log.Printf("%s: %v", name, err)
		}
	case <-time.After(10 * time.Second):
		log.Printf("%s ignored SIGTERM for 10s; killing it", name)
		if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			log.Printf("kill %s: %v", name, err)
		}
		if err := <-done; err != nil {
			log.Printf("%s: %v", name, err) // normally "signal: killed"
		}
	}
}

func freePort() int {
	port, err := freeport.Port()
	if err != nil {
		log.Fatal(err)
	}
	return port
}

func startRedis(ctx context.Context) (*proc, string) {
	port := freePort()
	dir := filepath.Join(*work, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		log.Fatalf("redis-server: %v", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitTCP(ctx, addr)
	return &proc{cmd}, "redis://" + addr + "/0"
}

func waitTCP(ctx context.Context, addr string) {
	var d net.Dialer
	for i := 0; i < 200; i++ {
		if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
			// A probe connection that carried nothing: its close cannot fail in a way that matters.
			_ = c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Fatalf("%s does not accept connections", addr)
}

func startServer(ctx context.Context, store string, extra ...string) (*proc, string) {
	port := freePort()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"serve", "--listen", addr, "--store-dir", store, "--upload-token", "bench", "--log-level", "warn"}
	if !slices.Contains(extra, "--result-cache-entries") {
		args = append(args, "--result-cache-entries", "0")
	}
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, *symbolizerBin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatalf("start symbolizer: %v", err)
	}
	waitTCP(ctx, addr)
	return &proc{cmd}, "http://" + addr
}

// peakRSS is the server's peak resident set size (VmHWM).
func peakRSS(p *proc) int64 { return procstat.Memory(p.cmd.Process.Pid, "VmHWM") }

type target struct {
	gnu, goID, htl string
	lo, hi         uint64
}

func loadTarget(path string) target {
	ids, err := buildid.FromFile(path)
	if err != nil {
		log.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	t := target{gnu: ids.GNU, goID: ids.Go, htl: ids.HTLHash}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Filesz > t.hi-t.lo {
			t.lo, t.hi = p.Vaddr, p.Vaddr+p.Filesz
		}
	}
	return t
}

func (t target) batch(r *rand.Rand) *symbolizerv1.SymbolizeRequest {
	addrs := make([]uint64, *batch)
	for i := range addrs {
		addrs[i] = t.lo + r.Uint64N(t.hi-t.lo)
	}
	return &symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: t.gnu, GoBuildId: t.goID, Htlhash: t.htl, Addresses: addrs}}}
}

func client(url string) symbolizerv1connect.SymbolizerServiceClient {
	// Decoded as the gateway, the symbolizer's real client, decodes answers.
	opts := []connect.ClientOption{connect.WithReadMaxBytes(1 << 30), connect.WithCodec(symbolizecodec.Codec{})}
	if !*gzipResp {
		// Unregistering gzip makes the client ask for uncompressed responses.
		opts = append(opts, connect.WithAcceptCompression("gzip", nil, nil))
	}
	return symbolizerv1connect.NewSymbolizerServiceClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}, url, opts...)
}

// call times one batch as a client experiences it: the call (rpc), and the call plus
// decoding the answer into frames per address (what a client must do before it can use them).
func call(ctx context.Context, c symbolizerv1connect.SymbolizerServiceClient, req *symbolizerv1.SymbolizeRequest) (rpc, decoded time.Duration, resolved int) {
	start := time.Now()
	resp, err := c.Symbolize(ctx, connect.NewRequest(req))
	if err != nil {
		log.Fatalf("Symbolize: %v", err)
	}
	rpc = time.Since(start)
	m := resp.Msg.Modules[0]
	locs, err := symbolizecodec.Decode(m, len(req.Modules[0].Addresses))
	decoded = time.Since(start)
	if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		log.Fatalf("module status %v: %s", m.Status, m.Message)
	}
	if err != nil {
		log.Fatalf("decode answer: %v", err)
	}
	for _, l := range locs {
		if len(l) > 0 {
			resolved++
		}
	}
	return rpc, decoded, resolved
}

// cpuTime is the server's user+system CPU time so far: on a shared machine it measures the
// work a batch costs better than wall time does.
func cpuTime(p *proc) time.Duration {
	d, err := procstat.CPUTime(p.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return d
}

type row struct {
	cpu      time.Duration
	phase    string
	n        int
	lat      []time.Duration // the call
	dec      []time.Duration // the call and decoding its answer
	resolved int
	rss      int64
}

const header = "%-8s %7s %10s %8s %8s %8s %10s %9s %8s\n"

func printHeader() {
	fmt.Printf(header, "phase", "batches", "addrs/s", "p50 ms", "p99 ms", "+decode", "srv CPU ms", "resolved", "RSS MiB")
}

// print writes the row: percentiles of the call, and the p99 with decoding; addrs/s from the
// calls' total time.
func (r row) print() {
	if len(r.lat) == 0 {
		return
	}
	collected.Phases = append(collected.Phases, r.result())
	var total time.Duration
	for _, d := range r.lat {
		total += d
	}
	fmt.Printf("%-8s %7d %10.0f %8.1f %8.1f %8s %10s %9s %8s\n", r.phase, len(r.lat),
		float64(r.n)/total.Seconds(), ms(pct(r.lat, .5)), ms(pct(r.lat, .99)), orDash(len(r.dec) > 0, func() string { return fmt.Sprintf("%.1f", ms(pct(r.dec, .99))) }),
		orDash(r.cpu > 0, func() string { return fmt.Sprintf("%.1f", ms(r.cpu)/float64(len(r.lat))) }),
		orDash(r.resolved > 0, func() string { return fmt.Sprintf("%.1f%%", 100*float64(r.resolved)/float64(r.n)) }), orDash(r.rss > 0, func() string { return fmt.Sprintf("%.0f", float64(r.rss)/(1<<20)) }))
}

// phaseResult is one phase in --results.
type phaseResult struct {
	Phase       string  `json:"phase"`
	Batches     int     `json:"batches"`
	AddrsPerSec float64 `json:"addrs_per_s"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	P99DecodeMs float64 `json:"p99_decode_ms,omitempty"`
	CPUmsBatch  float64 `json:"server_cpu_ms_per_batch,omitempty"`
	Resolved    float64 `json:"resolved_share,omitempty"`
	RSSMiB      float64 `json:"rss_mib,omitempty"`
}

// results is what --results writes.
type results struct {
	Binary        string        `json:"binary"`
	BinaryMiB     float64       `json:"binary_mib"`
	Batch         int           `json:"batch"`
	Batches       int           `json:"batches"`
	Rounds        int           `json:"rounds"`
	UploadSeconds float64       `json:"upload_s"`
	UploadRSSMiB  float64       `json:"upload_rss_mib"`
	Phases        []phaseResult `json:"phases"`
	RedisMsCached float64       `json:"redis_ms_per_batch_cached"`
	RedisMsRedis  float64       `json:"redis_ms_per_batch_redis"`
}

var collected results

func (r row) result() phaseResult {
	var total time.Duration
	for _, d := range r.lat {
		total += d
	}
	p := phaseResult{Phase: r.phase, Batches: len(r.lat), AddrsPerSec: float64(r.n) / total.Seconds(),
		P50ms: ms(pct(r.lat, .5)), P99ms: ms(pct(r.lat, .99)), RSSMiB: float64(r.rss) / (1 << 20)}
	if len(r.dec) > 0 {
		p.P99DecodeMs = ms(pct(r.dec, .99))
	}
	if r.cpu > 0 {
		p.CPUmsBatch = ms(r.cpu) / float64(len(r.lat))
	}
	if r.n > 0 && r.resolved > 0 {
		p.Resolved = float64(r.resolved) / float64(r.n)
	}
	return p
}

func writeResults() {
	if *resultsPath == "" {
		return
	}
	b, err := json.MarshalIndent(collected, "", "  ")
	if err != nil {
		log.Fatalf("results: %v", err)
	}
	if err := os.WriteFile(*resultsPath, append(b, '\n'), 0o644); err != nil {
		log.Fatalf("results: %v", err)
	}
}

func orDash(ok bool, f func() string) string {
	if !ok {
		return "-"
	}
	return f()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// removeIndexes deletes the stored serialized indexes so the next server builds them again:
// an index left behind would turn the cold phase into a stored one.
func removeIndexes(store string) {
	err := filepath.Walk(store, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".index") {
			return os.Remove(p)
		}
		return nil
	})
	if err != nil {
		log.Fatalf("remove stored indexes: %v", err)
	}
}

func main() {
	flag.Parse()
	// The driver is a client as the gateway is, and collects garbage as the gateway does: a
	// heap growing by at least 256 MiB between collections (pkg/gctune).
	defer gctune.Start(gctune.Options{MinHeadroom: 256 << 20, Logger: slog.New(slog.DiscardHandler)})()
	ctx := context.Background()
	if *against != "" && *binary != "" {
		t := loadTarget(*binary)
		rnd := rand.New(rand.NewPCG(1, 2))
		var reqs []*symbolizerv1.SymbolizeRequest
		for i := 0; i < *batches; i++ {
			reqs = append(reqs, t.batch(rnd))
		}
		c := client(*against)
		r := row{phase: "against"}
		for end := time.Now().Add(*duration); time.Now().Before(end); {
			for _, req := range reqs {
				rpc, dec, res := call(ctx, c, req)
				r.lat, r.dec = append(r.lat, rpc), append(r.dec, dec)
				r.n += *batch
				r.resolved += res
			}
		}
		printHeader()
		r.print()
		return
	}
	if *symbolizerBin == "" || *binary == "" || *work == "" {
		log.Fatal("need --symbolizer, --binary and --work")
	}
	t := loadTarget(*binary)
	store := filepath.Join(*work, "store")
	st, _ := os.Stat(*binary)
	fmt.Printf("binary %s (%.1f MiB), batches of %d addresses, %d batches sent %d times in the warm, cached and redis phases, gzip responses: %v\n",
		*binary, float64(st.Size())/(1<<20), *batch, *batches, *rounds, *gzipResp)

	collected = results{Binary: filepath.Base(*binary), BinaryMiB: float64(st.Size()) / (1 << 20), Batch: *batch, Batches: *batches, Rounds: *rounds}
	srv, url := startServer(ctx, store)
	upStart := time.Now()
	up := exec.CommandContext(ctx, *symbolizerBin, "upload", "--server", url, "--token", "bench", "--progress", "plain", *binary)
	up.Stdout, up.Stderr = os.Stdout, os.Stderr
	if err := up.Run(); err != nil {
		log.Fatalf("upload: %v", err)
	}
	collected.UploadSeconds = time.Since(upStart).Seconds()
	collected.UploadRSSMiB = float64(peakRSS(srv)) / (1 << 20)
	fmt.Printf("upload: %.2f s, server peak RSS %.0f MiB\n", collected.UploadSeconds, collected.UploadRSSMiB)
	srv.stop()
	run := map[string]bool{}
	for _, p := range strings.Split(*phases, ",") {
		run[strings.TrimSpace(p)] = true
	}

	printHeader()
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, phase := range []string{"cold", "stored"} {
		if !run[phase] {
			continue
		}
		r := row{phase: phase}
		for i := 0; i < *coldRuns; i++ {
			if phase == "cold" {
				removeIndexes(store)
			}
			srv, url := startServer(ctx, store)
			c0 := cpuTime(srv)
			rpc, dec, res := call(ctx, client(url), t.batch(rnd))
			r.cpu += cpuTime(srv) - c0
			r.lat, r.dec = append(r.lat, rpc), append(r.dec, dec)
			r.n += *batch
			r.resolved += res
			r.rss = max(r.rss, peakRSS(srv))
			srv.stop()
		}
		r.print()
	}

	if !run["warm"] && !run["memo"] && !run["cached"] && !run["redis"] {
		writeResults()
		return
	}
	// warm: the index in memory answers (no Redis; the in-process result cache is off).
	srv, url = startServer(ctx, store)
	c := client(url)
	call(ctx, c, t.batch(rnd)) // load the index
	var reqs []*symbolizerv1.SymbolizeRequest
	for i := 0; i < *batches; i++ {
		reqs = append(reqs, t.batch(rnd))
	}
	if run["warm"] {
		measure(ctx, "warm", srv, c, reqs).print()
	}
	srv.stop()
	if !run["memo"] && !run["cached"] && !run["redis"] {
		writeResults()
		return
	}

	// memo: the in-process result cache, large enough for every address of the batches,
	// filled by a first pass.
	srv, url = startServer(ctx, store, "--result-cache-entries", strconv.Itoa((*batches+1)**batch))
	c = client(url)
	for _, req := range reqs {
		call(ctx, c, req)
	}
	measure(ctx, "memo", srv, c, reqs).print()
	srv.stop()

	// cached: a replica without the index in memory (an index cache too small to keep it)
	// whose Redis holds every address of the batches: the first pass fills Redis, the
	// measured second pass is all Redis hits.
	rds, rurl := startRedis(ctx)
	defer rds.stop()
	srv, url = startServer(ctx, store, "--redis-url", rurl, "--index-cache-bytes", "1")
	c = client(url)
	// Results reach Redis in the background: a second pass writes what the first could
	// not queue, then the queue drains.
	for pass := 0; pass < 2; pass++ {
		for _, req := range reqs {
			call(ctx, c, req)
		}
		time.Sleep(3 * time.Second)
	}
	rc := redisClient(rurl)
	defer func() {
		if err := rc.Close(); err != nil {
			log.Printf("close redis client: %v", err)
		}
	}()
	resetRedisStats(ctx, rc)
	measure(ctx, "cached", srv, c, reqs).print()
	cachedRedis := redisMillis(ctx, rc)
	srv.stop()

	lat := redisOnly(ctx, rc, reqs)
	row{phase: "redis", n: len(lat) * *batch, lat: lat}.print()
	measured := float64(*rounds * len(reqs))
	collected.RedisMsCached, collected.RedisMsRedis = cachedRedis/measured, redisMillis(ctx, rc)/measured
	fmt.Printf("Redis's own time per batch (commandstats): %.1f ms in the cached phase, %.1f ms in the redis phase\n", collected.RedisMsCached, collected.RedisMsRedis)
	writeResults()
}

func redisClient(url string) *redis.Client {
	opt, err := redis.ParseURL(url)
	if err != nil {
		log.Fatal(err)
	}
	return redis.NewClient(opt)
}

func resetRedisStats(ctx context.Context, rc *redis.Client) {
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		log.Fatalf("redis config resetstat: %v", err)
	}
}

// redisMillis is the time Redis spent in HMGET since the last reset (and resets it).
func redisMillis(ctx context.Context, rc *redis.Client) float64 {
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		log.Fatalf("redis info: %v", err)
	}
	resetRedisStats(ctx, rc)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_hmget:"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					us, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
					return us / 1000
				}
			}
		}
	}
	return 0
}

// redisOnly times, per batch, one pipeline of HMGETs of the batch's addresses, grouped by the
// hashes the symbolizer keeps them in. It mirrors services/symbolizer/internal/resultcache's
// layout (a hash per 1 MiB of addresses named by its number in hex at the end of the key, the
// address in hex as the field), finding the hashes' keys in Redis rather than rebuilding them.
func redisOnly(ctx context.Context, rc *redis.Client, reqs []*symbolizerv1.SymbolizeRequest) []time.Duration {
	keys, err := rc.Keys(ctx, "psym:*").Result()
	if err != nil || len(keys) == 0 {
		log.Fatalf("redis keys: %v (%d keys)", err, len(keys))
	}
	byBucket := map[uint64]string{}
	for _, k := range keys {
		b, err := strconv.ParseUint(k[strings.LastIndexByte(k, ':')+1:], 16, 64)
		if err != nil {
			log.Fatalf("redis key %q: not a result bucket", k)
		}
		byBucket[b] = k
	}
	var lat []time.Duration
	for range *rounds {
		for _, req := range reqs {
			args := map[uint64][]any{}
			for _, a := range req.Modules[0].Addresses {
				b := a >> 20
				if args[b] == nil {
					args[b] = []any{"hmget", byBucket[b]}
				}
				args[b] = append(args[b], strconv.FormatUint(a, 16))
			}
			start := time.Now()
			cmds := make([]*redis.StringSliceCmd, 0, len(args))
			_, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, a := range args {
					cmd := redis.NewStringSliceCmd(ctx, a...)
					cmds = append(cmds, cmd)
					if err := p.Process(ctx, cmd); err != nil {
						return err
					}
				}
				return nil
			})
			d := time.Since(start)
			if err != nil {
				log.Fatalf("redis pipeline: %v", err)
			}
			for _, cmd := range cmds {
				for _, v := range cmd.Val() {
					if v == "" {
						log.Fatal("redis phase: a lookup missed; the cached phase did not fill Redis")
					}
				}
			}
			lat = append(lat, d)
		}
	}
	return lat
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// measure sends the batches --rounds times: a p99 of 100 batches is the second slowest, of
// 500 the sixth, which one burst of a neighbour on a shared machine moves less.
func measure(ctx context.Context, phase string, srv *proc, c symbolizerv1connect.SymbolizerServiceClient, reqs []*symbolizerv1.SymbolizeRequest) row {
	r := row{phase: phase}
	c0 := cpuTime(srv)
	for range *rounds {
		for _, req := range reqs {
			rpc, dec, res := call(ctx, c, req)
			r.lat, r.dec = append(r.lat, rpc), append(r.dec, dec)
			r.n += len(req.Modules[0].Addresses)
			r.resolved += res
		}
	}
	r.cpu = cpuTime(srv) - c0
	r.rss = peakRSS(srv)
	return r
}
