// Package scale is the release-day drill: simulated nodes send profiles through gateways (the
// symbolize processor's engine with its affinity router) to three symbolizer processes on one
// MinIO bucket and a Redis Cluster, in three phases: steady (binaries already stored), release
// (every node runs new binaries and uploads them at once; -drill.releases times in a row, each
// with binaries never seen, the worst reported) and a replica killed. Each gateway holds the
// profiles whose debuginfo is arriving (-drill.hold), as the processor does. It reports what
// docs/design/0006-fleet-scale.md asks of a deployment and fails when an answer is wrong, a
// sample is lost, an upload of one build ID is accepted twice, a breaker opens with every
// replica up, frames stay unsymbolized after the uploads finished (1%) or while they race (5%,
// with the hold), or the hold keeps profiles past its bound.
//
// The default is the short variant CI runs (two releases in a row); the full drill:
//
//	go test ./bench/scale -run TestReleaseDay -v -timeout 60m -drill.nodes=200 -drill.binaries=300 -drill.releases=5
//
// and the same with -drill.affinity=false, for what affinity saves.
package scale

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/minio/minio-go/v7"
	"go.opentelemetry.io/collector/pdata/pprofile"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/affinity"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/procstat"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/pkg/uploadclient"
)

var (
	flagNodes    = flag.Int("drill.nodes", 24, "simulated nodes")
	flagBinaries = flag.Int("drill.binaries", 30, "distinct binaries: half stored before the drill, half released during it")
	flagPerNode  = flag.Int("drill.per-node", 4, "binaries each node runs")
	flagGateway  = flag.Int("drill.gateway-parallel", 8, "profiles each gateway symbolizes at once (its pipeline's workers); more nodes queue")
	flagBalance  = flag.Float64("drill.balance-factor", 1.25, "the affinity router's load bound (0: none)")
	flagAffinity = flag.Bool("drill.affinity", true, "gateways route by build ID (false: each gateway pinned to one replica, as through a Service)")
	flagMedium   = flag.Int("drill.medium", 2, "binaries copied from mid-sized Go programs (12 to 72 MB)")
	flagLarge    = flag.Int("drill.large", 1, "binaries copied from Go programs over 100 MB")
	flagCache    = flag.Int64("drill.index-cache-bytes", 1<<30, "each symbolizer's --index-cache-bytes")
	flagMargin   = flag.Int64("drill.rss-margin", 768<<20, "what a replica's peak RSS may exceed its index cache by: the process, an upload's verification (reading the binary, building its index), answers in flight")
	flagReport   = flag.String("drill.report", "", "write the figures here (phase, figure, value; tab-separated) for bench/scale/run.sh's side-by-side table")
	flagHold     = flag.Duration("drill.hold", 30*time.Second, "how long a gateway holds a profile whose frames wait for arriving debuginfo or a busy replica (0: no hold)")
	flagReleases = flag.Int("drill.releases", 2, "release phases in a row, each with binaries never seen before; the worst is reported")
	flagHeap     = flag.String("drill.heap-profiles", "", "a folder: each replica's heap profile (pprof) is saved there whenever its RSS reaches a new peak, with its Go heap figures then in peaks.log")
)

const gateways = 2

// TestMain removes what the shared fixtures left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, remove := range []func() error{otlptest.RemoveFixtures, testsupport.RemoveFixtures} {
		if err := remove(); err != nil {
			fmt.Fprintf(os.Stderr, "remove test fixtures: %v\n", err)
		}
	}
	os.Exit(code)
}

// source is a program the drill's binaries are copies of, and llvm-symbolizer's answer for
// every address of the function the nodes sample in it.
type source struct {
	name, path, fn string
	want           map[uint64][]otlptest.LLVMFrame
}

// binary is one of the drill's distinct binaries.
type binary struct {
	path string
	src  *source
	size int64
}

// makeBinaries writes n distinct binaries: copies of a few programs, each copy with build IDs
// of its own (the GNU note's bytes rewritten, and a Go program's Go build ID wherever it is
// written), so each is its own stored file and index, as a rebuilt release is, while one
// llvm-symbolizer answer per program checks every copy. large of them are copies of the
// Go programs over 100 MB that .ci/install-deps installs (MinIO, helm), medium of mid-sized
// ones (golangci-lint, toxiproxy, the Collector builder), the rest of a small C program. They
// are dealt so that the stored and the released half get the same mix.
func makeBinaries(t *testing.T, n, medium, large int) []binary {
	t.Helper()
	small := &source{name: "c", path: testsupport.CompileC(t, otlptest.CSource+otlptest.CMain, "-O2", "-g", "-no-pie", "-fno-pie", "-Wl,--build-id"), fn: "outer"}
	pick := func(names ...string) []*source {
		var out []*source
		for _, name := range names {
			if p := testsupport.ToolPath(name); p != "" {
				out = append(out, &source{name: name, path: p, fn: "main.main"})
			}
		}
		return out
	}
	var mediums, larges []*source
	if medium > 0 {
		if mediums = pick("golangci-lint", "toxiproxy-server", "builder"); len(mediums) == 0 {
			t.Fatal("-drill.medium: none of golangci-lint, toxiproxy-server, builder in the tools folder: run .ci/install-deps")
		}
	}
	if large > 0 {
		if larges = pick("helm", "minio"); len(larges) == 0 {
			t.Fatal("-drill.large: neither helm nor minio in the tools folder: run .ci/install-deps")
		}
	}
	if medium+large > n {
		t.Fatalf("-drill.medium %d and -drill.large %d exceed -drill.binaries %d", medium, large, n)
	}
	var srcs []*source
	for i := range large {
		srcs = append(srcs, larges[i%len(larges)])
	}
	for i := range medium {
		srcs = append(srcs, mediums[i%len(mediums)])
	}
	for len(srcs) < n {
		srcs = append(srcs, small)
	}
	// Every address of each program's sampled function, as llvm-symbolizer reads it.
	for _, src := range append(append([]*source{small}, mediums...), larges...) {
		lo, hi := otlptest.SymbolRange(t, src.path, src.fn)
		var vas []uint64
		for va := lo; va < hi; va++ {
			vas = append(vas, va)
		}
		src.want = map[uint64][]otlptest.LLVMFrame{}
		for i, f := range otlptest.LLVMSymbolize(t, src.path, vas) {
			src.want[vas[i]] = f
		}
	}
	dir := t.TempDir()
	data := map[*source][]byte{}
	ids := map[*source]idPlaces{}
	out := make([]binary, n)
	for i, src := range srcs {
		if data[src] == nil {
			var err error
			if data[src], err = os.ReadFile(src.path); err != nil {
				t.Fatal(err)
			}
			ids[src] = findIDs(t, src.path, data[src])
		}
		b := data[src]
		ids[src].set(b, "drill binary "+strconv.Itoa(i)) // written out before the next copy changes it again
		p := filepath.Join(dir, fmt.Sprintf("app-%03d-%s", i, src.name))
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
		out[i] = binary{path: p, src: src, size: int64(len(b))}
	}
	return out
}

