package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/minio/minio-go/v7"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/profsym/profsym/demo/pipeline"
	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/testsupport"
)

var errDrillMissed = errors.New("done before the fault")

// drillReport collects one line per drill for the closing table.
type drillReport struct {
	mu    sync.Mutex
	lines []string
}

func (r *drillReport) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

// TestDrills kills and restarts the symbolizer's dependencies and the symbolizer itself at the
// worst moments: MinIO during an upload and during an index load, Redis restarted empty, and
// the symbolizer while a 150 MB binary's index is being built for callers that share it.
// Each time the callers get an answer or a clear error, never a hang, and the service is whole
// again once the process is back, without anyone's help.
func TestDrills(t *testing.T) {
	if testing.Short() {
		t.Skip("drills: kill and restart real servers; skipped in -short mode")
	}
	var rep drillReport
	t.Cleanup(func() { t.Logf("drills:\n%s", strings.Join(rep.lines, "\n")) })
	t.Run("minio", func(t *testing.T) { minioDrills(t, &rep) })
	t.Run("redis restarted empty", func(t *testing.T) { redisDrill(t, &rep) })
	t.Run("symbolizer killed during a 150 MB index build", func(t *testing.T) { indexBuildDrill(t, &rep, false) })
	t.Run("symbolizer terminated during a 150 MB index build", func(t *testing.T) { indexBuildDrill(t, &rep, true) })
}

// symbolize asks for one module's addresses; modules carry every ID the file has.
func symbolize(ctx context.Context, url string, ids buildid.IDs, addrs []uint64) (*symbolizerv1.SymbolizeResponse, error) {
	c := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, url)
	resp, err := c.Symbolize(ctx, connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{
		{GnuBuildId: ids.GNU, GoBuildId: ids.Go, Htlhash: ids.HTLHash, Addresses: addrs}}}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// resolved counts the addresses that came back with frames.
func resolved(r *symbolizerv1.SymbolizeResponse) int {
	n := 0
	for _, m := range r.GetModules() {
		for _, c := range m.GetFrameCounts() {
			if c > 0 {
				n++
			}
		}
	}
	return n
}

// uploadCmd runs the real upload client once (no retries: the drill wants the first error).
func uploadCmd(ctx context.Context, bin, server, token, path string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, "upload", "--server", server, "--token", token, "--progress", "plain", "--retries", "1", path)
	return cmd.CombinedOutput()
}

