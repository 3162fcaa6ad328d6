// Package retention enforces what an operator keeps of the debuginfo store: everything used in
// the last N days, the last K builds of each binary name, everything uploaded from CI in the
// last M days. It records when each record was last used without a store write per lookup
// (Usage), decides what a policy keeps (Plan) and deletes the rest (Sweeper), one replica at a
// time. The design, and why a lookup or an upload racing the sweep never sees half a record,
// is docs/design/0010-retention.md.
package retention

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/profsym/profsym/services/symbolizer/internal/periodic"
	"github.com/profsym/profsym/services/symbolizer/internal/replica"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// Object layout of the usage record, beside the records:
//
//	usage/since.json               when this store first recorded use (a record uploaded
//	                               before counts as used then)
//	usage/days/<YYYY-MM-DD>/<instance>.json
//	                               what one replica used that day (UTC): record keys and the
//	                               names lookups gave them, rewritten while the set grows
//	usage/summary.json             the last day each record was used, folded from the day
//	                               files of ended days by the sweeper (which then removes them)
const (
	usagePrefix = "usage/"
	daysPrefix  = usagePrefix + "days/"
	sinceKey    = usagePrefix + "since.json"
	summaryKey  = usagePrefix + "summary.json"
	dayLayout   = "2006-01-02"
)

// maxUsageBytes bounds one usage object read back: a million record keys of ~80 bytes.
const maxUsageBytes = 128 << 20

// dayFile is one replica's usage of one day.
type dayFile struct {
	Version  int               `json:"version"`
	Instance string            `json:"instance"`
	Day      string            `json:"day"`
	Used     map[string]string `json:"used"` // record key -> name a lookup gave ("" for none)
}

// summary is the folded usage of ended days.
type summary struct {
	Version int              `json:"version"`
	Through string           `json:"through"` // the last day folded in
	Last    map[string]Entry `json:"last"`
}

type since struct {
	Version int       `json:"version"`
	Since   time.Time `json:"since"`
}

// usageVersion is the format of the usage objects; a reader skips (and logs) objects of a
// version it does not know rather than misread them.
const usageVersion = 1

// Entry is what is known of one record's use.
type Entry struct {
	Day  string `json:"day"`            // the last day (UTC, YYYY-MM-DD) it was used
	Name string `json:"name,omitempty"` // the name a lookup last gave it
}

// LastUsed returns the end of the entry's day: used at some time that day, at the latest then.
func (e Entry) LastUsed() time.Time {
	t, err := time.Parse(dayLayout, e.Day)
	if err != nil {
		return time.Time{}
	}
	return t.Add(24*time.Hour - time.Nanosecond)
}

// UsageOptions configures a Usage recorder.
type UsageOptions struct {
	Logger     *slog.Logger
	Now        func() time.Time
	Registerer prometheus.Registerer
	// Instance names this replica's day files; a server gives its coverage shard the same
	// name (default: a new replica.New()).
	Instance string
	// CacheFor is how long Read reuses the merged usage it read (default 1m).
	CacheFor time.Duration
}

// Usage records which records are used. Use costs a map insert in memory; Flush writes each
// day's set of this replica as one object, only when it gained a key since the last write.
type Usage struct {
	st       store.Store
	opt      UsageOptions
	instance string

	mu    sync.Mutex
	days  map[string]map[string]string // day -> record key -> name
	dirty map[string]bool              // days with keys not yet written
	since bool                         // since.json is known to exist

	cacheMu sync.Mutex
	cached  map[string]Entry
	cacheAt time.Time

	writes     prometheus.Counter
	writeBytes prometheus.Counter
}

// NewUsage returns a recorder writing to st.
func NewUsage(st store.Store, opt UsageOptions) *Usage {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.CacheFor == 0 {
		opt.CacheFor = time.Minute
	}
	inst := opt.Instance
	if inst == "" {
		inst = replica.New()
	}
	u := &Usage{st: st, opt: opt, instance: inst, days: map[string]map[string]string{}, dirty: map[string]bool{},
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "symbolizer_usage_writes_total",
			Help: "Objects this replica wrote to record which records were used (one per day and flush interval at most, only when the day's set grew).",
		}),
		writeBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "symbolizer_usage_write_bytes_total",
			Help: "Bytes of the usage objects this replica wrote.",
		}),
	}
	if opt.Registerer != nil {
		opt.Registerer.MustRegister(u.writes, u.writeBytes)
	}
	return u
}

