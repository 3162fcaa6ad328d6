// Package coverage records, per binary that Symbolize is asked about, how many frames were
// asked and resolved, the fidelity reached and why frames stayed addresses: what an operator
// needs to know to decide what to upload. Each replica keeps its own tally in memory and
// writes it to the store (coverage/<instance>.json) about once a minute; a reader merges every
// replica's file with its own live tally, so replicas agree without talking to each other.
package coverage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/services/symbolizer/internal/periodic"
	"github.com/profsym/profsym/services/symbolizer/internal/replica"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// prefix is where replicas write their tallies, beside the records.
const prefix = "coverage/"

// maxFilenames bounds the executable names kept per binary.
const maxFilenames = 8

// Entry is the tally of one binary.
type Entry struct {
	Type      debuginfov1.BuildIDType      `json:"type"`
	ID        string                       `json:"id"`
	Asked     uint64                       `json:"asked"`
	Resolved  uint64                       `json:"resolved"`
	Fidelity  debuginfov1.CoverageFidelity `json:"fidelity"`
	Reason    debuginfov1.CoverageReason   `json:"reason"`
	ReasonAt  time.Time                    `json:"reason_at"` // when Reason was last set: the latest wins a merge
	FirstSeen time.Time                    `json:"first_seen"`
	LastSeen  time.Time                    `json:"last_seen"`
	Filenames []string                     `json:"filenames,omitempty"`
	// Missing is what the latest answer found missing of the companions the binary's DWARF
	// needs, MissingAt when that answer was given: the latest wins a merge, an empty list
	// included, so a replica that found the companion stored clears what another one saw
	// missing before.
	Missing   []Companion `json:"missing,omitempty"`
	MissingAt time.Time   `json:"missing_at,omitzero"`
}

// Companion is a companion file (a dwz supplementary file, a DWARF package) an answer found
// missing: what to upload, and the ID to upload it under.
type Companion struct {
	Kind debuginfov1.CompanionKind `json:"kind"`
	ID   string                    `json:"id"`
}

// Unresolved is the number of frames that stayed addresses.
func (e *Entry) Unresolved() uint64 { return e.Asked - min(e.Resolved, e.Asked) }

// NeedsUpload reports whether something can be uploaded for the binary: frames stayed
// addresses, or a companion is missing (frames resolved, at a lower fidelity than it gives).
func (e *Entry) NeedsUpload() bool { return e.Unresolved() > 0 || len(e.Missing) > 0 }

// settle drops a missing-companion reason that a later answer, which found every companion
// stored, made stale. Merged entries need it: the reason and the companions may come from
// different replicas, and the replica that saw the companion stored may never have seen it
// missing, so it had no reason of its own to clear.
func (e *Entry) settle() {
	if e.Reason == debuginfov1.CoverageReason_COVERAGE_REASON_COMPANION_MISSING && len(e.Missing) == 0 {
		e.Reason = debuginfov1.CoverageReason_COVERAGE_REASON_UNSPECIFIED
	}
}

// Proto renders the entry for the API.
func (e *Entry) Proto() *debuginfov1.Coverage {
	return &debuginfov1.Coverage{
		BuildId: e.ID, BuildIdType: e.Type, FramesAsked: e.Asked, FramesResolved: e.Resolved,
		Fidelity: e.Fidelity, Reason: e.Reason, FirstSeen: timestamppb.New(e.FirstSeen),
		LastSeen: timestamppb.New(e.LastSeen), Filenames: e.Filenames, MissingCompanions: companionsProto(e.Missing),
	}
}

func companionsProto(cs []Companion) []*debuginfov1.Companion {
	var out []*debuginfov1.Companion
	for _, c := range cs {
		out = append(out, &debuginfov1.Companion{Kind: c.Kind, Id: c.ID, State: debuginfov1.CompanionState_COMPANION_STATE_MISSING})
	}
	return out
}

// missingOf lists the companions a module's answer found missing.
func missingOf(res *symbolizerv1.ModuleResult) []Companion {
	var out []Companion
	for _, c := range res.GetCompanions() {
		if c.GetState() == debuginfov1.CompanionState_COMPANION_STATE_MISSING {
			out = append(out, Companion{Kind: c.GetKind(), ID: c.GetId()})
		}
	}
	return out
}

// clone copies e, so that merging into the copy changes nothing of e.
func (e *Entry) clone() *Entry {
	c := *e
	c.Filenames = slices.Clone(e.Filenames)
	c.Missing = slices.Clone(e.Missing)
	return &c
}