// split deals the binaries into the stored (even) and the released (odd) half.
func split(bins []binary) (old, released []binary) {
	for i, b := range bins {
		if i%2 == 0 {
			old = append(old, b)
		} else {
			released = append(released, b)
		}
	}
	return old, released
}

// idPlaces is where a program's build IDs are written in its file: the GNU note's 20 bytes,
// and for a Go program every copy of its Go build ID (its note, and the marker the go
// command writes at the start of the text).
type idPlaces struct {
	gnu  int
	goID string
	gos  []int
}

// findIDs finds the build IDs of the program at path, whose bytes are data.
func findIDs(t *testing.T, path string, data []byte) idPlaces {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	note := f.Section(".note.gnu.build-id")
	f.Close()
	if note == nil || note.Size < 36 {
		t.Fatalf("%s: no 20-byte .note.gnu.build-id", path)
	}
	ids, err := buildid.FromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pl := idPlaces{gnu: int(note.Offset) + 16, goID: ids.Go} // namesz, descsz, type, "GNU\0"
	for off := 0; ids.Go != ""; {
		k := bytes.Index(data[off:], []byte(ids.Go))
		if k < 0 {
			break
		}
		pl.gos = append(pl.gos, off+k)
		off += k + len(ids.Go)
	}
	if ids.Go != "" && len(pl.gos) == 0 {
		t.Fatalf("%s: Go build ID %s not found in its bytes", path, ids.Go)
	}
	return pl
}

// set writes build IDs derived from seed into data: a new GNU build ID and, for a Go
// program, a new Go build ID of the same shape. Copies sharing a Go build ID would be one
// build to the symbolizer, which answers a module by any of its IDs: a release's new copy
// would be answered, before its upload, from an older copy's index (loaded by the new
// copy's owner), which no real release of new code can be.
func (pl idPlaces) set(data []byte, seed string) {
	id := sha1.Sum([]byte(seed))
	copy(data[pl.gnu:pl.gnu+20], id[:])
	if pl.goID == "" {
		return
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	h := sha256.Sum256([]byte("go " + seed))
	goID := []byte(pl.goID)
	for i, c := range goID {
		if c != '/' {
			goID[i] = alphabet[(h[i%len(h)]^byte(i/len(h)))&63]
		}
	}
	for _, off := range pl.gos {
		copy(data[off:], goID)
	}
}

// ownIDs fails the test when a binary of bins shares a build ID with another one of seen
// (build ID -> path), and adds bins' IDs to seen.
func ownIDs(t *testing.T, seen map[string]string, bins []binary) {
	t.Helper()
	for _, b := range bins {
		ids, err := buildid.FromFile(b.path)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"gnu:" + ids.GNU, "go:" + ids.Go} {
			if id == "go:" {
				continue
			}
			if other, ok := seen[id]; ok {
				t.Fatalf("%s and %s share build ID %s: the drill's binaries must be distinct by every ID", other, b.path, id)
			}
			seen[id] = b.path
		}
	}
}

// rebuild writes copies of bins with build IDs of their own (salted by run): the same
// programs released again, for another release phase.
func rebuild(t *testing.T, bins []binary, run int) []binary {
	t.Helper()
	dir := t.TempDir()
	out := make([]binary, len(bins))
	for i, b := range bins {
		data, err := os.ReadFile(b.path)
		if err != nil {
			t.Fatal(err)
		}
		findIDs(t, b.path, data).set(data, fmt.Sprintf("drill binary %d release %d", i, run))
		p := filepath.Join(dir, fmt.Sprintf("r%d-%s", run, filepath.Base(b.path)))
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		out[i] = binary{path: p, src: b.src, size: b.size}
	}
	return out
}

// heapPeaks samples the replicas' RSS until the test ends and, each time a replica's passes
// its last peak by 32 MiB, saves its heap profile (dir/replica-N.heap.pb.gz, the latest peak)
// and logs its Go heap figures to dir/peaks.log: where the memory of a peak goes.
func heapPeaks(t *testing.T, dir string, syms []*testsupport.Symbolizer) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("heap profiles: %v", err)
		return
	}
	logf, err := os.Create(filepath.Join(dir, "peaks.log"))
	if err != nil {
		t.Errorf("heap profiles: %v", err)
		return
	}
	defer logf.Close()
	peaks := make([]int64, len(syms))
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.Context().Done():
			return
		case <-tick.C:
		}
		for i, s := range syms {
			pid := s.PID()
			if pid <= 0 {
				continue
			}
			rss := procstat.Memory(pid, "VmRSS")
			if rss < peaks[i]+32<<20 {
				continue
			}
			peaks[i] = rss
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL()+"/debug/pprof/heap", nil)
			if err != nil {
				return
			}
			req.Header.Set("Authorization", "Bearer "+s.Token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("replica-%d.heap.pb.gz", i)), b, 0o644); err != nil {
				t.Errorf("heap profiles: %v", err)
				return
			}
			m := func(name string) int64 { return int64(symbolizerMetrics(t, s.URL(), name, "")) >> 20 }
			fmt.Fprintf(logf, "%s replica %d RSS %d MiB: heap alloc %d MiB, in use %d MiB, idle %d MiB, released %d MiB, next GC %d MiB; indexes %d MiB\n",
				time.Now().Format(time.TimeOnly), i, rss>>20, m("go_memstats_heap_alloc_bytes"), m("go_memstats_heap_inuse_bytes"),
				m("go_memstats_heap_idle_bytes"), m("go_memstats_heap_released_bytes"), m("go_memstats_next_gc_bytes"), m("symbolizer_index_cache_bytes"))
		}
	}
}