func minioDrills(t *testing.T, rep *drillReport) {
	ctx := t.Context()
	m := testsupport.StartMinIO(t)
	m.NewBucket(t, "drills")
	tox := testsupport.StartToxiproxy(t)
	// The symbolizer and the upload client reach MinIO through a proxy whose bandwidth the
	// drills lower, so that a kill lands in the middle of a transfer, not before or after it.
	proxy := tox.Proxy("minio", m.Endpoint())
	s3 := []string{"--s3-endpoint", proxy.Listen, "--s3-bucket", "drills", "--s3-region", m.Region(),
		"--s3-access-key", m.AccessKey(), "--s3-secret-key", m.SecretKey(), "--s3-insecure", "--log-level", "info"}
	sym := testsupport.StartSymbolizer(t, "", s3...)
	bin := symbolizerBinary(t)
	// A real Go program of 16 MB with its DWARF.
	big := toxiproxyBinary(t)
	slow := func(kbps int) {
		t.Helper()
		if _, err := proxy.AddToxic("slow", "bandwidth", "downstream", 1, toxiproxy.Attributes{"rate": kbps}); err != nil {
			t.Fatal(err)
		}
		if _, err := proxy.AddToxic("slow-up", "bandwidth", "upstream", 1, toxiproxy.Attributes{"rate": kbps}); err != nil {
			t.Fatal(err)
		}
	}
	fast := func() {
		t.Helper()
		for _, name := range []string{"slow", "slow-up"} {
			if err := proxy.RemoveToxic(name); err != nil {
				t.Fatal(err)
			}
		}
	}
	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, sym.URL())
	list := func() []*debuginfov1.Debuginfo {
		t.Helper()
		req := connect.NewRequest(&debuginfov1.ListRequest{})
		l, err := dc.List(ctx, req)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		return l.Msg.Debuginfos
	}

	// 1. MinIO killed while the file streams into it.
	slow(3000) // KB/s: 16 MB take about 5 s
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		out, err := uploadCmd(ctx, bin, sym.URL(), sym.Token, big)
		done <- result{out, err}
	}()
	time.Sleep(2 * time.Second)
	m.Kill()
	killed := time.Now()
	var first result
	select {
	case first = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the upload client hung after MinIO was killed")
	}
	t.Logf("upload with MinIO killed after %v: %v\n%s", killed.Sub(start).Round(time.Millisecond), first.err, first.out)
	if first.err == nil {
		t.Fatalf("an upload whose store died mid-transfer succeeded:\n%s", first.out)
	}
	failedIn := time.Since(killed)
	m.Restart()
	fast()
	// What may remain is the upload initiated and not finished, UPLOADING until it is resumed
	// or expires (--upload-ttl): never a record of a file that is not whole.
	for _, d := range list() {
		if d.State != debuginfov1.DebuginfoState_DEBUGINFO_STATE_UPLOADING {
			t.Fatalf("the failed upload left a record in state %v: %v", d.State, d)
		}
	}
	recoverStart := time.Now()
	if out, err := uploadCmd(ctx, bin, sym.URL(), sym.Token, big); err != nil {
		t.Fatalf("upload after MinIO is back: %v\n%s", err, out)
	}
	l := list()
	if len(l) != 1 || l[0].State != debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE {
		t.Fatalf("after the second upload: %v", l)
	}
	rep.add("minio killed during an upload      client failed %v after the kill (%s); no record of a partial file (the upload stays UPLOADING, to resume); upload after restart ok in %v",
		failedIn.Round(time.Millisecond), firstLine(first.out), time.Since(recoverStart).Round(time.Millisecond))

	// 2. MinIO killed while a second symbolizer loads the stored index of a 150 MB program
	// (the index is about 80 MB: far more than the sockets on the way buffer, so the kill cuts
	// the transfer). Verifying the upload built the index and stored it.
	huge := testsupport.MinIOBinary(t)
	if out, err := uploadCmd(ctx, bin, sym.URL(), sym.Token, huge); err != nil {
		t.Fatalf("upload %s: %v\n%s", huge, err, out)
	}
	ids, err := buildid.FromFile(huge)
	if err != nil {
		t.Fatal(err)
	}
	addrs := funcAddrs(t, huge, "main.main", 50)
	r, err := symbolize(ctx, sym.URL(), ids, addrs)
	if err != nil || resolved(r) == 0 {
		t.Fatalf("symbolize on the first symbolizer: %v, %d resolved", err, resolved(r))
	}
	want := resolved(r)
	waitFor(t, 60*time.Second, "the index in the store", func() bool {
		return indexObjects(t, m) > 0
	})
	other := testsupport.StartSymbolizer(t, "", s3...)
	slow(20000)
	loadDone := make(chan error, 1)
	loadStart := time.Now()
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		r, err := symbolize(cctx, other.URL(), ids, addrs)
		switch {
		case err != nil:
			loadDone <- err
		case resolved(r) == want && time.Since(loadStart) < time.Second:
			loadDone <- errDrillMissed
		case resolved(r) == want:
			loadDone <- nil // answered in full: from what was read before the kill
		default:
			mod := r.GetModules()[0]
			if mod.GetMessage() == "" {
				loadDone <- fmt.Errorf("module %v with %d of %d addresses resolved and no message saying why", mod.GetStatus(), resolved(r), want)
				return
			}
			if strings.Contains(mod.GetMessage(), m.Endpoint()) || strings.Contains(mod.GetMessage(), "http") {
				loadDone <- fmt.Errorf("module message shows the store's endpoint to a client: %s", mod.GetMessage())
				return
			}
			loadDone <- fmt.Errorf("module %v: %s (%d of %d resolved)", mod.GetStatus(), mod.GetMessage(), resolved(r), want)
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	m.Kill()
	var loadErr error
	select {
	case loadErr = <-loadDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("Symbolize hung after MinIO was killed during the index load")
	}
	answeredIn := time.Since(loadStart)
	if errors.Is(loadErr, errDrillMissed) {
		t.Fatal("the index load finished before MinIO was killed: the drill did not happen")
	}
	if loadErr != nil && (strings.Contains(loadErr.Error(), "no message saying why") || strings.Contains(loadErr.Error(), "store's endpoint")) {
		t.Error(loadErr)
	}
	t.Logf("Symbolize with MinIO killed during the index load, after %v: %v", answeredIn.Round(time.Millisecond), loadErr)
	m.Restart()
	fast()
	recoverStart = time.Now()
	var back time.Duration
	waitFor(t, 60*time.Second, "symbolization after MinIO is back", func() bool {
		r, err := symbolize(ctx, other.URL(), ids, addrs)
		back = time.Since(recoverStart)
		return err == nil && resolved(r) == want
	})
	log := other.Log()
	if !strings.Contains(log, "store degraded") || !strings.Contains(log, "store recovered") {
		t.Errorf("the second symbolizer's log does not say the store went away and came back:\n%s", tail(log, 20))
	}
	rep.add("minio killed during an index load   Symbolize answered in %v (%v); all %d addresses again %v after restart; store outage logged: %v",
		answeredIn.Round(time.Millisecond), shortErr(loadErr), want, back.Round(time.Millisecond), strings.Contains(log, "store recovered"))
}

