package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
)

// Locker hands out the sweep's lease across the replicas sharing the store.
type Locker interface {
	// TryLock takes key when no replica holds it (ok false when another does). lost is closed
	// when the lease expired before it was renewed: another replica may sweep from then on.
	TryLock(ctx context.Context, key string) (unlock func(), lost <-chan struct{}, ok bool, err error)
}

// leaseKey is the lease one sweeper holds while it sweeps.
const leaseKey = "retention/sweep"

// SweeperOptions configures a Sweeper.
type SweeperOptions struct {
	Policy Policy
	// DryRun logs and counts what the policy would delete, and deletes nothing.
	DryRun bool
	// Locks makes one replica sweep at a time; nil for a store no other replica shares.
	Locks  Locker
	Logger *slog.Logger
	Now    func() time.Time
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Deleted is told after each record deleted (to drop cached resolutions).
	Deleted func()
}

// Sweeper deletes what the policy does not keep.
type Sweeper struct {
	meta  *catalog.Catalog
	usage *Usage
	opt   SweeperOptions
	mu    sync.Mutex // one sweep at a time in this process

	records *prometheus.CounterVec
	bytes   *prometheus.CounterVec
	kept    prometheus.Gauge
	took    prometheus.Gauge
}

// NewSweeper returns a sweeper of meta's records, deciding with usage.
func NewSweeper(meta *catalog.Catalog, usage *Usage, opt SweeperOptions) *Sweeper {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	s := &Sweeper{meta: meta, usage: usage, opt: opt,
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "symbolizer_retention_records_total",
			Help: "Records the retention sweep deleted (result deleted), would have deleted in a dry run (dry_run), left because they changed since the plan or another replica held them (changed), or failed to delete (failed).",
		}, []string{"result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "symbolizer_retention_bytes_total",
			Help: "Bytes of the files of the records counted by symbolizer_retention_records_total, by the same result (indexes and string tables not included).",
		}, []string{"result"}),
		kept: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "symbolizer_retention_kept_records",
			Help: "Records the last sweep of this replica kept.",
		}),
		took: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "symbolizer_retention_sweep_seconds",
			Help: "How long the last sweep of this replica took.",
		}),
	}
	if opt.Registerer != nil {
		opt.Registerer.MustRegister(s.records, s.bytes, s.kept, s.took)
	}
	return s
}

// Result says what a sweep did.
type Result struct {
	// Skipped is why nothing was swept ("" when it was).
	Skipped string
	Kept    int
	// Deleted counts the records deleted (in a dry run: that would be).
	Deleted      int
	DeletedBytes uint64
	// Changed counts records the plan would delete that changed before their turn.
	Changed int
	Failed  int
	// Orphans counts objects deleted (in a dry run: that would be) whose record was gone.
	Orphans int
	// FoldedUsage counts usage day files folded into the summary.
	FoldedUsage int
	Took        time.Duration
	Plan        []Decision
}

// Plan reads the records and their use and decides of each, without the lease and without
// deleting: what a dry run lists.
func (s *Sweeper) Plan(ctx context.Context) ([]Decision, error) {
	recs, err := s.meta.Records(ctx)
	if err != nil {
		return nil, fmt.Errorf("retention: list records: %w", err)
	}
	used, _, err := s.usage.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	since, err := s.usage.Since(ctx)
	if err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	now := s.opt.Now()
	if since.IsZero() {
		since = now // nothing recorded use yet: every record counts as used now
	}
	return Plan(s.opt.Policy, recs, used, since, now), nil
}

