package retention

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/indexcache"
	"github.com/profsym/profsym/services/symbolizer/internal/resultcache"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
	"github.com/profsym/profsym/services/symbolizer/internal/symbolizeapi"
)

const prog = `
#include <stdio.h>
__attribute__((noinline)) int work(int n) { int s = 0; for (int i = 0; i < n; i++) s += i * n; return s; }
int main(int argc, char **argv) { printf("%d\n", work(argc)); return 0; }
`

// clock is a fake clock shared by every part of a simulation.
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func dayStart(d int) time.Time       { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, d) }
func dayOf(t time.Time) int          { return int(t.Sub(dayStart(0)) / (24 * time.Hour)) }
func (c *clock) SetDay(d int, h int) { c.Set(dayStart(d).Add(time.Duration(h) * time.Hour)) }

// template is a small ELF with DWARF, from which every build of the simulation is made by
// writing another GNU build ID into its note (and, for a second file of one build ID, another
// byte into its .comment).
type template struct {
	data    []byte
	idOff   int // offset of the build ID's bytes
	idLen   int
	comment int // offset of a byte of .comment
	addr    uint64
}

func newTemplate(t testing.TB) *template {
	path := testsupport.CompileC(t, prog, "-g", "-O1", "-Wl,--build-id=sha1")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tp := &template{data: data}
	note := f.Section(".note.gnu.build-id")
	cm := f.Section(".comment")
	if note == nil || cm == nil {
		t.Fatal("template has no build ID note or no .comment")
	}
	namesz := binary.LittleEndian.Uint32(data[note.Offset:])
	tp.idLen = int(binary.LittleEndian.Uint32(data[note.Offset+4:]))
	tp.idOff = int(note.Offset) + 12 + int((namesz+3)&^3)
	tp.comment = int(cm.Offset) + 1
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == "work" {
			tp.addr = s.Value + 4
		}
	}
	if tp.addr == 0 {
		t.Fatal("no symbol work in the template")
	}
	return tp
}

// build returns the bytes of build n (variant 1: same build ID, other content) and its ID.
func (tp *template) build(n, variant int) ([]byte, string) {
	data := bytes.Clone(tp.data)
	sum := sha1.Sum([]byte(fmt.Sprint("build ", n)))
	copy(data[tp.idOff:tp.idOff+tp.idLen], sum[:])
	data[tp.comment] ^= byte(variant)
	return data, hex.EncodeToString(sum[:tp.idLen])
}

// build is the simulation's truth about one build.
type build struct {
	n        int
	id       string
	key      string
	name     string
	source   debuginfov1.UploadSource
	uploaded time.Time
	lastUsed int // day, -1: never
	pinned   bool
}

func upload(ctx context.Context, meta *catalog.Catalog, data []byte, id, name string, src debuginfov1.UploadSource) (*catalog.Record, error) {
	sum := sha256.Sum256(data)
	gid := catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: id}
	var up *catalog.Upload
	var err error
	for range 50 {
		up, err = meta.Initiate(ctx, catalog.Desc{BuildID: gid, Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE,
			SHA256: hex.EncodeToString(sum[:]), Size: uint64(len(data)), Source: src, Name: name})
		var de *catalog.DecisionError
		if errors.As(err, &de) && de.Reason == debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_UPLOAD_IN_PROGRESS {
			time.Sleep(20 * time.Millisecond) // a sweeper holds the record: retry as clients do
			continue
		}
		break
	}
	if err != nil {
		return nil, fmt.Errorf("initiate %s: %w", id, err)
	}
	if err := meta.Store().Put(ctx, up.Object(), bytes.NewReader(data), int64(len(data))); err != nil {
		return nil, err
	}
	return meta.Finish(ctx, gid, up.ID)
}

// simulation is a year of uploads and uses.
type simulation struct {
	clock  *clock
	st     store.Store
	meta   *catalog.Catalog
	usage  [2]*Usage // two replicas recording use
	tp     *template
	builds []*build
	next   int
}

type simOptions struct {
	names    int // binary names, each built every few days
	days     int
	unnamed  int // builds fetched from debuginfod without a name, spread over the year
	compacts bool
}