func redisDrill(t *testing.T, rep *drillReport) {
	ctx := t.Context()
	rd := testsupport.StartRedis(t)
	sym := testsupport.StartSymbolizer(t, rd.URL(), "--result-cache-entries", "0", "--log-level", "info")
	prog := testsupport.CompileC(t, program, "-O2", "-g")
	sym.Upload(t, prog)
	ids, err := buildid.FromFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi, err := pipeline.FuncRange(prog, "hot")
	if err != nil {
		t.Fatal(err)
	}
	var addrs []uint64
	for a := lo; a < hi && len(addrs) < 32; a += 2 {
		addrs = append(addrs, a)
	}
	first, err := symbolize(ctx, sym.URL(), ids, addrs)
	if err != nil || resolved(first) == 0 {
		t.Fatalf("symbolize: %v", err)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: rd.Addr()})
	defer rc.Close()
	// Results are written to Redis in the background.
	waitFor(t, 10*time.Second, "results in Redis", func() bool {
		n, err := rc.DBSize(ctx).Result()
		return err == nil && n > 0
	})
	// Steady callers through the restart: every answer must be the first one.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	calls, wrong := 0, 0
	var errs []error
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				r, err := symbolize(cctx, sym.URL(), ids, addrs)
				cancel()
				mu.Lock()
				calls++
				if err != nil {
					errs = append(errs, err)
				} else if !sameFrames(r, first) {
					wrong++
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	restartAt := time.Now()
	rd.Restart()
	restarted := time.Since(restartAt)
	var refilled time.Duration
	waitFor(t, 30*time.Second, "Redis refilled", func() bool {
		n, err := rc.DBSize(ctx).Result()
		refilled = time.Since(restartAt)
		return err == nil && n > 0
	})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if len(errs) > 0 || wrong > 0 {
		t.Fatalf("through the Redis restart: %d calls, %d errors (first: %v), %d wrong answers", calls, len(errs), errors.Join(errs...), wrong)
	}
	// If the restart was seen (a call failed meanwhile), its end was seen too, and the gauge
	// is back to 0.
	log := sym.Log()
	if strings.Contains(log, "redis degraded") && !strings.Contains(log, "redis recovered") {
		t.Errorf("Redis's outage was logged but not its end:\n%s", tail(log, 20))
	}
	if v := scrape(t, sym.URL()+"/metrics").sum(`symbolizer_degraded`); v != 0 {
		t.Errorf("symbolizer_degraded = %v with Redis back", v)
	}
	rep.add("redis restarted empty              %d calls, 0 errors, 0 wrong answers; restart took %v; Redis refilled %v after it; outage logged: %v",
		calls, restarted.Round(time.Millisecond), refilled.Round(time.Millisecond), strings.Contains(sym.Log(), "redis degraded"))
}