// symbolizerMetrics sums a counter of one symbolizer's /metrics over label sets matching with.
func symbolizerMetrics(t *testing.T, url, name, with string) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1 // a killed replica
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || !strings.Contains(line, with) {
			continue
		}
		if rest := line[len(name):]; rest != "" && rest[0] != ' ' && rest[0] != '{' {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

type uploadOutcome struct {
	buildID  string
	uploadID string // of an accepted upload
	reason   string // of a refusal
}

// upload runs the node agent's upload protocol for one file through one replica.
func upload(ctx context.Context, c *uploadclient.Client, path string) (uploadOutcome, error) {
	ids, err := buildid.FromFile(path)
	if err != nil {
		return uploadOutcome{}, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return uploadOutcome{}, err
	}
	sum := sha256.Sum256(data)
	f := uploadclient.File{BuildID: ids.GNU, BuildIDType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU,
		Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)),
		Source: debuginfov1.UploadSource_UPLOAD_SOURCE_NODE}
	out := uploadOutcome{buildID: ids.GNU}
	should, err := c.ShouldUpload(ctx, f)
	if err != nil {
		return out, fmt.Errorf("should upload: %w", err)
	}
	if !should.ShouldUpload {
		out.reason = should.Reason.String()
		return out, nil
	}
	init, err := c.InitiateUpload(ctx, f)
	var ce *connect.Error
	if errors.As(err, &ce) && (ce.Code() == connect.CodeAborted || ce.Code() == connect.CodeAlreadyExists) {
		out.reason, _, _ = strings.Cut(ce.Message(), ":")
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("initiate: %w", err)
	}
	// As the node agent does, a PUT cut short is sent again at once (debugupload's putAttempts).
	if _, err := uploadclient.Retry(ctx, 4, func() (struct{}, error) {
		return struct{}{}, c.Put(ctx, init, bytes.NewReader(data), int64(len(data)))
	}); err != nil {
		return out, fmt.Errorf("put: %w", err)
	}
	if _, err := c.FinishUpload(ctx, ids.GNU, init.UploadId); err != nil {
		return out, fmt.Errorf("finish: %w", err)
	}
	out.uploadID = init.UploadId
	return out, nil
}

// tally is what the gateways saw in one round.
type tally struct {
	samplesIn, samplesOut, seen, symbolized, wrong atomic.Int64
	asked                                          atomic.Int64 // distinct (binary, address) pairs sent to the symbolizers

	mu      sync.Mutex
	reasons map[string]int  // of frames the gateways passed on unsymbolized
	took    []time.Duration // per profile, in the gateway (held ones until they went on)
	held    []time.Duration // per held profile, how long it was held
	expired int             // held profiles that went on at the end of the hold
	refused int             // batches refused because a hold was full (sent again)
	heldMax int64           // the most bytes (protobuf) the gateways' holds held at once, as seen by senders
}

// heldLatency is the p50 and p99 of the time profiles were held, over the held ones.
func (t *tally) heldLatency() (p50, p99 time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return percentiles(t.held)
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	all := slices.Clone(d)
	slices.Sort(all)
	return all[len(all)*50/100], all[min(len(all)-1, len(all)*99/100)]
}

// ratio is the share of frames symbolized.
func (t *tally) ratio() float64 {
	if n := t.seen.Load(); n > 0 {
		return float64(t.symbolized.Load()) / float64(n)
	}
	return 0
}

func (t *tally) String() string {
	ratio := 0.0
	if n := t.seen.Load(); n > 0 {
		ratio = float64(t.symbolized.Load()) / float64(n)
	}
	p50, p99 := t.heldLatency()
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("samples in %d out %d; frames %d, symbolized %d (%.2f%%), wrong %d; unsymbolized by reason %v; %d profiles held (p50 %v, p99 %v, at most %.1f MiB at once), %d to the hold's end, %d batches refused by a full hold",
		t.samplesIn.Load(), t.samplesOut.Load(), t.seen.Load(), t.symbolized.Load(), 100*ratio, t.wrong.Load(), t.reasons,
		len(t.held), p50.Round(time.Millisecond), p99.Round(time.Millisecond), float64(t.heldMax)/(1<<20), t.expired, t.refused)
}

