package upgrade

import (
	"context"
	"debug/elf"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/minio/minio-go/v7"
	goredis "github.com/redis/go-redis/v9"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/pkg/testsupport"
)

// earlierCommit is the release the drill upgrades from and rolls back to: the last commit of
// index format 7 (the next one made it 8). It differs from this tree in every artefact that
// replicas share and that carries a version: the index format; the string-table tag, which
// did not name the format; the keys of indexes and string tables (one per object whatever the
// format, so two formats overwrote each other's); records, aliases and coverage files without
// a version; no leases.
const earlierCommit = "02bafeac4d7499a461b7a769a8599236080dcad6"

const (
	earlier = "earlier"
	current = "current"
	token   = "drill-token"
)

// program is a binary of the drill with the addresses it is asked about.
type program struct {
	name  string
	path  string
	ids   buildid.IDs
	addrs []uint64
}

func (p *program) module(addrs []uint64) *symbolizerv1.Module {
	return &symbolizerv1.Module{GnuBuildId: p.ids.GNU, GoBuildId: p.ids.Go, Htlhash: p.ids.HTLHash, Addresses: addrs}
}

// hasID reports whether a logged build ID ("type:hex") names p.
func (p *program) hasID(logged string) bool {
	_, id, _ := strings.Cut(logged, ":")
	if id == "" {
		id = logged
	}
	return id == p.ids.GNU || id == p.ids.Go || id == p.ids.HTLHash
}

const cProgram = `
#include <stdio.h>
#include <stdlib.h>
static int __attribute__((noinline)) leaf(int x) { return x * %d + 1; }
static inline int mid(int x) { return leaf(x) + 2; }
static inline int outer(int x) { return mid(x) * 5; }
int __attribute__((noinline)) work(int n) { int s = 0; for (int i = 0; i < n; i++) s += outer(i); return s; }
int main(int argc, char **argv) { printf("%%d\n", work(argc + atoi(argc > 1 ? argv[1] : "3"))); return 0; }
`

// programs builds the drill's binaries: C programs, and variants of the corpus's Go program,
// whose package initializers the two index formats answer differently.
func programs(t *testing.T, nC, nGo int) []*program {
	t.Helper()
	var ps []*program
	for i := range nC {
		path := testsupport.CompileC(t, fmt.Sprintf(cProgram, 3+i), "-g", "-O2")
		ps = append(ps, newProgram(t, fmt.Sprintf("c%d", i), path))
	}
	root := repoRoot(t)
	for i := range nGo {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(filepath.Join(root, "testdata", "src", "go"))); err != nil {
			t.Fatal(err)
		}
		variant := fmt.Sprintf("package main\n\nimport \"os\"\n\nvar drillVariant = %d\n\nfunc init() {\n\tif len(os.Args) > 99 {\n\t\tprintln(drillVariant)\n\t}\n}\n", i)
		if err := os.WriteFile(filepath.Join(dir, "variant.go"), []byte(variant), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "corpus")
		cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build corpus: %v\n%s", err, b)
		}
		ps = append(ps, newProgram(t, fmt.Sprintf("go%d", i), out))
	}
	return ps
}

// newProgram finds the addresses to ask about: every byte of a Go program's package
// initializers, every fourth of the program's own functions (main.* of a Go program), and the
// middle of one in ten of the others.
func newProgram(t *testing.T, name, path string) *program {
	t.Helper()
	ids, err := buildid.FromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	set := map[uint64]bool{}
	// Package initializers first, every byte: there the two index formats differ.
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && isInit(s.Name) {
			for a := s.Value; a < s.Value+s.Size && len(set) < 4000; a++ {
				set[a] = true
			}
		}
	}
	for i, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Value == 0 {
			continue
		}
		own := strings.HasPrefix(s.Name, "main.") || !strings.Contains(s.Name, ".") && !strings.HasPrefix(s.Name, "_")
		switch {
		case own:
			for a := s.Value; a < s.Value+s.Size && len(set) < 8000; a += 4 {
				set[a] = true
			}
		case i%10 == 0:
			set[s.Value+s.Size/2] = true
		}
	}
	p := &program{name: name, path: path, ids: ids}
	for a := range set {
		p.addrs = append(p.addrs, a)
	}
	slices.Sort(p.addrs)
	if len(p.addrs) < 20 {
		t.Fatalf("%s: %d addresses", name, len(p.addrs))
	}
	return p
}