// Sweep takes the sweep's lease, folds old usage, plans and deletes what the policy does not
// keep. Another replica holding the lease makes it a no-op (Skipped says so), as does a lease
// that cannot be asked for: two sweepers at once would be safe (each deletion re-checks its
// record under the record's lock) but twice the work.
func (s *Sweeper) Sweep(ctx context.Context) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	var res Result
	if s.opt.Locks != nil {
		unlock, lost, ok, err := s.opt.Locks.TryLock(ctx, leaseKey)
		if err != nil {
			res.Skipped = "the sweep lease cannot be asked for: " + err.Error()
			return res, nil
		}
		if !ok {
			res.Skipped = "another replica is sweeping"
			return res, nil
		}
		defer unlock()
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-lost:
				s.opt.Logger.Warn("retention: sweep lease lost; stopping the sweep")
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	// Use is recorded from now on, if it was not before: a record uploaded earlier counts as
	// used now, so a policy turned on with the release that records use deletes nothing by
	// the used rule for its whole window.
	if err := s.usage.ensureSince(ctx); err != nil {
		return res, fmt.Errorf("retention: %w", err)
	}
	folded, err := s.usage.Compact(ctx)
	if err != nil {
		return res, fmt.Errorf("retention: fold usage: %w", err)
	}
	res.FoldedUsage = folded
	if !s.opt.Policy.Enabled() {
		res.Took = time.Since(start)
		return res, nil
	}
	plan, err := s.Plan(ctx)
	if err != nil {
		return res, err
	}
	res.Plan = plan
	for _, d := range plan {
		if d.Keep {
			res.Kept++
			continue
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		attrs := []any{"record", d.Key, "build_id", d.BuildID, "name", d.Name, "type", d.Type, "source", d.Source,
			"size", d.Size, "uploaded_at", d.UploadedAt.UTC(), "last_used", d.LastUsed.UTC().Format(dayLayout), "why", d.Why}
		if s.opt.DryRun {
			s.opt.Logger.Info("retention: would delete (dry run)", attrs...)
			s.count("dry_run", d.Size)
			res.Deleted++
			res.DeletedBytes += d.Size
			continue
		}
		deleted, err := s.meta.DeleteIf(ctx, d.Key, func(r *catalog.Record) bool {
			// An upload started since the plan, or a file replaced, wins.
			f := r.Current
			return r.Pending == nil && f.SHA256 == d.SHA256 && f.UploadedAt.Equal(d.UploadedAt)
		})
		switch {
		case err != nil && ctx.Err() != nil:
			return res, ctx.Err()
		case err != nil:
			s.opt.Logger.Warn("retention: delete failed", append(attrs, "err", err)...)
			s.count("failed", d.Size)
			res.Failed++
		case !deleted:
			s.opt.Logger.Info("retention: record changed since the plan; kept", attrs...)
			s.count("changed", d.Size)
			res.Changed++
		default:
			s.opt.Logger.Info("retention: deleted", attrs...)
			s.count("deleted", d.Size)
			res.Deleted++
			res.DeletedBytes += d.Size
			if s.opt.Deleted != nil {
				s.opt.Deleted()
			}
		}
	}
	// Objects of records deleted (now or before) that a lookup stored after the deletion.
	orphans, err := s.meta.SweepOrphans(ctx, s.opt.DryRun)
	res.Orphans = orphans
	if err != nil {
		s.opt.Logger.Warn("retention: delete objects whose record is gone", "err", err)
		res.Failed++
	}
	res.Took = time.Since(start)
	s.kept.Set(float64(res.Kept))
	s.took.Set(res.Took.Seconds())
	s.opt.Logger.Info("retention: sweep done", "policy", s.opt.Policy.String(), "dry_run", s.opt.DryRun, "kept", res.Kept,
		"deleted", res.Deleted, "deleted_bytes", res.DeletedBytes, "changed", res.Changed, "failed", res.Failed,
		"orphan_objects", res.Orphans, "usage_files_folded", res.FoldedUsage, "took", res.Took)
	if res.Failed > 0 {
		return res, errors.New("retention: some deletions failed (logged); the next sweep tries again")
	}
	return res, nil
}

func (s *Sweeper) count(result string, size uint64) {
	s.records.WithLabelValues(result).Inc()
	s.bytes.WithLabelValues(result).Add(float64(size))
}

// Run sweeps at start and then every interval until ctx ends. With no policy it only folds
// usage (under the same lease), which keeps reading it cheap.
func (s *Sweeper) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		res, err := s.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.opt.Logger.Warn("retention sweep", "err", err)
		case res.Skipped != "":
			s.opt.Logger.Debug("retention sweep skipped", "why", res.Skipped)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