func newSimulation(t testing.TB, st store.Store, tp *template, locker catalog.Locker) *simulation {
	s := &simulation{clock: &clock{}, st: st, tp: tp}
	s.clock.SetDay(0, 0)
	s.meta = catalog.New(st, catalog.Options{MaxSize: 64 << 20, TempDir: t.TempDir(), Now: s.clock.Now, Locker: locker, Logger: quiet})
	for i := range s.usage {
		s.usage[i] = NewUsage(st, UsageOptions{Now: s.clock.Now, Instance: fmt.Sprint("replica-", i), CacheFor: -1})
	}
	return s
}

func (s *simulation) add(t testing.TB, name string, src debuginfov1.UploadSource) *build {
	t.Helper()
	n := s.next
	s.next++
	data, id := s.tp.build(n, 0)
	rec, err := upload(context.Background(), s.meta, data, id, name, src)
	if err != nil {
		t.Fatalf("upload build %d: %v", n, err)
	}
	b := &build{n: n, id: id, key: rec.Key, name: name, source: src, uploaded: s.clock.Now(), lastUsed: -1}
	s.builds = append(s.builds, b)
	return b
}

func (s *simulation) use(b *build, day int) {
	name := ""
	if b.name != "" {
		name = "/usr/bin/" + b.name
	}
	s.usage[day%2].Use(b.key, name)
	b.lastUsed = day
}