// merge adds o's tally to e's.
func (e *Entry) merge(o *Entry) {
	e.Asked += o.Asked
	e.Resolved += o.Resolved
	e.Fidelity = max(e.Fidelity, o.Fidelity)
	if o.Reason != debuginfov1.CoverageReason_COVERAGE_REASON_UNSPECIFIED && !o.ReasonAt.Before(e.ReasonAt) {
		e.Reason, e.ReasonAt = o.Reason, o.ReasonAt
	}
	if e.FirstSeen.IsZero() || (!o.FirstSeen.IsZero() && o.FirstSeen.Before(e.FirstSeen)) {
		e.FirstSeen = o.FirstSeen
	}
	if o.LastSeen.After(e.LastSeen) {
		e.LastSeen = o.LastSeen
	}
	if !o.MissingAt.IsZero() && !o.MissingAt.Before(e.MissingAt) {
		e.Missing, e.MissingAt = slices.Clone(o.Missing), o.MissingAt
	}
	for _, f := range o.Filenames {
		e.addFilename(f)
	}
}

func (e *Entry) addFilename(f string) {
	if f == "" || len(e.Filenames) >= maxFilenames || slices.Contains(e.Filenames, f) {
		return
	}
	e.Filenames = append(e.Filenames, f)
}

type key struct {
	typ debuginfov1.BuildIDType
	id  string
}

// shard is one replica's file.
type shard struct {
	// Version is the shard's format (shardVersion; 0 in files written before it was kept,
	// which are of version 1).
	Version   int       `json:"version,omitempty"`
	Instance  string    `json:"instance"`
	UpdatedAt time.Time `json:"updated_at"`
	Entries   []*Entry  `json:"entries"`
}

// shardVersion is the format of coverage files. Fields are only ever added within a version;
// a reader skips (and logs) a file of a later version rather than misread its tallies: each
// replica rewrites its own file every interval, so after an upgrade the later release's files
// are read by that release only, and an earlier release's files, still readable, age out.
const shardVersion = 1

// Options configures a Recorder.
type Options struct {
	// Instance names this replica's shard (default: a new replica.New()).
	Instance string
	// MaxEntries bounds the binaries tallied in memory; beyond it the least recently seen
	// is dropped. 0 means 100,000.
	MaxEntries int
	// Retention is how long a replica's file counts after its last write (a replica that
	// went away); older files are removed. 0 means 30 days.
	Retention time.Duration
	// Registerer receives the gauges; nil registers none.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time
}

// Recorder tallies Symbolize answers.
type Recorder struct {
	st       store.Store
	opt      Options
	instance string
	unres    *prometheus.GaugeVec

	mu      sync.Mutex
	entries map[key]*Entry
	dirty   bool
}

// New returns a Recorder writing to st under the replica's name (opt.Instance, default a new
// replica.New(): the host name and a random suffix, so a restarted replica starts a new file
// and the old one keeps counting until it ages out; a server gives its usage files the same).
func New(st store.Store, opt Options) *Recorder {
	if opt.MaxEntries == 0 {
		opt.MaxEntries = 100000
	}
	if opt.Retention == 0 {
		opt.Retention = 30 * 24 * time.Hour
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	inst := opt.Instance
	if inst == "" {
		inst = replica.New()
	}
	r := &Recorder{st: st, opt: opt, instance: inst, entries: map[key]*Entry{}}
	if opt.Registerer != nil {
		r.unres = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "symbolizer_coverage_unresolved_ratio",
			Help: "Share of the frames Symbolize was asked about (all replicas, within the retention) that stayed addresses, by the reason of each binary's latest unresolved frames.",
		}, []string{"reason"})
		opt.Registerer.MustRegister(r.unres)
	}
	return r
}

// reasonOf maps a module's answer to why its unresolved frames stayed addresses, or its
// resolved ones fell short of what a missing companion gives.
func reasonOf(res *symbolizerv1.ModuleResult, missing []Companion) debuginfov1.CoverageReason {
	switch res.GetStatus() {
	case symbolizerv1.ModuleStatus_MODULE_STATUS_OK:
		if len(missing) > 0 {
			return debuginfov1.CoverageReason_COVERAGE_REASON_COMPANION_MISSING
		}
		return debuginfov1.CoverageReason_COVERAGE_REASON_NO_SYMBOLS
	case symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND:
		return debuginfov1.CoverageReason_COVERAGE_REASON_NO_DEBUGINFO
	case symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_DEBUGINFO:
		return debuginfov1.CoverageReason_COVERAGE_REASON_INVALID_FILE
	case symbolizerv1.ModuleStatus_MODULE_STATUS_EXECUTABLE_NEEDED:
		return debuginfov1.CoverageReason_COVERAGE_REASON_EXECUTABLE_NEEDED
	case symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_MAPPING:
		return debuginfov1.CoverageReason_COVERAGE_REASON_INVALID_MAPPING
	}
	return debuginfov1.CoverageReason_COVERAGE_REASON_UPSTREAM_MISS
}