// indexBuildDrill stops the symbolizer while callers share the build of a large index: with
// SIGKILL (a crash) or, with graceful, SIGTERM (a rolling update), after which it has its
// --shutdown-timeout to finish what it serves. Either way every caller gets the answer or a
// clear unavailable, never a hang, and after a restart every caller gets the answer.
func indexBuildDrill(t *testing.T, rep *drillReport, graceful bool) {
	ctx := t.Context()
	big := testsupport.MinIOBinary(t)
	st, err := os.Stat(big)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := buildid.FromFile(big)
	if err != nil {
		t.Fatal(err)
	}
	addrs := funcAddrs(t, big, "main.main", 20)
	const shutdownTimeout = 5 * time.Second
	sym := testsupport.StartSymbolizer(t, "", "--log-level", "info", "--shutdown-timeout", shutdownTimeout.String())
	sym.Upload(t, big)
	// Verifying the upload built the index and stored it beside the file: take both away (a
	// fresh process, no stored index) so that the callers' Symbolize builds it.
	sym.Stop()
	removed := 0
	err = filepath.WalkDir(sym.StoreDir(), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".index") {
			removed++
			return os.Remove(path)
		}
		return err
	})
	if err != nil || removed == 0 {
		t.Fatalf("remove the stored index: %d removed, %v", removed, err)
	}
	sym.Start(t)
	logAtStart := len(sym.Log())
	// Callers that share one build: they start together, the process dies under them.
	const callers = 8
	type outcome struct {
		resolved int
		err      error
		took     time.Duration
	}
	call := func() []outcome {
		out := make([]outcome, callers)
		var wg sync.WaitGroup
		for i := range out {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
				defer cancel()
				r, err := symbolize(cctx, sym.URL(), ids, addrs)
				out[i] = outcome{resolved: resolved(r), err: err, took: time.Since(start)}
			}()
		}
		wg.Wait()
		return out
	}
	rss := watchRSS(sym.PID(), sym.PID())
	idle := pipeline.RSS(sym.PID())
	results := make(chan []outcome, 1)
	go func() { results <- call() }()
	// Stop it once the build is under way (its memory grows by tens of MB), not after a fixed
	// time: how long the build takes depends on the machine.
	const building = 32 << 20
	deadline := time.Now().Add(time.Minute)
	for pipeline.RSS(sym.PID()) < idle+building {
		if strings.Contains(sym.Log()[logAtStart:], "index built") {
			t.Fatal("the index was built before the symbolizer's memory grew by 32 MB: the drill did not happen")
		}
		if time.Now().After(deadline) {
			t.Fatal("no index build under way a minute after the callers started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(sym.Log()[logAtStart:], "index built") {
		t.Fatal("the index was built before the symbolizer was stopped: the drill did not happen")
	}
	how := "killed"
	var exitedIn time.Duration
	if graceful {
		how = "terminated"
		// The shutdown timeout, then the time to exit; more is a shutdown that hangs.
		exitedIn = sym.Terminate(shutdownTimeout + 10*time.Second)
	} else {
		sym.Stop()
	}
	peakBefore, _ := rss()
	var killed []outcome
	select {
	case killed = <-results:
	case <-time.After(time.Minute):
		t.Fatalf("callers hung after the symbolizer was %s under them", how)
	}
	for i, o := range killed {
		// An answer is fine (built in time); otherwise the error must say the service went
		// away, not leave the caller guessing.
		if o.err != nil && connect.CodeOf(o.err) != connect.CodeUnavailable {
			t.Errorf("caller %d, symbolizer %s: %v (code %v), want unavailable", i, how, o.err, connect.CodeOf(o.err))
		}
		if o.err == nil && o.resolved == 0 {
			t.Errorf("caller %d: an answer without frames", i)
		}
	}
	restart := time.Now()
	sym.Start(t)
	rss = watchRSS(sym.PID(), sym.PID())
	again := call()
	peakAfter, _ := rss()
	slowest := time.Duration(0)
	for i, o := range again {
		if o.err != nil || o.resolved != len(addrs) {
			t.Errorf("caller %d after the restart: %d of %d resolved, %v", i, o.resolved, len(addrs), o.err)
		}
		slowest = max(slowest, o.took)
	}
	errs := 0
	for _, o := range killed {
		if o.err != nil {
			errs++
		}
	}
	exit := ""
	if graceful {
		exit = fmt.Sprintf(" (exited %v after SIGTERM, shutdown timeout %v)", exitedIn.Round(time.Millisecond), shutdownTimeout)
	}
	rep.add("symbolizer %s during a %d MB index build%s   %d callers: %d unavailable, %d answered; after restart all %d answered (slowest %v, %v from restart); peak RSS %d MiB before the stop, %d MiB rebuilding",
		how, st.Size()>>20, exit, callers, errs, callers-errs, callers, slowest.Round(time.Millisecond), time.Since(restart).Round(time.Millisecond), peakBefore>>20, peakAfter>>20)
}

// sameFrames reports whether two answers are the same, frame for frame.
func sameFrames(a, b *symbolizerv1.SymbolizeResponse) bool { return proto.Equal(a, b) }

// funcAddrs spreads n addresses over a function of the file.
func funcAddrs(t *testing.T, path, fn string, n int) []uint64 {
	t.Helper()
	lo, hi, err := pipeline.FuncRange(path, fn)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make([]uint64, 0, n)
	for i := range n {
		addrs = append(addrs, lo+uint64(i)*(hi-lo)/uint64(n))
	}
	return addrs
}

// indexObjects counts the serialized indexes in the drills' bucket.
func indexObjects(t *testing.T, m *testsupport.MinIO) int {
	t.Helper()
	n := 0
	for o := range m.Client(t).ListObjects(t.Context(), "drills", minio.ListObjectsOptions{Recursive: true}) {
		if o.Err == nil && strings.HasSuffix(o.Key, ".index") {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// symbolizerBinary and toxiproxyBinary are the binaries the test servers run: the first is
// built for the test binary, the second a 16 MB Go program to upload.
func symbolizerBinary(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "symbolizer")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, "./services/symbolizer")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build symbolizer: %v\n%s", err, b)
	}
	return out
}

func toxiproxyBinary(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("toxiproxy-server")
	if err == nil {
		return path
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(home, ".cache", "profsym", "bin", "toxiproxy-server")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no toxiproxy-server binary to upload: %v", err)
	}
	return path
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

func shortErr(err error) string {
	if err == nil {
		return "answered"
	}
	s := err.Error()
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