// isInit reports a package initializer of package main (main.init, main.init.0, ...).
func isInit(name string) bool {
	rest, ok := strings.CutPrefix(name, "main.init")
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	n, ok := strings.CutPrefix(rest, ".")
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

// answer is the frames of each of a program's addresses.
type answer [][]symbolizecodec.Frame

func symbolize(ctx context.Context, url string, p *program, from, to int) (answer, error) {
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, url)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req := connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{p.module(p.addrs[from:to])}})
	req.Header().Set("Authorization", "Bearer "+token)
	resp, err := client.Symbolize(ctx, req)
	if err != nil {
		return nil, err
	}
	m := resp.Msg.GetModules()[0]
	if m.GetStatus() != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		return nil, fmt.Errorf("%s: %v %s", p.name, m.GetStatus(), m.GetMessage())
	}
	got, err := symbolizecodec.Decode(m, to-from)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.name, err)
	}
	return got, nil
}

// upload sends p through url with the current release's client (a CI job runs one version of
// it against whichever replica answers).
func upload(t *testing.T, bin, url string, p *program) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, "upload", "--server", url, "--token", token, "--progress", "plain", "--source", "ci", p.path)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("upload %s to %s: %v\n%s", p.name, url, err, b)
	}
}

// env is what every replica of a test shares.
type env struct {
	bins   map[string]string // release -> symbolizer binary
	minio  *testsupport.MinIO
	secret string
	redis  *testsupport.Redis
	dir    string
}

func (e *env) args(bucket string, withRedis bool) []string {
	a := []string{"--s3-endpoint", e.minio.Endpoint(), "--s3-bucket", bucket, "--s3-region", e.minio.Region(),
		"--s3-access-key", e.minio.AccessKey(), "--s3-secret-key-file", e.secret, "--s3-insecure",
		"--upload-token", token,
		// No index stays in memory: every call that Redis does not answer whole reads the
		// stored index, so an index of the other format at its key would show at once.
		"--index-cache-bytes", "1"}
	if withRedis {
		a = append(a, "--redis-url", e.redis.URL())
	}
	return a
}

// reference is each program's answer from one replica of one release on a bucket of its own.
func (e *env) reference(t *testing.T, release string, ps []*program) map[string]answer {
	t.Helper()
	bucket := "ref-" + release
	e.minio.NewBucket(t, bucket)
	r := startReplica(t, e.bins[release], release, "ref-"+release, e.dir, e.args(bucket, false)...)
	defer r.stop(t)
	out := map[string]answer{}
	for _, p := range ps {
		upload(t, e.bins[current], r.url, p)
		a, err := symbolize(t.Context(), r.url, p, 0, len(p.addrs))
		if err != nil {
			t.Fatalf("reference of %s by the %s release: %v", p.name, release, err)
		}
		frames := 0
		for _, fs := range a {
			frames += len(fs)
		}
		if frames == 0 {
			t.Fatalf("reference of %s by the %s release: no frames", p.name, release)
		}
		out[p.name] = a
	}
	return out
}