func TestReleaseDay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MinIO, a Redis Cluster and three symbolizers")
	}
	testsupport.RequireTools(t, "gcc", "llvm-symbolizer", "redis-server", "redis-cli")
	nodes, nbin, perNode := *flagNodes, *flagBinaries, *flagPerNode
	if nbin < 4 || perNode > nbin/2 {
		t.Fatalf("-drill.binaries %d and -drill.per-node %d: need at least 4 binaries and per-node at most half of them", nbin, perNode)
	}
	rep := &report{}
	defer rep.write(t)
	minio := testsupport.StartMinIO(t)
	bucket := minio.NewBucket(t, "drill")
	cluster := testsupport.StartRedisCluster(t, 3, 1)
	s3 := []string{"--s3-endpoint", minio.Endpoint(), "--s3-bucket", "drill", "--s3-region", minio.Region(),
		"--s3-access-key", minio.AccessKey(), "--s3-secret-key", minio.SecretKey(), "--s3-insecure", "--lease-ttl", "5s",
		"--result-cache-entries", "0", "--coverage-interval", "1h", "--no-hold-uploaded-indexes",
		"--index-cache-bytes", strconv.FormatInt(*flagCache, 10)}
	syms := make([]*testsupport.Symbolizer, 3)
	addrs := make([]string, 3)
	if *flagHeap != "" {
		s3 = append(s3, "--pprof")
	}
	for i := range syms {
		syms[i] = testsupport.StartSymbolizer(t, cluster.URL(), s3...)
		addrs[i] = strings.TrimPrefix(syms[i].URL(), "http://")
	}
	if *flagHeap != "" {
		go heapPeaks(t, *flagHeap, syms)
	}
	bins := makeBinaries(t, nbin, *flagMedium, *flagLarge)
	ids := map[string]string{} // every build ID of the drill's binaries -> its binary
	ownIDs(t, ids, bins)
	old, released := split(bins)
	byName := map[string]binary{}
	var largest int64
	for _, b := range bins {
		byName[filepath.Base(b.path)] = b
		largest = max(largest, b.size)
	}
	rep.describe(t, bins)

	clients := make([]*uploadclient.Client, 3)
	for i, s := range syms {
		var err error
		tok := s.Token
		if clients[i], err = uploadclient.New(uploadclient.Options{Server: s.URL(), Token: func() (string, error) { return tok, nil },
			RPCTimeout: 5 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	// Before the drill: the old release is stored (uploaded through the Service: any replica).
	for i, b := range old {
		if _, err := upload(t.Context(), clients[i%3], b.path); err != nil {
			t.Fatalf("upload %s: %v", b.path, err)
		}
	}

	// Coverage targets hold with affinity; without it the drill shows what they cost, and
	// reports a miss instead of failing.
	coverage := t.Errorf
	if !*flagAffinity {
		coverage = func(format string, args ...any) { t.Logf("without affinity, missed: "+format, args...) }
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	gws := make([]*symbolize.Symbolizer, gateways)
	holds := make([]*symbolize.Holder, gateways)
	routers := make([]*affinity.Router, gateways)
	for g := range gws {
		cfg := affinity.Config{Scheme: "http", Static: addrs, AttemptTimeout: time.Second, BalanceFactor: *flagBalance, EjectFor: 10 * time.Second,
			NewClient: func(b string) symbolizerv1connect.SymbolizerServiceClient {
				return symbolize.NewClient(http.DefaultClient, b, "")
			}, Logger: quiet}
		if !*flagAffinity {
			// As through a Service: the gateway's connection reached one replica, and moves
			// only when that one fails.
			cfg.Pin, cfg.BalanceFactor = fmt.Sprintf("gateway-%d", g), 0
		}
		router, err := affinity.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		router.Start()
		t.Cleanup(router.Close)
		routers[g] = router
		gws[g] = symbolize.New(symbolize.Config{Client: router, Timeout: 5 * time.Second, CallTimeout: 2 * time.Second,
			BatchAddresses: 8192, Concurrency: 4, CacheEntries: -1, Logger: quiet})
		if *flagHold > 0 {
			holds[g] = symbolize.NewHolder(gws[g], symbolize.HoldConfig{For: *flagHold, Retry: time.Second, Parallel: *flagGateway, Logger: quiet}, nil)
			h := holds[g]
			t.Cleanup(func() { _ = h.Close(context.Background()) })
		}
	}
	// breakerOpens is how many times the gateways' breakers opened so far.
	breakerOpens := func() (n int64) {
		for _, g := range gws {
			n += g.BreakerOpens()
		}
		return n
	}
	// failedModules is how many modules the gateways sent past a failed replica so far.
	failedModules := func() (n int64) {
		for _, r := range routers {
			for _, st := range r.Stats() {
				n += st.FailedModules
			}
		}
		return n
	}

	slots := make([]chan struct{}, gateways)
	for g := range slots {
		slots[g] = make(chan struct{}, *flagGateway)
	}
	picks := func(n int, set []binary) []binary {
		out := make([]binary, perNode)
		for j := range out {
			out[j] = set[(n*7+j*13)%len(set)]
		}
		return out
	}
	// send has node n send one profile of its binaries from set through its gateway.
	send := func(n int, set []binary, tl *tally) {
		var obs []otlptest.Binary
		for _, b := range picks(n, set) {
			obs = append(obs, otlptest.Binary{Name: filepath.Base(b.path), Path: b.path, Fn: b.src.fn})
		}
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, dedupe(obs))
		tl.samplesIn.Add(int64(pd.SampleCount()))
		g := n % gateways
		began := time.Now()
		var (
			rep      symbolize.Report
			held     bool
			released = make(chan symbolize.HoldResult, 1)
			out      pprofile.Profiles
		)
		emit := func(_ context.Context, p pprofile.Profiles, res symbolize.HoldResult) error {
			out = p
			released <- res
			return nil
		}
		for {
			slots[g] <- struct{}{}
			if holds[g] == nil {
				rep = gws[g].Process(t.Context(), pd)
				<-slots[g]
				break
			}
			now, r, h, err := holds[g].Process(t.Context(), pd, emit)
			<-slots[g]
			if errors.Is(err, symbolize.ErrHoldFull) {
				// As a sender's OTLP exporter does with UNAVAILABLE: again a moment later.
				tl.mu.Lock()
				tl.refused++
				tl.mu.Unlock()
				time.Sleep(time.Second)
				continue
			}
			if h && now.ResourceProfiles().Len() != 0 {
				t.Errorf("node %d: its one profile was split", n)
			}
			rep, held = r, h
			if h {
				var sum int64
				for _, hd := range holds {
					_, b := hd.Held()
					sum += b
				}
				tl.mu.Lock()
				tl.heldMax = max(tl.heldMax, sum)
				tl.mu.Unlock()
			}
			break
		}
		if held {
			// The gateway's worker is free; the profile goes on when the hold hands it on.
			res := <-released
			pd, rep.Unresolved = out, res.Report.Unresolved
			tl.mu.Lock()
			tl.held = append(tl.held, res.Held)
			if res.Expired {
				tl.expired++
			}
			tl.mu.Unlock()
		}
		took := time.Since(began)
		tl.samplesOut.Add(int64(pd.SampleCount()))
		tl.asked.Add(int64(rep.Seen - rep.CacheHits))
		tl.mu.Lock()
		if tl.reasons == nil {
			tl.reasons = map[string]int{}
		}
		for r, k := range rep.Unresolved {
			tl.reasons[r] += k
		}
		tl.took = append(tl.took, took)
		tl.mu.Unlock()
		for i, s := range otlptest.Resolve(pd) {
			tl.seen.Add(1)
			got := s.Stack[0].Lines
			if len(got) == 0 {
				continue
			}
			w := byName[cases[i].Bin.Name].src.want[cases[i].VAddr]
			ok := len(got) == len(w)
			for k := 0; ok && k < len(w); k++ {
				ok = got[k].Function == w[k].FunctionName && got[k].Line == w[k].Line
			}
			if !ok {
				tl.wrong.Add(1)
				if tl.wrong.Load() <= 3 {
					t.Logf("%s %#x: got %+v, llvm-symbolizer %+v", cases[i].Bin.Name, cases[i].VAddr, got, w)
				}
				continue
			}
			tl.symbolized.Add(1)
		}
	}
	round := func(ph *phase, what string, set []binary, before func(n int), logged bool) *tally {
		var tl tally
		var wg sync.WaitGroup
		for n := range nodes {
			wg.Go(func() {
				if before != nil {
					before(n)
				}
				send(n, set, &tl)
			})
		}
		wg.Wait()
		if logged {
			t.Logf("%s: %s", what, &tl)
		}
		if tl.samplesIn.Load() != tl.samplesOut.Load() || tl.wrong.Load() != 0 {
			t.Errorf("%s: samples lost or frames wrong: %s", what, &tl)
		}
		ph.add(&tl)
		return &tl
	}
	// counters sums the symbolizers' counters over the drill: a replica that is down counts
	// what it had when last seen, and one that restarted (its counters from zero again) adds
	// its new counts to those of its earlier life.
	last := make([][4]float64, len(syms))
	lives := make([][4]float64, len(syms)) // the sums of its earlier lives
	counters := func() (builds, loads, waits, uploads float64, per []string) {
		for i, s := range syms {
			b := symbolizerMetrics(t, s.URL(), "symbolizer_index_builds_total", `result="ok"`)
			if b >= 0 {
				now := [4]float64{b,
					symbolizerMetrics(t, s.URL(), "symbolizer_index_loads_total", `result="ok"`),
					symbolizerMetrics(t, s.URL(), "symbolizer_index_build_waits_total", ""),
					symbolizerMetrics(t, s.URL(), "symbolizer_uploads_total", `result="ok"`)}
				if now[1] < last[i][1] || now[0] < last[i][0] || now[3] < last[i][3] {
					for k := range now {
						lives[i][k] += last[i][k]
					}
				}
				last[i] = now
				per = append(per, fmt.Sprintf("replica %d: %v loads, %v builds", i, lives[i][1]+now[1], lives[i][0]+now[0]))
			} else {
				per = append(per, fmt.Sprintf("replica %d: down", i))
			}
			builds += lives[i][0] + last[i][0]
			loads += lives[i][1] + last[i][1]
			waits += lives[i][2] + last[i][2]
			uploads += lives[i][3] + last[i][3]
		}
		return
	}
	// cpu is the symbolizers' CPU time so far, over every life of each.
	cpuLast := make([]time.Duration, len(syms))
	cpuLives := make([]time.Duration, len(syms))
	cpuPID := make([]int, len(syms))
	cpu := func() (sum time.Duration) {
		for i, s := range syms {
			if pid := s.PID(); pid > 0 {
				if pid != cpuPID[i] {
					cpuLives[i] += cpuLast[i]
					cpuPID[i], cpuLast[i] = pid, 0
				}
				if c, err := procstat.CPUTime(pid); err == nil {
					cpuLast[i] = c
				}
			}
			sum += cpuLives[i] + cpuLast[i]
		}
		return sum
	}
	begin := func(name string) *phase {
		ph := &phase{name: name, start: time.Now(), redis0: redisCommands(t, cluster), cpu0: cpu(), opens0: breakerOpens()}
		ph.builds0, ph.loads0, _, _, _ = counters()
		ph.failed0 = failedModules()
		return ph
	}
	// end closes a phase: its figures into the report, and the memory bound checked.
	end := func(ph *phase) {
		builds, loads, _, _, per := counters()
		ph.builds, ph.loads = builds-ph.builds0, loads-ph.loads0
		ph.failed = failedModules() - ph.failed0
		ph.took = time.Since(ph.start)
		ph.redisCmds = redisCommands(t, cluster) - ph.redis0
		ph.redisOps = float64(ph.redisCmds) / ph.took.Seconds()
		ph.redisBytes, ph.redisKeys = redisMemory(t, cluster)
		ph.cpu = cpu() - ph.cpu0
		ph.opens = breakerOpens() - ph.opens0
		for i, s := range syms {
			r := replicaMemory{index: -1}
			if pid := s.PID(); pid > 0 {
				r.hwm = procstat.Memory(pid, "VmHWM")
				r.index = int64(symbolizerMetrics(t, s.URL(), "symbolizer_index_cache_bytes", ""))
			}
			ph.replicas = append(ph.replicas, r)
			if r.hwm > *flagCache+*flagMargin {
				t.Errorf("%s: replica %d peaked at %d MiB of RSS, over its index cache (%d MiB) and the margin (%d MiB)",
					ph.name, i, r.hwm>>20, *flagCache>>20, *flagMargin>>20)
			}
		}
		t.Logf("%s: %s; %v", ph.name, ph, per)
		rep.phase(ph)
	}

	// release runs one release phase with the binaries of released.
	release := func(run int, released []binary) *phase {
		var (
			mu       sync.Mutex
			accepted = map[string]map[string]bool{} // build ID -> upload IDs
			puts     int                            // nodes that sent bytes
			refusals = map[string]int{}
		)
		_, _, w0, u0, _ := counters()
		name := "release"
		if run > 0 {
			name = fmt.Sprintf("release %d", run+1)
		}
		ph := begin(name)
		ph.set = released
		first := round(ph, name+", first round (uploads racing)", released, func(n int) {
			for _, b := range picks(n, released) {
				out, err := upload(t.Context(), clients[n%3], b.path)
				mu.Lock()
				switch {
				case err != nil:
					t.Errorf("node %d upload %s: %v", n, filepath.Base(b.path), err)
				case out.uploadID != "":
					puts++
					if accepted[out.buildID] == nil {
						accepted[out.buildID] = map[string]bool{}
					}
					accepted[out.buildID][out.uploadID] = true
				default:
					refusals[out.reason]++
				}
				mu.Unlock()
			}
		}, true)
		ph.first = first
		twice := 0
		for id, ups := range accepted {
			if len(ups) > 1 {
				twice++
				t.Errorf("build ID %s: %d uploads accepted", id, len(ups))
			}
		}
		ph.asked = asked(nodes, released, picks)
		t.Logf("release uploads: %d build IDs asked of %d released, %d accepted uploads (one each: %v), %d nodes sent bytes (the same file raced through ShouldUpload shares its upload), refused: %v",
			ph.asked, len(released), len(accepted), twice == 0, puts, refusals)
		if len(accepted) != ph.asked {
			t.Errorf("%d of %d released build IDs that nodes run were uploaded", len(accepted), ph.asked)
		}
		// A replica remembers that a build ID has nothing stored for a second (a fifth of
		// symbolizeapi's ResolveTTL), so that binaries never uploaded cost no store read per
		// request; a node's next export comes 10 s after its last (the collector's --interval).
		time.Sleep(1500 * time.Millisecond)
		after := round(ph, name+", after the uploads (first deadline after them)", released, nil, true)
		ph.after = after
		if r := after.ratio(); r < 0.99 {
			coverage("%s: %.2f%% of frames symbolized after the uploads, want at least 99%%", name, 100*r)
		}
		if r := first.ratio(); *flagHold > 0 && r < 0.95 {
			coverage("%s: %.2f%% of frames symbolized while the uploads raced, want at least 95%% with the hold", name, 100*r)
		}
		for _, tl := range []*tally{first, after} {
			if _, p99 := tl.heldLatency(); p99 > *flagHold {
				t.Errorf("%s: p99 of the time held %v, over the hold of %v", name, p99, *flagHold)
			}
		}
		_, _, w1, u1, _ := counters()
		ph.uploads, ph.puts, ph.accepted, ph.refused, ph.waits = u1-u0, puts, len(accepted), refusals, w1-w0
		end(ph)
		if ph.opens > 0 {
			t.Errorf("%s: a breaker opened %d times with every replica up", name, ph.opens)
		}
		// Each upload's verification builds its index once (FinishUpload repeated for a shared
		// upload verifies nothing) and does not keep it in memory (--no-hold-uploaded-indexes):
		// an index is in memory where it was loaded, or built on lookup. Each new build ID must
		// have been loaded by one replica, two only where a failing call moved its module.
		if held := ph.builds + ph.loads; *flagAffinity && held > float64(ph.asked)+float64(ph.failed) {
			t.Errorf("%s: %v index loads and builds on lookup for %d new build IDs (%d modules moved past a failed replica): a new index was held by more than one replica",
				name, held, ph.asked, ph.failed)
		}
		return ph
	}

	// Steady: the old release, stored; the first round loads indexes, the second reads memory.
	ph := begin("steady")
	round(ph, "steady, first round", old, nil, true)
	if tl := round(ph, "steady", old, nil, true); tl.symbolized.Load() != tl.seen.Load() {
		coverage("steady: %d of %d frames unsymbolized", tl.seen.Load()-tl.symbolized.Load(), tl.seen.Load())
	}
	ph.asked = asked(nodes, old, picks)
	end(ph)
	if ph.opens > 0 {
		t.Errorf("steady: a breaker opened %d times with every replica up", ph.opens)
	}

	// Release: every node runs new binaries, uploads them at once, and sends profiles; as many
	// times as -drill.releases says, each time with binaries no one has seen.
	var releases []*phase
	for run := range *flagReleases {
		set := released
		if run > 0 {
			set = rebuild(t, released, run)
			ownIDs(t, ids, set)
			for _, b := range set {
				byName[filepath.Base(b.path)] = b
			}
		}
		releases = append(releases, release(run, set))
	}
	worst := releases[0]
	for _, ph := range releases[1:] {
		if min(ph.first.ratio(), ph.after.ratio()) < min(worst.first.ratio(), worst.after.ratio()) {
			worst = ph
		}
	}
	rep.worst(worst, len(releases))
	t.Logf("release, worst of %d runs (%s): %.2f%% of frames symbolized while uploads raced, %.2f%% in the first export after them",
		len(releases), worst.name, 100*worst.first.ratio(), 100*worst.after.ratio())
	released = releases[len(releases)-1].set

	// A replica killed under load: its build IDs go to their next owners, which answer from
	// Redis or load the indexes from the store; then it comes back and takes them again.
	ph = begin("replica killed and restarted")
	syms[0].Stop()
	killed := round(ph, "replica 0 killed, first round", released, nil, true)
	if r := killed.ratio(); r < 0.99 {
		coverage("after the kill: %.2f%% of frames symbolized, want at least 99%%", 100*r)
	}
	ph.first = killed
	round(ph, "replica 0 killed", released, nil, true)
	syms[0].Start(t)
	// The gateways pass a failed replica over for 10 s (EjectFor): a round a second goes on
	// meanwhile.
	restarted := 0
	for deadline := time.Now().Add(12 * time.Second); time.Now().Before(deadline); restarted++ {
		tick := time.After(time.Second)
		round(ph, "replica 0 restarted", released, nil, false)
		<-tick
	}
	t.Logf("replica 0 restarted: %d rounds while the gateways passed it over", restarted)
	round(ph, "replica 0 back in the gateways' rotation", released, nil, true)
	ph.asked = asked(nodes, released, picks)
	end(ph)
	stored := storeBytes(t, bucket, "drill")
	var binBytes int64
	for _, b := range bins {
		binBytes += b.size
	}
	t.Logf("the store: %v bytes by kind, for %d MB of binaries", stored, binBytes/1e6)
	for _, kind := range []string{"files", "indexes", "string tables", "records"} {
		rep.add("store", kind, fmt.Sprintf("%d MB (%.2f of the binaries)", stored[kind]/1e6, float64(stored[kind])/float64(binBytes)))
	}
}

// phase is the figures of one phase of the drill.
type phase struct {
	name  string
	start time.Time
	asked int // distinct binaries the nodes ran

	builds0, loads0, builds, loads float64       // index builds on lookup and loads, all replicas
	failed0, failed                int64         // modules moved past a failed replica
	cpu0, cpu                      time.Duration // the symbolizers' CPU time
	redisKeys, redisCmds           int64
	took                           time.Duration
	redis0                         int64
	redisOps                       float64
	redisBytes                     int64
	replicas                       []replicaMemory
	rounds                         []*tally
	first                          *tally // the round that is the phase's test
	after                          *tally // a release's first round after its uploads
	set                            []binary
	opens0, opens                  int64 // the gateways' breaker openings

	uploads, waits float64
	puts, accepted int
	refused        map[string]int
}

// refusedN is how many uploads were refused, for any reason.
func (p *phase) refusedN() (n int) {
	for _, k := range p.refused {
		n += k
	}
	return n
}

type replicaMemory struct {
	hwm, index int64 // peak RSS, bytes of indexes in memory (-1: down)
}

func (p *phase) add(t *tally) { p.rounds = append(p.rounds, t) }

// latency is the p50 and p99 of the time the gateways took per profile over the phase.
func (p *phase) latency() (p50, p99 time.Duration) {
	var all []time.Duration
	for _, r := range p.rounds {
		all = append(all, r.took...)
	}
	if len(all) == 0 {
		return 0, 0
	}
	slices.Sort(all)
	return all[len(all)*50/100], all[min(len(all)-1, len(all)*99/100)]
}

func (p *phase) String() string {
	p50, p99 := p.latency()
	var in, out int64
	for _, r := range p.rounds {
		in, out = in+r.samplesIn.Load(), out+r.samplesOut.Load()
	}
	var mem []string
	for i, r := range p.replicas {
		if r.index < 0 {
			mem = append(mem, fmt.Sprintf("replica %d down", i))
			continue
		}
		mem = append(mem, fmt.Sprintf("replica %d peak RSS %d MiB, indexes %.1f MiB", i, r.hwm>>20, float64(r.index)/(1<<20)))
	}
	return fmt.Sprintf("%d binaries asked; %v index builds on lookup and %v loads (%.2f per binary); %d modules moved past a failed replica; p50 %v p99 %v per profile; samples in %d out %d; Redis %.0f ops/s, %d MiB; %s",
		p.asked, p.builds, p.loads, (p.builds+p.loads)/float64(max(p.asked, 1)), p.failed,
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), in, out, p.redisOps, p.redisBytes>>20, strings.Join(mem, "; "))
}

// asked counts the distinct binaries of set that nodes run.
func asked(nodes int, set []binary, picks func(int, []binary) []binary) int {
	seen := map[string]bool{}
	for n := range nodes {
		for _, b := range picks(n, set) {
			seen[b.path] = true
		}
	}
	return len(seen)
}

// redisCommands is the commands the cluster's masters processed so far.
func redisCommands(t *testing.T, c *testsupport.RedisCluster) (n int64) {
	for _, i := range c.Masters() {
		info, err := c.Info(t.Context(), i, "stats")
		if err != nil {
			t.Logf("redis node %d: %v", i, err)
			continue
		}
		v, _ := strconv.ParseInt(info["total_commands_processed"], 10, 64)
		n += v
	}
	return n
}

// redisMemory is the memory the cluster's masters use, and the keys they hold.
func redisMemory(t *testing.T, c *testsupport.RedisCluster) (bytes, keys int64) {
	for _, i := range c.Masters() {
		info, err := c.Info(t.Context(), i, "memory")
		if err != nil {
			t.Logf("redis node %d: %v", i, err)
			continue
		}
		v, _ := strconv.ParseInt(info["used_memory"], 10, 64)
		bytes += v
		if info, err = c.Info(t.Context(), i, "keyspace"); err == nil {
			// db0:keys=123,expires=123,avg_ttl=0
			if kv, ok := info["db0"]; ok {
				k, _, _ := strings.Cut(strings.TrimPrefix(kv, "keys="), ",")
				n, _ := strconv.ParseInt(k, 10, 64)
				keys += n
			}
		}
	}
	return bytes, keys
}

// storeBytes sums the bucket's objects by kind: indexes, string tables, records, the files.
func storeBytes(t *testing.T, c *minio.Client, bucket string) map[string]int64 {
	out := map[string]int64{}
	for o := range c.ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Errorf("list the store: %v", o.Err)
			return out
		}
		kind := "files"
		switch {
		case strings.HasSuffix(o.Key, ".index"):
			kind = "indexes"
		case strings.HasSuffix(o.Key, ".strings"):
			kind = "string tables"
		case strings.HasSuffix(o.Key, ".json"):
			kind = "records"
		}
		out[kind] += o.Size
	}
	return out
}