// Use records that the record at key was used now; name is the binary's name as the lookup
// gave it (a module's file name; "" for none). Only the base name is kept.
func (u *Usage) Use(key, name string) {
	if name != "" {
		name = path.Base(name)
		if len(name) > 255 {
			name = name[:255]
		}
	}
	day := u.opt.Now().UTC().Format(dayLayout)
	u.mu.Lock()
	defer u.mu.Unlock()
	set := u.days[day]
	if set == nil {
		set = map[string]string{}
		u.days[day] = set
	}
	if old, ok := set[key]; ok && (old == name || name == "") {
		return
	}
	set[key] = name
	u.dirty[day] = true
}

// Flush writes the day sets that grew since the last write, and drops from memory the sets of
// ended days once written. A failed write stays due for the next flush.
func (u *Usage) Flush(ctx context.Context) error {
	today := u.opt.Now().UTC().Format(dayLayout)
	u.mu.Lock()
	type due struct {
		day  string
		used map[string]string
	}
	var work []due
	for day := range u.dirty {
		used := make(map[string]string, len(u.days[day]))
		for k, v := range u.days[day] {
			used[k] = v
		}
		work = append(work, due{day, used})
	}
	u.dirty = map[string]bool{}
	needSince := !u.since && len(work) > 0
	u.mu.Unlock()
	sort.Slice(work, func(i, j int) bool { return work[i].day < work[j].day })

	var errs []error
	if needSince {
		if err := u.ensureSince(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(work) > 0 {
		// What Read cached lacks what is written now.
		u.cacheMu.Lock()
		u.cached = nil
		u.cacheMu.Unlock()
	}
	for _, w := range work {
		err := u.writeJSON(ctx, daysPrefix+w.day+"/"+u.instance+".json", dayFile{Version: usageVersion, Instance: u.instance, Day: w.day, Used: w.used})
		u.mu.Lock()
		if err != nil {
			u.dirty[w.day] = true
			errs = append(errs, err)
		} else if w.day < today && !u.dirty[w.day] {
			delete(u.days, w.day)
		}
		u.mu.Unlock()
	}
	return errors.Join(errs...)
}

// ensureSince writes since.json unless it exists.
func (u *Usage) ensureSince(ctx context.Context) error {
	if _, err := u.st.Size(ctx, sinceKey); err == nil {
		u.mu.Lock()
		u.since = true
		u.mu.Unlock()
		return nil
	} else if !errors.Is(err, store.ErrNotExist) {
		return fmt.Errorf("usage: %w", err)
	}
	// Two replicas may both write it within one flush interval: either time serves.
	if err := u.writeJSON(ctx, sinceKey, since{Version: usageVersion, Since: u.opt.Now().UTC()}); err != nil {
		return err
	}
	u.mu.Lock()
	u.since = true
	u.mu.Unlock()
	return nil
}

func (u *Usage) writeJSON(ctx context.Context, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("usage: encode %s: %w", key, err)
	}
	if err := u.st.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("usage: write %s: %w", key, err)
	}
	u.writes.Inc()
	u.writeBytes.Add(float64(len(data)))
	return nil
}

// Run flushes every interval until ctx ends, then once more.
func (u *Usage) Run(ctx context.Context, interval time.Duration) {
	periodic.Flush(ctx, interval, u.opt.Logger, "usage", u.Flush)
}

func readJSON(ctx context.Context, st store.Store, key string, v any) error {
	rc, size, err := st.Open(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	if size > maxUsageBytes {
		return fmt.Errorf("%s: %d bytes, over the %d-byte bound", key, size, maxUsageBytes)
	}
	data, err := io.ReadAll(io.LimitReader(rc, size))
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %s: %w", key, err)
	}
	return nil
}

// Since returns when the store first recorded use (zero when it never did).
func (u *Usage) Since(ctx context.Context) (time.Time, error) {
	var s since
	err := readJSON(ctx, u.st, sinceKey, &s)
	switch {
	case errors.Is(err, store.ErrNotExist):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("usage: %w", err)
	case s.Version != usageVersion:
		// A format this release does not know: the earliest possible answer would let
		// retention delete records it has no use record of; the latest keeps them.
		u.opt.Logger.Warn("usage start written by another format version; counting every record as used now", "version", s.Version)
		return u.opt.Now().UTC(), nil
	}
	return s.Since, nil
}