func fidelityOf(f symbolizerv1.Fidelity) debuginfov1.CoverageFidelity {
	switch f {
	case symbolizerv1.Fidelity_FIDELITY_SYMBOLS:
		return debuginfov1.CoverageFidelity_COVERAGE_FIDELITY_SYMBOLS
	case symbolizerv1.Fidelity_FIDELITY_LINES:
		return debuginfov1.CoverageFidelity_COVERAGE_FIDELITY_LINES
	case symbolizerv1.Fidelity_FIDELITY_FULL:
		return debuginfov1.CoverageFidelity_COVERAGE_FIDELITY_FULL
	}
	return debuginfov1.CoverageFidelity_COVERAGE_FIDELITY_UNSPECIFIED
}

// Record tallies one module's answer. The binary is named by the first ID the module carries
// in the order GNU, Go, htlhash (the order Symbolize resolves them in).
func (r *Recorder) Record(mod *symbolizerv1.Module, res *symbolizerv1.ModuleResult) {
	k := key{debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, mod.GetGnuBuildId()}
	switch {
	case k.id != "":
	case mod.GetGoBuildId() != "":
		k = key{debuginfov1.BuildIDType_BUILD_ID_TYPE_GO, mod.GetGoBuildId()}
	case mod.GetHtlhash() != "":
		k = key{debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH, mod.GetHtlhash()}
	default:
		return
	}
	asked := uint64(len(mod.GetAddresses()))
	var resolved uint64
	if res.GetStatus() == symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		for _, n := range res.GetFrameCounts() {
			if n > 0 {
				resolved++
			}
		}
	}
	now := r.opt.Now().UTC()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entries[k]
	if e == nil {
		if len(r.entries) >= r.opt.MaxEntries {
			r.dropOldest()
		}
		e = &Entry{Type: k.typ, ID: k.id, FirstSeen: now}
		r.entries[k] = e
	}
	e.Asked += asked
	e.Resolved += resolved
	e.LastSeen = now
	if resolved > 0 {
		e.Fidelity = max(e.Fidelity, fidelityOf(res.GetFidelity()))
	}
	// Only an answer that read the file knows its companions; any other (not found, invalid)
	// says nothing is missing beside a file it could not use, and clears the list all the same:
	// the entry describes the latest answer.
	var missing []Companion
	if res.GetStatus() == symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		missing = missingOf(res)
	}
	e.Missing, e.MissingAt = missing, now
	if resolved < asked || len(missing) > 0 {
		e.Reason, e.ReasonAt = reasonOf(res, missing), now
	}
	e.settle()
	e.addFilename(mod.GetFilename())
	r.dirty = true
}

// dropOldest removes the least recently seen entry; r.mu is held. Linear, and rare: only
// when more distinct binaries were seen than MaxEntries.
func (r *Recorder) dropOldest() {
	var oldest key
	var at time.Time
	first := true
	for k, e := range r.entries {
		if first || e.LastSeen.Before(at) {
			oldest, at, first = k, e.LastSeen, false
		}
	}
	delete(r.entries, oldest)
}

func (r *Recorder) snapshot() []*Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Entry, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, e.clone())
	}
	return out
}

// Flush writes this replica's tally to the store when it changed, removes files of replicas
// gone for longer than the retention, and updates the gauges.
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	dirty := r.dirty
	r.dirty = false
	r.mu.Unlock()
	if dirty {
		data, err := json.Marshal(shard{Version: shardVersion, Instance: r.instance, UpdatedAt: r.opt.Now().UTC(), Entries: r.snapshot()})
		if err != nil {
			return fmt.Errorf("coverage: encode: %w", err)
		}
		if err := r.st.Put(ctx, r.object(), bytes.NewReader(data), int64(len(data))); err != nil {
			r.mu.Lock()
			r.dirty = true
			r.mu.Unlock()
			return fmt.Errorf("coverage: write %s: %w", r.object(), err)
		}
	}
	all, err := r.merged(ctx, true)
	if err != nil {
		return err
	}
	r.setGauges(all)
	return nil
}

func (r *Recorder) object() string { return prefix + r.instance + ".json" }

// Run flushes every interval until ctx ends, then once more.
func (r *Recorder) Run(ctx context.Context, interval time.Duration) {
	periodic.Flush(ctx, interval, r.opt.Logger, "coverage", r.Flush)
}

// maxShardBytes bounds one replica's file: 100,000 entries of a few hundred bytes.
const maxShardBytes = 256 << 20