// run simulates opt.days days: each name gets a build every 2 to 7 days (from CI for even
// names, from nodes for odd ones); its latest two builds are used every day; every 15th build
// is pinned (a deployment that stays) and used every 5 days all year; unnamed debuginfod
// builds are used for 3 days after they arrive. Both replicas write their use every day.
func (s *simulation) run(t testing.TB, opt simOptions) {
	rng := rand.New(rand.NewPCG(1, 2))
	period := make([]int, opt.names)
	byName := make([][]*build, opt.names)
	for i := range period {
		period[i] = 2 + rng.IntN(6)
	}
	var unnamed []*build
	for d := range opt.days {
		s.clock.SetDay(d, 10)
		for i := range opt.names {
			if (d+i)%period[i] == 0 {
				src := debuginfov1.UploadSource_UPLOAD_SOURCE_CI
				if i%2 == 1 {
					src = debuginfov1.UploadSource_UPLOAD_SOURCE_NODE
				}
				b := s.add(t, fmt.Sprintf("svc-%02d", i), src)
				b.pinned = b.n%15 == 0
				byName[i] = append(byName[i], b)
			}
		}
		if opt.unnamed > 0 && d%(opt.days/opt.unnamed+1) == 0 {
			unnamed = append(unnamed, s.add(t, "", debuginfov1.UploadSource_UPLOAD_SOURCE_DEBUGINFOD))
		}
		s.clock.SetDay(d, 16)
		for _, bs := range byName {
			for _, b := range bs[max(0, len(bs)-2):] {
				s.use(b, d)
			}
			for _, b := range bs {
				if b.pinned && d%5 == 0 {
					s.use(b, d)
				}
			}
		}
		for _, b := range unnamed {
			if dayOf(b.uploaded)+3 >= d {
				s.use(b, d)
			}
		}
		s.clock.SetDay(d, 23)
		for _, u := range s.usage {
			if err := u.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if opt.compacts && d%7 == 6 {
			if _, err := s.usage[d%2].Compact(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// expected is what policy p keeps at now, from the simulation's own truth.
func (s *simulation) expected(p Policy, now time.Time) map[string]bool {
	keep := map[string]bool{}
	byName := map[string][]*build{}
	for _, b := range s.builds {
		last := b.uploaded
		if b.lastUsed >= 0 {
			if end := dayStart(b.lastUsed + 1).Add(-time.Nanosecond); end.After(last) {
				last = end
			}
		}
		if p.UsedWithin > 0 && !last.Before(now.Add(-p.UsedWithin)) {
			keep[b.id] = true
		}
		if p.CIWithin > 0 && b.source == debuginfov1.UploadSource_UPLOAD_SOURCE_CI && !b.uploaded.Before(now.Add(-p.CIWithin)) {
			keep[b.id] = true
		}
		if b.name != "" {
			byName[b.name] = append(byName[b.name], b)
		}
	}
	for _, bs := range byName {
		sort.Slice(bs, func(i, j int) bool { return bs[i].uploaded.After(bs[j].uploaded) })
		for _, b := range bs[:min(p.KeepBuilds, len(bs))] {
			keep[b.id] = true
		}
	}
	return keep
}

// lookup symbolizes one address of build id and returns the module's status.
func lookup(ctx context.Context, sym *symbolizeapi.Service, id string, addr uint64) (symbolizerv1.ModuleStatus, error) {
	resp, err := sym.Symbolize(ctx, connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{
		GnuBuildId: id, Addresses: []uint64{addr}, Filename: "/usr/bin/x"}}}))
	if err != nil {
		return 0, err
	}
	r := resp.Msg.GetModules()[0]
	switch r.GetStatus() {
	case symbolizerv1.ModuleStatus_MODULE_STATUS_OK:
		if len(r.GetFrameCounts()) != 1 || r.GetFrameCounts()[0] == 0 {
			return 0, fmt.Errorf("%s: OK without a frame", id)
		}
	case symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND:
	default:
		return r.GetStatus(), fmt.Errorf("%s: %v: %s", id, r.GetStatus(), r.GetMessage())
	}
	return r.GetStatus(), nil
}

func newSymbolizer(meta *catalog.Catalog, resolveTTL time.Duration) *symbolizeapi.Service {
	// An index cache of one byte keeps no index: every lookup reads the stored objects, the
	// path a deletion can race.
	return symbolizeapi.New(meta, indexcache.New(1), resultcache.New(resultcache.Options{}), nil, nil,
		symbolizeapi.Options{ResolveTTL: resolveTTL, TempDir: os.TempDir()})
}

// race runs lookups and uploads against the store while sweep runs, then checks that nothing
// kept was deleted and nothing deleted is answered. It returns the sweep's result.
// here is the sweeping replica's symbolizer, whose resolutions the sweeper drops on each
// deletion (as the server wires it); another replica's age out after its ResolveTTL.
func race(t *testing.T, s *simulation, keep map[string]bool, here *symbolizeapi.Service, sweep func() (Result, error)) Result {
	t.Helper()
	ctx := context.Background()
	other := newSymbolizer(s.meta, 50*time.Millisecond)
	var doomedNode []*build
	for _, b := range s.builds {
		if !keep[b.id] && b.source == debuginfov1.UploadSource_UPLOAD_SOURCE_NODE {
			doomedNode = append(doomedNode, b)
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	var answers [2]map[symbolizerv1.ModuleStatus]int
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	var reuploaded sync.Map // build ID -> true: uploaded again during the sweep
	for w, sym := range []*symbolizeapi.Service{here, other} {
		answers[w] = map[symbolizerv1.ModuleStatus]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-done:
					return
				default:
				}
				b := s.builds[rng.IntN(len(s.builds))]
				st, err := lookup(ctx, sym, b.id, s.tp.addr)
				if err != nil {
					report("lookup %s: %v", b.id, err)
					continue
				}
				mu.Lock()
				answers[w][st]++
				mu.Unlock()
				switch {
				case st == symbolizerv1.ModuleStatus_MODULE_STATUS_OK:
				case st == symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND && !keep[b.id]:
				default:
					report("build %d (%s, kept %v) answered %v during the sweep", b.n, b.id, keep[b.id], st)
				}
			}
		}()
	}
	// Uploads while the sweep runs: new builds, and builds the plan deletes uploaded again
	// (from CI, another file of the same build ID), which must win.
	var fresh []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if i%2 == 0 && i/2 < len(doomedNode) {
				b := doomedNode[len(doomedNode)-1-i/2]
				data, id := s.tp.build(b.n, 1)
				reuploaded.Store(id, true)
				if _, err := upload(ctx, s.meta, data, id, b.name, debuginfov1.UploadSource_UPLOAD_SOURCE_CI); err != nil {
					report("upload build %d again: %v", b.n, err)
				}
				// The upload lands in the sweeping replica's process, which forgets what it
				// resolved, as its upload API does: a "nothing stored" it remembered from
				// after the deletion (for a fifth of its hour-long ResolveTTL) would hide it.
				here.Forget()
				continue
			}
			data, id := s.tp.build(1_000_000+i, 0)
			if _, err := upload(ctx, s.meta, data, id, "fresh", debuginfov1.UploadSource_UPLOAD_SOURCE_CI); err != nil {
				report("upload fresh build: %v", err)
				continue
			}
			here.Forget()
			mu.Lock()
			fresh = append(fresh, id)
			mu.Unlock()
		}
	}()
	res, err := sweep()
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("answers during the sweep: this replica %v, the other %v; %d new uploads", answers[0], answers[1], len(fresh))

	// After the sweep (and the other replica's ResolveTTL): every kept, new or re-uploaded
	// build is found whole, and every other one is not found, on both replicas.
	time.Sleep(100 * time.Millisecond)
	check := func(id string, want symbolizerv1.ModuleStatus, what string) {
		for i, sym := range []*symbolizeapi.Service{here, other} {
			st, err := lookup(ctx, sym, id, s.tp.addr)
			if err != nil || st != want {
				t.Errorf("%s %s on replica %d: %v %v, want %v", what, id, i, st, err, want)
			}
		}
	}
	for _, b := range s.builds {
		_, again := reuploaded.Load(b.id)
		switch {
		case keep[b.id] || again:
			check(b.id, symbolizerv1.ModuleStatus_MODULE_STATUS_OK, "kept build")
		default:
			check(b.id, symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND, "deleted build")
		}
	}
	for _, id := range fresh {
		check(id, symbolizerv1.ModuleStatus_MODULE_STATUS_OK, "build uploaded during the sweep")
	}
	return res
}