// report is the drill's figures as rows of phase, figure and value, for bench/scale/run.sh
// to put the runs with and without affinity side by side.
type report struct {
	rows [][3]string
}

func (r *report) add(phase, figure, value string) {
	r.rows = append(r.rows, [3]string{phase, figure, value})
}

func (r *report) describe(t *testing.T, bins []binary) {
	sizes := map[string]int{}
	var total int64
	var large int
	for _, b := range bins {
		sizes[fmt.Sprintf("%s (%d MB)", b.src.name, b.size/1e6)]++
		total += b.size
		if b.size > 100e6 {
			large++
		}
	}
	t.Logf("%d binaries, %d MB in all, %d over 100 MB: %v", len(bins), total/1e6, large, sizes)
	r.add("setup", "nodes", strconv.Itoa(*flagNodes))
	r.add("setup", "binaries (over 100 MB)", fmt.Sprintf("%d (%d)", len(bins), large))
	r.add("setup", "binary bytes", fmt.Sprintf("%d MB", total/1e6))
}

func (r *report) phase(p *phase) {
	pct := func(t *tally) string { return fmt.Sprintf("%.2f%%", 100*t.ratio()) }
	p50, p99 := p.latency()
	var in, out int64
	for _, t := range p.rounds {
		in, out = in+t.samplesIn.Load(), out+t.samplesOut.Load()
	}
	r.add(p.name, "samples in / out", fmt.Sprintf("%d / %d", in, out))
	r.add(p.name, "index loads + builds on lookup per binary", fmt.Sprintf("%.2f", (p.builds+p.loads)/float64(max(p.asked, 1))))
	r.add(p.name, "modules moved past a failed replica", strconv.FormatInt(p.failed, 10))
	if p.first != nil {
		r.add(p.name, "frames symbolized, first round", pct(p.first))
	}
	r.add(p.name, "breakers opened", strconv.FormatInt(p.opens, 10))
	r.add(p.name, "frames symbolized, last round", pct(p.rounds[len(p.rounds)-1]))
	r.add(p.name, "gateway time per profile p50 / p99", fmt.Sprintf("%v / %v", p50.Round(time.Millisecond), p99.Round(time.Millisecond)))
	var addrs int64
	for _, t := range p.rounds {
		addrs += t.asked.Load()
	}
	r.add(p.name, "Redis ops/s, memory", fmt.Sprintf("%.0f, %d MiB", p.redisOps, p.redisBytes>>20))
	r.add(p.name, "duration", p.took.Round(100*time.Millisecond).String())
	r.add(p.name, "Redis keys", strconv.FormatInt(p.redisKeys, 10))
	r.add(p.name, "Redis commands per 1,000 addresses", fmt.Sprintf("%.1f", float64(p.redisCmds)*1000/float64(max(addrs, 1))))
	r.add(p.name, "addresses asked of the symbolizers", strconv.FormatInt(addrs, 10))
	r.add(p.name, "symbolizer CPU per 1,000 addresses", fmt.Sprintf("%.1f ms", float64(p.cpu.Microseconds())/float64(max(addrs, 1))))
	for i, m := range p.replicas {
		v := "down"
		if m.index >= 0 {
			v = fmt.Sprintf("%d / %.1f MiB", m.hwm>>20, float64(m.index)/(1<<20))
		}
		r.add(p.name, fmt.Sprintf("replica %d peak RSS / indexes held", i), v)
	}
	if p.puts > 0 {
		r.add(p.name, "uploads accepted per build ID", fmt.Sprintf("%.2f", float64(p.accepted)/float64(max(p.asked, 1))))
		r.add(p.name, "nodes that sent bytes / refused", fmt.Sprintf("%d / %d", p.puts, p.refusedN()))
		r.add(p.name, "index build waits", fmt.Sprintf("%v", p.waits))
	}
}