// Read returns the last use of every record that has one, merged over every replica's day
// files, the summary and this replica's sets not yet written; it reuses what it read for
// CacheFor.
func (u *Usage) Read(ctx context.Context) (map[string]Entry, error) {
	u.cacheMu.Lock()
	defer u.cacheMu.Unlock()
	now := u.opt.Now()
	if u.cached != nil && now.Sub(u.cacheAt) < u.opt.CacheFor {
		return u.cached, nil
	}
	m, _, err := u.read(ctx)
	if err != nil {
		return nil, err
	}
	u.cached, u.cacheAt = m, now
	return m, nil
}

// read merges the summary and every day file; dayKeys lists the day files read, by day.
func (u *Usage) read(ctx context.Context) (map[string]Entry, map[string][]string, error) {
	out := map[string]Entry{}
	add := func(key string, e Entry) {
		o, ok := out[key]
		switch {
		case !ok || e.Day > o.Day:
			if e.Name == "" {
				e.Name = o.Name
			}
			out[key] = e
		case e.Day == o.Day && o.Name == "":
			o.Name = e.Name
			out[key] = o
		}
	}
	var sum summary
	switch err := readJSON(ctx, u.st, summaryKey, &sum); {
	case errors.Is(err, store.ErrNotExist):
	case err != nil:
		return nil, nil, fmt.Errorf("usage: %w", err)
	case sum.Version != usageVersion:
		return nil, nil, fmt.Errorf("usage: %s has format version %d, this release reads %d: not read (retention would take its records as unused)", summaryKey, sum.Version, usageVersion)
	default:
		for k, e := range sum.Last {
			add(k, e)
		}
	}
	keys, err := u.st.List(ctx, daysPrefix)
	if err != nil {
		return nil, nil, fmt.Errorf("usage: %w", err)
	}
	byDay := map[string][]string{}
	for _, k := range keys {
		day, _, ok := strings.Cut(strings.TrimPrefix(k, daysPrefix), "/")
		if !ok || !strings.HasSuffix(k, ".json") {
			continue
		}
		var f dayFile
		if err := readJSON(ctx, u.st, k, &f); err != nil {
			if errors.Is(err, store.ErrNotExist) {
				continue // folded and removed meanwhile
			}
			return nil, nil, fmt.Errorf("usage: %w", err)
		}
		if f.Version != usageVersion || f.Day != day {
			return nil, nil, fmt.Errorf("usage: %s has format version %d (this release reads %d) or names day %q: not read", k, f.Version, usageVersion, f.Day)
		}
		for rk, name := range f.Used {
			add(rk, Entry{Day: day, Name: name})
		}
		byDay[day] = append(byDay[day], k)
	}
	u.mu.Lock()
	for day, set := range u.days {
		for rk, name := range set {
			add(rk, Entry{Day: day, Name: name})
		}
	}
	u.mu.Unlock()
	return out, byDay, nil
}

// Compact folds the day files of days that ended more than a day ago into the summary and
// removes them, so that reading usage costs a few objects however long the store has
// recorded it. Only one replica may compact at a time (the sweeper's lease).
func (u *Usage) Compact(ctx context.Context) (folded int, err error) {
	all, byDay, err := u.read(ctx)
	if err != nil {
		return 0, err
	}
	cutoff := u.opt.Now().UTC().Add(-48 * time.Hour).Format(dayLayout)
	var old []string
	through := ""
	for day, keys := range byDay {
		if day <= cutoff {
			old = append(old, keys...)
			through = max(through, day)
		}
	}
	if len(old) == 0 {
		return 0, nil
	}
	// Everything read goes into the summary, recent days included: they are read again from
	// their day files until those are folded, and the later day wins a merge.
	if err := u.writeJSON(ctx, summaryKey, summary{Version: usageVersion, Through: through, Last: all}); err != nil {
		return 0, err
	}
	for _, k := range old {
		if err := u.st.Delete(ctx, k); err != nil {
			return folded, fmt.Errorf("usage: remove folded %s: %w", k, err)
		}
		folded++
	}
	u.cacheMu.Lock()
	u.cached = nil
	u.cacheMu.Unlock()
	return folded, nil
}