// leftovers lists the objects under records/ and ids/ that belong to no record left.
func leftovers(t *testing.T, st store.Store, meta *catalog.Catalog) []string {
	t.Helper()
	ctx := context.Background()
	recs, err := meta.Records(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, r := range recs {
		live[r.Key] = true
	}
	keys, err := st.List(ctx, "records/")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		parts := strings.SplitN(k, "/", 4)
		if len(parts) < 4 || !live[strings.Join(parts[:3], "/")] {
			out = append(out, k)
		}
	}
	return out
}

var quiet = slog.New(slog.DiscardHandler)

// reuploaded reports whether the plan saw build id as uploaded again (from CI, at now) during
// the sweep.
func reuploaded(plan []Decision, id string, now time.Time) bool {
	for _, d := range plan {
		if strings.TrimPrefix(d.BuildID, "gnu:") == id && d.Keep && d.Source == debuginfov1.UploadSource_UPLOAD_SOURCE_CI && d.UploadedAt.Equal(now) {
			return true
		}
	}
	return false
}

func yearPolicy() Policy {
	return Policy{UsedWithin: 30 * 24 * time.Hour, KeepBuilds: 3, CIWithin: 90 * 24 * time.Hour}
}

// TestSimulatedYear uploads a year of builds on a folder store under a fake clock, records
// their use, then sweeps with lookups and uploads running: the store shrinks to exactly what
// the policy keeps, a racing lookup sees a record whole or not at all, and a racing upload wins.
func TestSimulatedYear(t *testing.T) {
	st, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opt := simOptions{names: 4, days: 365, unnamed: 20, compacts: true}
	switch {
	case os.Getenv("PROFSYM_RETENTION_YEAR") == "full":
		// Thousands of build IDs: about 5 minutes on 2 cores.
		opt = simOptions{names: 24, days: 365, unnamed: 100, compacts: true}
	case testing.Short():
		opt = simOptions{names: 4, days: 120, unnamed: 10, compacts: true}
	}
	s := newSimulation(t, st, newTemplate(t), nil)
	start := time.Now()
	s.run(t, opt)
	t.Logf("simulated %d days: %d builds in %v", opt.days, len(s.builds), time.Since(start).Round(time.Millisecond))

	s.clock.SetDay(opt.days, 12)
	p := yearPolicy()
	keep := s.expected(p, s.clock.Now())
	var dryLog bytes.Buffer
	sw := NewSweeper(s.meta, s.usage[0], SweeperOptions{Policy: p, DryRun: true, Now: s.clock.Now, Logger: slog.New(slog.NewJSONHandler(&dryLog, nil))})
	dry, err := sw.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Each deletion's log line: last_used is the day recorded, never after today.
	today := s.clock.Now().UTC().Format(dayLayout)
	lines := 0
	for line := range strings.Lines(dryLog.String()) {
		var l struct {
			Msg      string `json:"msg"`
			LastUsed string `json:"last_used"`
			Why      string `json:"why"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.Msg != "retention: would delete (dry run)" {
			continue
		}
		lines++
		if _, err := time.Parse(dayLayout, l.LastUsed); err != nil || l.LastUsed > today {
			t.Errorf("a deletion's last_used %q: want a day (YYYY-MM-DD) no later than %s", l.LastUsed, today)
		}
		if l.Why == "" {
			t.Errorf("a deletion without a reason: %s", line)
		}
	}
	if lines != dry.Deleted {
		t.Errorf("%d deletions logged, %d counted", lines, dry.Deleted)
	}
	t.Logf("dry run (nothing else running): plan of %d records in %v", len(dry.Plan), dry.Took.Round(time.Millisecond))
	if dry.Deleted != len(s.builds)-len(keep) || dry.Kept != len(keep) {
		t.Fatalf("dry run: kept %d and would delete %d; the policy keeps %d of %d", dry.Kept, dry.Deleted, len(keep), len(s.builds))
	}
	for _, d := range dry.Plan {
		id := strings.TrimPrefix(d.BuildID, "gnu:")
		if d.Keep != keep[id] {
			t.Errorf("plan: %s (%s, %s) keep=%v (%s), want %v", id, d.Name, d.Source, d.Keep, d.Why, keep[id])
		}
	}
	if recs, _ := s.meta.Records(context.Background()); len(recs) != len(s.builds) {
		t.Fatalf("a dry run deleted: %d records of %d left", len(recs), len(s.builds))
	}

	sw = NewSweeper(s.meta, s.usage[0], SweeperOptions{Policy: p, Now: s.clock.Now, Logger: quiet})
	here := newSymbolizer(s.meta, time.Hour)
	sw.opt.Deleted = here.Forget
	res := race(t, s, keep, here, func() (Result, error) { return sw.Sweep(context.Background()) })
	t.Logf("sweep of %d records: kept %d, deleted %d (%d bytes), changed since the plan %d, in %v",
		len(s.builds), res.Kept, res.Deleted, res.DeletedBytes, res.Changed, res.Took.Round(time.Millisecond))
	// The plan deletes no build the policy keeps, and every build it does not keep unless an
	// upload of it again landed before the plan was made.
	planned := map[string]bool{}
	for _, d := range res.Plan {
		id := strings.TrimPrefix(d.BuildID, "gnu:")
		planned[id] = !d.Keep
		if !d.Keep && keep[id] {
			t.Errorf("the plan deletes kept build %s (%s): %s", id, d.Name, d.Why)
		}
	}
	for _, b := range s.builds {
		if !keep[b.id] && !planned[b.id] && !reuploaded(res.Plan, b.id, s.clock.Now()) {
			t.Errorf("build %s (%s) is not kept by the policy but the plan keeps it", b.id, b.name)
		}
	}
	if res.Kept+res.Deleted+res.Changed != len(res.Plan) || res.Failed != 0 {
		t.Errorf("sweep counts %+v do not add up to the plan's %d records", res, len(res.Plan))
	}
	if left := leftovers(t, st, s.meta); len(left) > 0 {
		t.Errorf("%d objects of deleted records are left, e.g. %v", len(left), left[:min(5, len(left))])
	}
}
