package retention

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/lease"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// countingStore counts the writes made through it.
type countingStore struct {
	store.Store
	puts, bytes atomic.Int64
}

func (c *countingStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	c.puts.Add(1)
	c.bytes.Add(size)
	return c.Store.Put(ctx, key, r, size)
}

// TestUsageCost measures what recording use costs a replica: a day of lookups of 2,000 build
// IDs (a hot set used all day, new builds deployed through the day), flushed every 5 minutes.
// Lookups cost no store write; a flush writes one object only when the day's set grew.
func TestUsageCost(t *testing.T) {
	folder, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &countingStore{Store: folder}
	c := &clock{}
	c.SetDay(10, 0)
	u := NewUsage(st, UsageOptions{Now: c.Now, Instance: "replica", Logger: quiet})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	const hot, fresh, lookupsPerMinute = 1500, 500, 2000
	lookups, flushes := 0, 0
	for minute := range 24 * 60 {
		c.SetDay(10, 0)
		c.Set(c.Now().Add(time.Duration(minute) * time.Minute))
		deployed := hot + fresh*minute/(24*60) // new builds appear through the day
		for range lookupsPerMinute {
			n := rng.IntN(deployed)
			u.Use(fmt.Sprintf("records/gnu/%040x", n), "/usr/bin/svc")
			lookups++
		}
		if minute%5 == 4 {
			if err := u.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			flushes++
		}
	}
	puts, written := st.puts.Load(), st.bytes.Load()
	t.Logf("one replica, one day: %d lookups, %d flushes, %d store writes (%.1f an hour), %d bytes written (%.0f KiB an hour); the day's object is %d bytes",
		lookups, flushes, puts, float64(puts)/24, written, float64(written)/24/1024, lastSize(t, st))
	// One write per flush at most, and the since marker once.
	if puts > int64(flushes)+1 {
		t.Errorf("%d store writes for %d flushes", puts, flushes)
	}
	// Once every build has been seen, flushes write nothing: the set no longer grows.
	before := st.puts.Load()
	for range 12 {
		for n := range hot {
			u.Use(fmt.Sprintf("records/gnu/%040x", n), "/usr/bin/svc")
		}
		if err := u.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if after := st.puts.Load(); after != before {
		t.Errorf("flushes of a set that did not grow wrote %d objects", after-before)
	}
	used, err := u.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(used) != hot+fresh-1 && len(used) != hot+fresh {
		t.Errorf("read back %d used records, want about %d", len(used), hot+fresh)
	}
}

func lastSize(t *testing.T, st store.Store) int64 {
	keys, err := st.List(context.Background(), daysPrefix)
	if err != nil || len(keys) == 0 {
		t.Fatalf("no day file: %v", err)
	}
	n, err := st.Size(context.Background(), keys[len(keys)-1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUsageDaysAndSummary checks that use survives folding into the summary, that the later
// day wins, and that records uploaded before use was recorded count as used when it began.
func TestUsageDaysAndSummary(t *testing.T) {
	st, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{}
	ctx := context.Background()
	a := NewUsage(st, UsageOptions{Now: c.Now, Instance: "a", CacheFor: -1, Logger: quiet})
	b := NewUsage(st, UsageOptions{Now: c.Now, Instance: "b", CacheFor: -1, Logger: quiet})
	c.SetDay(1, 9)
	a.Use("records/gnu/01", "/bin/one")
	b.Use("records/gnu/02", "")
	for _, u := range []*Usage{a, b} {
		if err := u.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.SetDay(5, 9)
	b.Use("records/gnu/01", "")
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c.SetDay(9, 9)
	n, err := a.Compact(ctx)
	if err != nil || n != 3 {
		t.Fatalf("compact folded %d files (%v), want 3", n, err)
	}
	if keys, _ := st.List(ctx, daysPrefix); len(keys) != 0 {
		t.Errorf("day files left after folding: %v", keys)
	}
	got, err := b.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e := got["records/gnu/01"]; e.Day != dayStart(5).Format(dayLayout) || e.Name != "one" {
		t.Errorf("records/gnu/01: %+v, want day 5 named one", e)
	}
	if e := got["records/gnu/02"]; e.Day != dayStart(1).Format(dayLayout) {
		t.Errorf("records/gnu/02: %+v, want day 1", e)
	}
	since, err := a.Since(ctx)
	if err != nil || !since.Equal(dayStart(1).Add(9*time.Hour)) {
		t.Errorf("since %v (%v), want day 1 09:00", since, err)
	}

	// A record uploaded before use was recorded counts as used when recording began.
	old := &catalog.Record{Key: "records/gnu/03", Current: &catalog.File{BuildID: catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: "03"},
		UploadedAt: dayStart(-400), Source: debuginfov1.UploadSource_UPLOAD_SOURCE_NODE}}
	p := Policy{UsedWithin: 30 * 24 * time.Hour}
	if d := Plan(p, []*catalog.Record{old}, got, since, dayStart(20)); !d[0].Keep {
		t.Errorf("a record uploaded before use was recorded was not kept 19 days after recording began: %s", d[0].Why)
	}
	if d := Plan(p, []*catalog.Record{old}, got, since, dayStart(40)); d[0].Keep {
		t.Errorf("a record unused since recording began 39 days ago was kept: %s", d[0].Why)
	}
	if d := Plan(Policy{}, []*catalog.Record{old}, got, since, dayStart(400)); !d[0].Keep {
		t.Error("no policy deleted a record")
	}

	// A usage object of a format this release does not know is not read as if it were.
	if err := st.Put(ctx, summaryKey, bytes.NewReader([]byte(`{"version":99}`)), 14); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Read(ctx); err == nil {
		t.Error("a summary of format version 99 was read")
	}
}

// s3Sweeps adapts leases on the bucket to the sweeper, as the server does.
type s3Sweeps struct{ m *lease.Manager }

func (s s3Sweeps) TryLock(ctx context.Context, key string) (func(), <-chan struct{}, bool, error) {
	l, err := s.m.TryAcquire(ctx, key)
	if err != nil || l == nil {
		return nil, nil, false, err
	}
	return l.Release, l.Lost(), true, nil
}

// TestSweepMinIOTwoReplicas runs the simulation on real MinIO: two replicas sweep at once,
// coordinated through lease objects in the bucket, while lookups and uploads run. One sweeps,
// the other finds the lease held and does nothing.
func TestSweepMinIOTwoReplicas(t *testing.T) {
	m := testsupport.StartMinIO(t)
	m.NewBucket(t, "debuginfo")
	newStore := func() *store.S3 {
		s, err := store.NewS3(store.S3Config{Endpoint: m.Endpoint(), Bucket: "debuginfo", Region: m.Region(),
			AccessKey: m.AccessKey(), SecretKey: m.SecretKey(), Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	locks := func(c *minio.Client) Locker {
		return s3Sweeps{lease.NewS3(c, "debuginfo", lease.Options{TTL: 10 * time.Second, Timeout: 5 * time.Second, Logger: quiet})}
	}
	st := newStore()
	s := newSimulation(t, st, newTemplate(t), nil)
	opt := simOptions{names: 4, days: 120, unnamed: 10, compacts: true}
	start := time.Now()
	s.run(t, opt)
	t.Logf("simulated %d days on MinIO: %d builds in %v", opt.days, len(s.builds), time.Since(start).Round(time.Millisecond))
	s.clock.SetDay(opt.days, 12)
	p := yearPolicy()
	keep := s.expected(p, s.clock.Now())

	// Replica B has its own store client, catalog and usage reader on the same bucket.
	stB := newStore()
	metaB := catalog.New(stB, catalog.Options{MaxSize: 64 << 20, TempDir: t.TempDir(), Now: s.clock.Now, Logger: quiet})
	usageB := NewUsage(stB, UsageOptions{Now: s.clock.Now, Instance: "replica-b", Logger: quiet})
	cB, _, _ := stB.Bucket()
	cA, _, _ := st.Bucket()
	here := newSymbolizer(s.meta, time.Hour)
	bDone := make(chan struct{})
	var bRes Result
	var bErr error
	var once sync.Once
	swA := NewSweeper(s.meta, s.usage[0], SweeperOptions{Policy: p, Now: s.clock.Now, Locks: locks(cA), Logger: quiet,
		Deleted: func() {
			here.Forget()
			// A holds the lease: B, started now, must find it held.
			once.Do(func() { <-bDone })
		}})
	swB := NewSweeper(metaB, usageB, SweeperOptions{Policy: p, Now: s.clock.Now, Locks: locks(cB), Logger: quiet})
	res := race(t, s, keep, here, func() (Result, error) {
		go func() {
			defer close(bDone)
			// B starts once A holds the lease (A's first deletion waits for B to finish).
			for {
				held, err := lease.NewS3(cB, "debuginfo", lease.Options{}).Held(context.Background(), leaseKey)
				if err != nil {
					bErr = err
					return
				}
				if held {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			bRes, bErr = swB.Sweep(context.Background())
		}()
		return swA.Sweep(context.Background())
	})
	if bErr != nil {
		t.Fatal(bErr)
	}
	if bRes.Skipped == "" || bRes.Deleted != 0 {
		t.Errorf("replica B swept while A held the lease: %+v", bRes)
	}
	t.Logf("replica A: kept %d, deleted %d, changed %d, in %v; replica B: %s",
		res.Kept, res.Deleted, res.Changed, res.Took.Round(time.Millisecond), bRes.Skipped)
	if res.Deleted == 0 {
		t.Error("replica A deleted nothing")
	}
	for _, d := range res.Plan {
		if id := d.BuildID[len("gnu:"):]; !d.Keep && keep[id] {
			t.Errorf("the plan deletes kept build %s", id)
		}
	}
	// The lease is released: B sweeps now, and finds nothing more to delete.
	again, err := swB.Sweep(context.Background())
	if err != nil || again.Skipped != "" || again.Deleted != 0 {
		t.Errorf("a second sweep after the first: %+v, %v; want nothing deleted", again, err)
	}
	if left := leftovers(t, st, s.meta); len(left) > 0 {
		t.Errorf("%d objects of deleted records are left, e.g. %v", len(left), left[:min(5, len(left))])
	}
}

// TestRetentionTurnedOnLate checks that a policy turned on over a store whose use was never
// recorded deletes nothing by the used rule until its window has passed since the first sweep.
func TestRetentionTurnedOnLate(t *testing.T) {
	st, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := newSimulation(t, st, newTemplate(t), nil)
	for range 3 {
		s.add(t, "svc", debuginfov1.UploadSource_UPLOAD_SOURCE_NODE)
	}
	p := Policy{UsedWithin: 30 * 24 * time.Hour}
	sw := NewSweeper(s.meta, s.usage[0], SweeperOptions{Policy: p, Now: s.clock.Now, Logger: quiet})
	s.clock.SetDay(400, 0)
	res, err := sw.Sweep(context.Background())
	if err != nil || res.Deleted != 0 || res.Kept != 3 {
		t.Fatalf("first sweep over a store with no use recorded: %+v, %v; want everything kept", res, err)
	}
	s.clock.SetDay(429, 0)
	if res, err := sw.Sweep(context.Background()); err != nil || res.Deleted != 0 {
		t.Fatalf("sweep 29 days later: %+v, %v; want everything kept", res, err)
	}
	s.clock.SetDay(431, 0)
	if res, err := sw.Sweep(context.Background()); err != nil || res.Deleted != 3 {
		t.Fatalf("sweep 31 days later: %+v, %v; want the 3 unused records deleted", res, err)
	}
}

// redisSweeps adapts leases in Redis to the sweeper, as the server does with --redis-url.
type redisSweeps struct{ m *lease.Manager }

func (s redisSweeps) TryLock(ctx context.Context, key string) (func(), <-chan struct{}, bool, error) {
	l, err := s.m.TryAcquire(ctx, key)
	if err != nil || l == nil {
		return nil, nil, false, err
	}
	return l.Release, l.Lost(), true, nil
}

// TestSweepRedisLease runs two sweepers at once with their lease in a real Redis: while one
// sweeps, the other finds the lease held and deletes nothing; when Redis is gone, neither
// sweeps.
func TestSweepRedisLease(t *testing.T) {
	rs := testsupport.StartRedis(t)
	newLocks := func() Locker {
		c := redis.NewClient(&redis.Options{Addr: rs.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		return redisSweeps{lease.New(c, lease.Options{TTL: 10 * time.Second, Logger: quiet})}
	}
	st, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := newSimulation(t, st, newTemplate(t), nil)
	s.run(t, simOptions{names: 2, days: 60, compacts: true})
	s.clock.SetDay(60, 12)
	p := yearPolicy()
	keep := s.expected(p, s.clock.Now())
	lockA, lockB := newLocks(), newLocks()
	swB := NewSweeper(s.meta, s.usage[1], SweeperOptions{Policy: p, Now: s.clock.Now, Locks: lockB, Logger: quiet})
	var bRes Result
	var bErr error
	var once sync.Once
	swA := NewSweeper(s.meta, s.usage[0], SweeperOptions{Policy: p, Now: s.clock.Now, Locks: lockA, Logger: quiet,
		Deleted: func() { once.Do(func() { bRes, bErr = swB.Sweep(context.Background()) }) }})
	res, err := swA.Sweep(context.Background())
	if err != nil || bErr != nil {
		t.Fatal(err, bErr)
	}
	if res.Deleted != len(s.builds)-len(keep) || res.Deleted == 0 {
		t.Errorf("replica A deleted %d; the policy deletes %d of %d", res.Deleted, len(s.builds)-len(keep), len(s.builds))
	}
	if bRes.Skipped != "another replica is sweeping" || bRes.Deleted != 0 {
		t.Errorf("replica B during A's sweep: %+v", bRes)
	}
	rs.Stop()
	if res, err := swB.Sweep(context.Background()); err != nil || res.Skipped == "" {
		t.Errorf("a sweep without Redis: %+v, %v; want it skipped", res, err)
	}
}

// TestOrphanObjects checks that a sweep deletes an index stored after its record was deleted
// (a lookup that read the record before), and nothing of a record that exists.
func TestOrphanObjects(t *testing.T) {
	st, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := newSimulation(t, st, newTemplate(t), nil)
	gone, kept := s.add(t, "svc", debuginfov1.UploadSource_UPLOAD_SOURCE_NODE), s.add(t, "svc", debuginfov1.UploadSource_UPLOAD_SOURCE_NODE)
	ctx := context.Background()
	if ok, err := s.meta.DeleteIf(ctx, gone.key, func(*catalog.Record) bool { return true }); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	late := gone.key + "/0123.index"
	if err := st.Put(ctx, late, bytes.NewReader([]byte("late")), 4); err != nil {
		t.Fatal(err)
	}
	before, err := st.List(ctx, kept.key+"/")
	if err != nil {
		t.Fatal(err)
	}
	sw := NewSweeper(s.meta, s.usage[0], SweeperOptions{Policy: Policy{KeepBuilds: 1}, DryRun: true, Now: s.clock.Now, Logger: quiet})
	if res, err := sw.Sweep(ctx); err != nil || res.Orphans != 1 {
		t.Fatalf("dry run: %+v, %v; want 1 orphan object listed", res, err)
	}
	if _, err := st.Size(ctx, late); err != nil {
		t.Fatalf("a dry run deleted %s: %v", late, err)
	}
	sw = NewSweeper(s.meta, s.usage[0], SweeperOptions{Policy: Policy{KeepBuilds: 1}, Now: s.clock.Now, Logger: quiet})
	if res, err := sw.Sweep(ctx); err != nil || res.Orphans != 1 || res.Deleted != 0 {
		t.Fatalf("sweep: %+v, %v; want 1 orphan object deleted and no record", res, err)
	}
	if _, err := st.Size(ctx, late); err == nil {
		t.Errorf("%s is left", late)
	}
	after, err := st.List(ctx, kept.key+"/")
	if err != nil || len(after) != len(before) {
		t.Errorf("objects of the kept record: %v before, %v after (%v)", before, after, err)
	}
}