// TestRollingUpgrade runs two replicas of the earlier release (earlierCommit) on one bucket
// and one Redis, replaces them one by one with the current release while uploads and Symbolize
// calls go on, then, on another bucket, does the same the other way (a rollback). Every answer
// must equal the answer of the answering replica's release alone; no call may fail; and each
// index is built at most once per format: by the upload, else by the first replica of its
// release that needs it.
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an earlier release and runs MinIO and Redis")
	}
	start := time.Now()
	e := &env{bins: map[string]string{earlier: releaseBinary(t, earlierCommit), current: currentBinary(t)}, dir: t.TempDir()}
	t.Logf("binaries built in %v", time.Since(start).Round(time.Second))
	e.minio = testsupport.StartMinIO(t)
	e.redis = testsupport.StartRedis(t)
	e.secret = filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(e.secret, []byte(e.minio.SecretKey()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ps := programs(t, 3, 3)
	refs := map[string]map[string]answer{earlier: e.reference(t, earlier, ps), current: e.reference(t, current, ps)}
	differ := 0
	for _, p := range ps {
		for i := range p.addrs {
			if !slices.Equal(refs[earlier][p.name][i], refs[current][p.name][i]) {
				differ++
			}
		}
	}
	// The drill could not tell the formats apart without answers that differ.
	if differ == 0 {
		t.Fatal("the two releases answer every address alike: a misread of the other format's index or results would not show")
	}
	t.Logf("the releases answer %d addresses differently", differ)

	for _, order := range [][2]string{{earlier, current}, {current, earlier}} {
		t.Run(order[0]+"-to-"+order[1], func(t *testing.T) {
			d := &drill{t: t, env: e, refs: refs, progs: ps, bucket: fmt.Sprintf("drill-%s-%s", order[0], order[1]),
				from: order[0], to: order[1]}
			d.run()
		})
	}
	t.Logf("drill took %v in all", time.Since(start).Round(time.Second))
}

type drill struct {
	t        *testing.T
	env      *env
	refs     map[string]map[string]answer
	progs    []*program
	bucket   string
	from, to string

	mu       sync.Mutex
	live     []*replica
	pool     []*program
	uploaded map[string]string // program -> release that took its upload
	all      []*replica

	calls, failed, wrong atomic.Int64
	examples             []string
}

func (d *drill) run() {
	t := d.t
	mc := d.env.minio.NewBucket(t, d.bucket)
	rcl := goredis.NewClient(&goredis.Options{Addr: d.env.redis.Addr()})
	defer rcl.Close()
	if err := rcl.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	d.uploaded = map[string]string{}
	n := 0
	newReplica := func(release string) *replica {
		n++
		r := startReplica(t, d.env.bins[release], release, fmt.Sprintf("%s-%d-%s", d.bucket, n, release), d.env.dir, d.env.args(d.bucket, true)...)
		d.all = append(d.all, r)
		return r
	}
	// Two replicas of the release rolled out from, and the first programs.
	for range 2 {
		d.join(newReplica(d.from))
	}
	ctx, stopLoad := context.WithCancel(t.Context())
	var load sync.WaitGroup
	for w := range 3 {
		load.Go(func() { d.load(ctx, uint64(w)) })
	}
	next := 0
	uploadSome := func(k int) {
		for ; k > 0 && next < len(d.progs); k-- {
			d.add(d.progs[next])
			next++
		}
		d.waitCalls(60)
	}
	uploadSome(2)
	// Replace each replica by one of the release rolled out to, under load.
	for i := range 2 {
		d.retire(d.live[0])
		d.join(newReplica(d.to))
		uploadSome(2)
		t.Logf("step %d: %d calls so far", i+1, d.calls.Load())
	}
	stopLoad()
	load.Wait()
	for _, r := range d.live {
		r.stop(t)
	}

	t.Logf("%d Symbolize calls, %d failed, %d wrong addresses", d.calls.Load(), d.failed.Load(), d.wrong.Load())
	for _, ex := range d.examples {
		t.Log(ex)
	}
	if d.failed.Load() != 0 || d.wrong.Load() != 0 {
		t.Errorf("%d failed calls and %d wrong addresses, want none", d.failed.Load(), d.wrong.Load())
	}
	// Builds per program and format (release): at most one, and none by the release that
	// verified (and so built and stored) its upload.
	builds := map[string]map[string]int{earlier: {}, current: {}}
	for _, r := range d.all {
		for id, k := range r.indexBuilds(t) {
			for _, p := range d.progs {
				if p.hasID(id) {
					builds[r.release][p.name] += k
				}
			}
		}
	}
	for _, p := range d.progs {
		for _, rel := range []string{earlier, current} {
			max := 1
			if d.uploaded[p.name] == rel {
				max = 0
			}
			if got := builds[rel][p.name]; got > max {
				t.Errorf("%s: index built %d times by the %s release after upload (uploaded through the %s release), want at most %d",
					p.name, got, rel, d.uploaded[p.name], max)
			}
		}
	}
	t.Logf("index builds after upload: %v", builds)
	// Both formats' indexes are in the bucket side by side.
	var legacy, perFormat int
	for obj := range mc.ListObjects(t.Context(), d.bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		base := filepath.Base(obj.Key)
		switch {
		case strings.HasSuffix(base, ".index") && strings.Count(base, ".") == 1:
			legacy++
		case strings.HasSuffix(base, ".index"):
			perFormat++
		}
	}
	t.Logf("stored indexes: %d of the earlier release's layout, %d per format", legacy, perFormat)
	if legacy == 0 || perFormat == 0 {
		t.Errorf("stored indexes: %d of the earlier layout and %d per format, want both", legacy, perFormat)
	}
}

// join asks a replica about every program once, one at a time, before it takes load: the first
// replica of a release that needs an index builds it alone (the earlier release has no leases).
func (d *drill) join(r *replica) {
	d.mu.Lock()
	pool := slices.Clone(d.pool)
	d.mu.Unlock()
	for _, p := range pool {
		d.check(r, p, 0, len(p.addrs))
	}
	d.mu.Lock()
	d.live = append(d.live, r)
	d.mu.Unlock()
}

// retire takes a replica out of the rotation, lets its calls finish and stops it.
func (d *drill) retire(r *replica) {
	d.mu.Lock()
	d.live = slices.DeleteFunc(d.live, func(x *replica) bool { return x == r })
	d.mu.Unlock()
	r.inflight.Wait()
	r.stop(d.t)
}

// add uploads p through a live replica, asks every live replica about it once, one at a time,
// and puts it in the pool the load draws from.
func (d *drill) add(p *program) {
	d.mu.Lock()
	live := slices.Clone(d.live)
	d.mu.Unlock()
	via := live[len(d.uploaded)%len(live)]
	upload(d.t, d.env.bins[current], via.url, p)
	d.uploaded[p.name] = via.release
	for _, r := range live {
		d.check(r, p, 0, len(p.addrs))
	}
	d.mu.Lock()
	d.pool = append(d.pool, p)
	d.mu.Unlock()
}

// check asks r about p's addresses [from, to) and compares with r's release alone.
func (d *drill) check(r *replica, p *program, from, to int) {
	d.calls.Add(1)
	got, err := symbolize(d.t.Context(), r.url, p, from, to)
	if err != nil {
		d.failed.Add(1)
		d.note(fmt.Sprintf("%s (%s): %v", r.name, r.release, err))
		return
	}
	want := d.refs[r.release][p.name][from:to]
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			d.wrong.Add(1)
			d.note(fmt.Sprintf("%s (%s), %s at %#x: %+v, want %+v", r.name, r.release, p.name, p.addrs[from+i], got[i], want[i]))
		}
	}
}

func (d *drill) note(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.examples) < 10 {
		d.examples = append(d.examples, s)
	}
}

// load sends Symbolize calls for windows of 400 addresses of random programs to random live
// replicas until ctx ends.
func (d *drill) load(ctx context.Context, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 7))
	for ctx.Err() == nil {
		d.mu.Lock()
		if len(d.live) == 0 || len(d.pool) == 0 {
			d.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r := d.live[rnd.IntN(len(d.live))]
		p := d.pool[rnd.IntN(len(d.pool))]
		r.inflight.Add(1)
		d.mu.Unlock()
		from := rnd.IntN(len(p.addrs))
		to := min(len(p.addrs), from+400)
		d.check(r, p, from, to)
		r.inflight.Done()
	}
}

// waitCalls waits until n more calls were answered.
func (d *drill) waitCalls(n int64) {
	target := d.calls.Load() + n
	deadline := time.Now().Add(5 * time.Minute)
	for d.calls.Load() < target {
		if time.Now().After(deadline) {
			d.t.Fatalf("%d calls answered in 5 minutes, want %d", d.calls.Load()-target+n, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