// worst adds the figures of the worst of n release phases.
func (r *report) worst(p *phase, n int) {
	name := fmt.Sprintf("release, worst of %d", n)
	r.add(name, "run", p.name)
	r.add(name, "frames symbolized while uploads raced", fmt.Sprintf("%.2f%%", 100*p.first.ratio()))
	r.add(name, "frames symbolized, first export after the uploads", fmt.Sprintf("%.2f%%", 100*p.after.ratio()))
	for _, tl := range []*tally{p.first, p.after} {
		p50, p99 := tl.heldLatency()
		what := "while uploads raced"
		if tl == p.after {
			what = "after the uploads"
		}
		tl.mu.Lock()
		r.add(name, "profiles held "+what+" (to the end) / p50 / p99 held / most bytes held", fmt.Sprintf("%d (%d) / %v / %v / %.1f MiB", len(tl.held), tl.expired,
			p50.Round(time.Millisecond), p99.Round(time.Millisecond), float64(tl.heldMax)/(1<<20)))
		tl.mu.Unlock()
	}
	var in, out int64
	for _, t := range p.rounds {
		in, out = in+t.samplesIn.Load(), out+t.samplesOut.Load()
	}
	r.add(name, "samples in / out", fmt.Sprintf("%d / %d", in, out))
	r.add(name, "breakers opened", strconv.FormatInt(p.opens, 10))
}

func (r *report) write(t *testing.T) {
	if *flagReport == "" {
		return
	}
	var b strings.Builder
	for _, row := range r.rows {
		fmt.Fprintf(&b, "%s\t%s\t%s\n", row[0], row[1], row[2])
	}
	if err := os.WriteFile(*flagReport, []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}

// dedupe drops repeated binaries of one node (two picks of one binary would be one mapping).
func dedupe(bins []otlptest.Binary) []otlptest.Binary {
	seen := map[string]bool{}
	out := bins[:0]
	for _, b := range bins {
		if !seen[b.Path] {
			seen[b.Path] = true
			out = append(out, b)
		}
	}
	return out
}