// merged reads every replica's file but this one's, adds the live tally, and merges by binary.
// With sweep it also removes files older than the retention.
func (r *Recorder) merged(ctx context.Context, sweep bool) ([]*Entry, error) {
	keys, err := r.st.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("coverage: list: %w", err)
	}
	byKey := map[key]*Entry{}
	add := func(e *Entry) {
		k := key{e.Type, e.ID}
		if m := byKey[k]; m != nil {
			m.merge(e)
			return
		}
		byKey[k] = e.clone()
	}
	cutoff := r.opt.Now().Add(-r.opt.Retention)
	for _, k := range keys {
		if k == r.object() || !strings.HasSuffix(k, ".json") {
			continue
		}
		sh, err := r.read(ctx, k)
		if errors.Is(err, store.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			// One unreadable file must not hide every other replica's tally.
			r.opt.Logger.Warn("unreadable coverage file skipped", "object", k, "err", err)
			continue
		}
		if sh.UpdatedAt.Before(cutoff) {
			if sweep {
				if err := r.st.Delete(ctx, k); err != nil {
					r.opt.Logger.Warn("remove expired coverage file", "object", k, "err", err)
				}
			}
			continue
		}
		for _, e := range sh.Entries {
			if e != nil && e.ID != "" {
				add(e)
			}
		}
	}
	for _, e := range r.snapshot() {
		add(e)
	}
	out := make([]*Entry, 0, len(byKey))
	for _, e := range byKey {
		e.settle()
		out = append(out, e)
	}
	return out, nil
}

func (r *Recorder) read(ctx context.Context, k string) (*shard, error) {
	rc, size, err := r.st.Open(ctx, k)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > maxShardBytes {
		return nil, fmt.Errorf("%d bytes, over the %d-byte bound", size, maxShardBytes)
	}
	data, err := io.ReadAll(io.LimitReader(rc, size))
	if err != nil {
		return nil, err
	}
	var sh shard
	if err := json.Unmarshal(data, &sh); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if sh.Version > shardVersion {
		return nil, fmt.Errorf("format version %d, this release reads up to %d", sh.Version, shardVersion)
	}
	return &sh, nil
}

func (r *Recorder) setGauges(all []*Entry) {
	if r.unres == nil {
		return
	}
	var asked uint64
	byReason := map[debuginfov1.CoverageReason]uint64{}
	for _, e := range all {
		asked += e.Asked
		if u := e.Unresolved(); u > 0 {
			byReason[e.Reason] += u
		}
	}
	for v, name := range debuginfov1.CoverageReason_name {
		if v == 0 {
			continue
		}
		ratio := 0.0
		if asked > 0 {
			ratio = float64(byReason[debuginfov1.CoverageReason(v)]) / float64(asked)
		}
		r.unres.WithLabelValues(strings.ToLower(strings.TrimPrefix(name, "COVERAGE_REASON_"))).Set(ratio)
	}
}

// Filter selects entries for List.
type Filter struct {
	Reason         debuginfov1.CoverageReason // unspecified: any
	Since          time.Time                  // zero: any
	UnresolvedOnly bool                       // frames stayed addresses, or a companion is missing (NeedsUpload)
	Limit          int                        // 0: every entry
}

// List returns the merged entries that pass f, the most unresolved frames first (then the most
// recently seen), and how many passed before the limit.
func (r *Recorder) List(ctx context.Context, f Filter) ([]*Entry, int, error) {
	all, err := r.merged(ctx, false)
	if err != nil {
		return nil, 0, err
	}
	out := all[:0]
	for _, e := range all {
		switch {
		case f.Reason != debuginfov1.CoverageReason_COVERAGE_REASON_UNSPECIFIED && (e.Reason != f.Reason || !e.NeedsUpload()):
		case !f.Since.IsZero() && e.LastSeen.Before(f.Since):
		case f.UnresolvedOnly && !e.NeedsUpload():
		default:
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Unresolved() != b.Unresolved() {
			return a.Unresolved() > b.Unresolved()
		}
		if !a.LastSeen.Equal(b.LastSeen) {
			return a.LastSeen.After(b.LastSeen)
		}
		return a.ID < b.ID
	})
	total := len(out)
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, total, nil
}

// Lookup returns the merged entry of one binary, or nil.
func (r *Recorder) Lookup(ctx context.Context, typ debuginfov1.BuildIDType, id string) (*Entry, error) {
	all, err := r.merged(ctx, false)
	if err != nil {
		return nil, err
	}
	for _, e := range all {
		if e.Type == typ && e.ID == id {
			return e, nil
		}
	}
	return nil, nil
}
