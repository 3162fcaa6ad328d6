// Package scale is the release-day drill: simulated nodes send profiles through gateways (the
// symbolize processor's engine with its affinity router) to three symbolizer processes on one
// MinIO bucket and a Redis Cluster, in three phases: steady (binaries already stored), release
// (every node runs new binaries and uploads them at once) and a replica killed. It reports what
// docs/design/0006-fleet-scale.md asks of a deployment and fails when an answer is wrong, a
// sample is lost, an upload of one build ID is accepted twice, or frames stay unsymbolized
// after the uploads finished.
//
// The default is the short variant CI runs; the full drill:
//
//	go test ./bench/scale -run TestReleaseDay -v -timeout 30m -drill.nodes=200 -drill.binaries=300
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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/affinity"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
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

// makeBinaries compiles one program and writes n copies, each with its own GNU build ID (the
// note's bytes rewritten): n distinct binaries, as many stored files and indexes, with the
// same code, so one llvm-symbolizer answer checks every copy.
func makeBinaries(t *testing.T, n int) (paths []string, base string) {
	t.Helper()
	base = testsupport.CompileC(t, otlptest.CSource+otlptest.CMain, "-O2", "-g", "-no-pie", "-fno-pie", "-Wl,--build-id")
	f, err := elf.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	note := f.Section(".note.gnu.build-id")
	if note == nil {
		t.Fatal("no .note.gnu.build-id")
	}
	off := note.Offset + 16 // namesz, descsz, type, "GNU\0"
	f.Close()
	data, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i := range n {
		id := sha1.Sum([]byte("drill binary " + strconv.Itoa(i)))
		cp := bytes.Clone(data)
		copy(cp[off:off+20], id[:])
		p := filepath.Join(dir, fmt.Sprintf("app-%03d", i))
		if err := os.WriteFile(p, cp, 0o755); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths, base
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
	if err := c.Put(ctx, init, bytes.NewReader(data), int64(len(data))); err != nil {
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

	mu      sync.Mutex
	reasons map[string]int // of frames the gateways passed on unsymbolized
}

func (t *tally) String() string {
	ratio := 0.0
	if n := t.seen.Load(); n > 0 {
		ratio = float64(t.symbolized.Load()) / float64(n)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("samples in %d out %d; frames %d, symbolized %d (%.2f%%), wrong %d; unsymbolized by reason %v",
		t.samplesIn.Load(), t.samplesOut.Load(), t.seen.Load(), t.symbolized.Load(), 100*ratio, t.wrong.Load(), t.reasons)
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
	minio := testsupport.StartMinIO(t)
	minio.NewBucket(t, "drill")
	cluster := testsupport.StartRedisCluster(t, 3, 1)
	s3 := []string{"--s3-endpoint", minio.Endpoint(), "--s3-bucket", "drill", "--s3-region", minio.Region(),
		"--s3-access-key", minio.AccessKey(), "--s3-secret-key", minio.SecretKey(), "--s3-insecure", "--lease-ttl", "5s",
		"--result-cache-entries", "0", "--coverage-interval", "1h", "--no-hold-uploaded-indexes"}
	syms := make([]*testsupport.Symbolizer, 3)
	addrs := make([]string, 3)
	for i := range syms {
		syms[i] = testsupport.StartSymbolizer(t, cluster.URL(), s3...)
		addrs[i] = strings.TrimPrefix(syms[i].URL(), "http://")
	}
	paths, base := makeBinaries(t, nbin)
	old, released := paths[:nbin/2], paths[nbin/2:]

	// What every copy's outer function symbolizes to.
	lo, hi := otlptest.SymbolRange(t, base, "outer")
	var vas []uint64
	for va := lo; va < hi; va++ {
		vas = append(vas, va)
	}
	want := map[uint64][]otlptest.LLVMFrame{}
	for i, f := range otlptest.LLVMSymbolize(t, base, vas) {
		want[vas[i]] = f
	}

	clients := make([]*uploadclient.Client, 3)
	for i, s := range syms {
		var err error
		tok := s.Token
		if clients[i], err = uploadclient.New(uploadclient.Options{Server: s.URL(), Token: func() (string, error) { return tok, nil },
			RPCTimeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	// Before the drill: the old release is stored (uploaded through the Service: any replica).
	for i, p := range old {
		if _, err := upload(t.Context(), clients[i%3], p); err != nil {
			t.Fatalf("upload %s: %v", p, err)
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
		gws[g] = symbolize.New(symbolize.Config{Client: router, Timeout: 5 * time.Second, CallTimeout: 2 * time.Second,
			BatchAddresses: 8192, Concurrency: 4, CacheEntries: -1, Logger: quiet})
	}

	slots := make([]chan struct{}, gateways)
	for g := range slots {
		slots[g] = make(chan struct{}, *flagGateway)
	}
	// send has node n send one profile of its binaries from set through its gateway.
	send := func(n int, set []string, tl *tally) {
		bins := make([]otlptest.Binary, perNode)
		for j := range bins {
			p := set[(n*7+j*13)%len(set)]
			bins[j] = otlptest.Binary{Name: filepath.Base(p), Path: p, Fn: "outer"}
		}
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, dedupe(bins))
		tl.samplesIn.Add(int64(pd.SampleCount()))
		g := n % gateways
		slots[g] <- struct{}{}
		rep := gws[g].Process(t.Context(), pd)
		<-slots[g]
		tl.samplesOut.Add(int64(pd.SampleCount()))
		tl.mu.Lock()
		if tl.reasons == nil {
			tl.reasons = map[string]int{}
		}
		for r, k := range rep.Unresolved {
			tl.reasons[r] += k
		}
		tl.mu.Unlock()
		for i, s := range otlptest.Resolve(pd) {
			tl.seen.Add(1)
			got := s.Stack[0].Lines
			if len(got) == 0 {
				continue
			}
			w := want[cases[i].VAddr]
			ok := len(got) == len(w)
			for k := 0; ok && k < len(w); k++ {
				ok = got[k].Function == w[k].FunctionName && got[k].Line == w[k].Line
			}
			if !ok {
				tl.wrong.Add(1)
				continue
			}
			tl.symbolized.Add(1)
		}
	}
	round := func(what string, set []string, before func(n int)) *tally {
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
		t.Logf("%s: %s", what, &tl)
		if tl.samplesIn.Load() != tl.samplesOut.Load() || tl.wrong.Load() != 0 {
			t.Errorf("%s: samples lost or frames wrong: %s", what, &tl)
		}
		return &tl
	}
	// counters sums the symbolizers' counters; a replica that is down counts what it had when
	// last seen, so differences are of the live ones.
	last := make([][4]float64, len(syms))
	counters := func() (builds, loads, waits, uploads float64, per []string) {
		for i, s := range syms {
			b := symbolizerMetrics(t, s.URL(), "symbolizer_index_builds_total", `result="ok"`)
			if b >= 0 {
				last[i] = [4]float64{b,
					symbolizerMetrics(t, s.URL(), "symbolizer_index_loads_total", `result="ok"`),
					symbolizerMetrics(t, s.URL(), "symbolizer_index_build_waits_total", ""),
					symbolizerMetrics(t, s.URL(), "symbolizer_uploads_total", `result="ok"`)}
				per = append(per, fmt.Sprintf("replica %d: %v loads, %v builds", i, last[i][1], last[i][0]))
			} else {
				per = append(per, fmt.Sprintf("replica %d: down", i))
			}
			builds, loads, waits, uploads = builds+last[i][0], loads+last[i][1], waits+last[i][2], uploads+last[i][3]
		}
		return
	}

	// Steady: the old release, stored; the first round loads indexes, the second reads memory.
	round("steady, first round", old, nil)
	if tl := round("steady", old, nil); tl.symbolized.Load() != tl.seen.Load() {
		coverage("steady: %d of %d frames unsymbolized", tl.seen.Load()-tl.symbolized.Load(), tl.seen.Load())
	}
	b0, l0, _, u0, per := counters()
	t.Logf("steady: %v index loads for %d binaries: %.2f replicas hold each", l0, len(old), l0/float64(len(old)))
	t.Logf("after steady: %v", per)

	// Release: every node runs new binaries, uploads them at once, and sends profiles.
	var (
		mu       sync.Mutex
		accepted = map[string]map[string]bool{} // build ID -> upload IDs
		puts     int                            // nodes that sent bytes
		refusals = map[string]int{}
	)
	round("release, first round (uploads racing)", released, func(n int) {
		for j := range perNode {
			p := released[(n*7+j*13)%len(released)]
			out, err := upload(t.Context(), clients[n%3], p)
			mu.Lock()
			switch {
			case err != nil:
				t.Errorf("node %d upload %s: %v", n, filepath.Base(p), err)
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
	})
	twice := 0
	for id, ups := range accepted {
		if len(ups) > 1 {
			twice++
			t.Errorf("build ID %s: %d uploads accepted", id, len(ups))
		}
	}
	t.Logf("release uploads: %d build IDs, %d accepted uploads (one each: %v), %d nodes sent bytes (the same file raced through ShouldUpload shares its upload), refused: %v",
		len(released), len(accepted), twice == 0, puts, refusals)
	if len(accepted) != len(released) {
		t.Errorf("%d of %d released build IDs were uploaded", len(accepted), len(released))
	}
	after := round("release, after the uploads (first deadline after them)", released, nil)
	if r := float64(after.symbolized.Load()) / float64(after.seen.Load()); r < 0.99 {
		coverage("release: %.2f%% of frames symbolized after the uploads, want at least 99%%", 100*r)
	}
	b1, l1, w1, u1, per := counters()
	// Each upload's verification builds its index once (FinishUpload repeated for a shared
	// upload verifies nothing); uploaded indexes are not held by the verifying replica, so an
	// index is in memory where it was loaded or built on lookup.
	t.Logf("release: %v FinishUpload ok, %v index builds on lookup, %v index loads: %.2f replicas hold each new index; %v build waits; %v",
		u1-u0, b1-b0, l1-l0, (b1-b0+l1-l0)/float64(len(released)), w1, per)

	// A replica killed: its build IDs go to their next owners, which load them from the store.
	syms[0].Stop()
	killed := round("replica 0 killed, first round", released, nil)
	if r := float64(killed.symbolized.Load()) / float64(killed.seen.Load()); r < 0.99 {
		coverage("after the kill: %.2f%% of frames symbolized, want at least 99%%", 100*r)
	}
	round("replica 0 killed", released, nil)
	_, l2, _, _, per := counters()
	t.Logf("after the kill: %v more index loads on the live replicas (the rest answered from Redis with string tables); %v", l2-l1, per)
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
