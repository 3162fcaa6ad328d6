package coverage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

func mod(gnu string, n int, file string) *symbolizerv1.Module {
	return &symbolizerv1.Module{GnuBuildId: gnu, Addresses: make([]uint64, n), Filename: file}
}

func answer(st symbolizerv1.ModuleStatus, counts ...uint32) *symbolizerv1.ModuleResult {
	return &symbolizerv1.ModuleResult{Status: st, FrameCounts: counts, Fidelity: symbolizerv1.Fidelity_FIDELITY_LINES}
}

func TestRecordAndMerge(t *testing.T) {
	st, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a := New(st, Options{Now: clock, Instance: "a"})
	b := New(st, Options{Now: clock, Instance: "b"})
	ctx := context.Background()
	ok, missing := symbolizerv1.ModuleStatus_MODULE_STATUS_OK, symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND

	a.Record(mod("aa", 3, "/bin/x"), answer(ok, 1, 0, 2))
	now = now.Add(time.Minute)
	b.Record(mod("aa", 2, "/bin/y"), answer(missing, 0, 0))                       // a later outcome: its reason wins
	b.Record(&symbolizerv1.Module{Addresses: make([]uint64, 4)}, answer(missing)) // no ID: not tallied
	for _, r := range []*Recorder{a, b} {
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, total, err := a.List(ctx, Filter{})
	if err != nil || total != 1 {
		t.Fatalf("List = %v, %d, %v", got, total, err)
	}
	e := got[0]
	if e.Asked != 5 || e.Resolved != 2 || e.Unresolved() != 3 || e.Fidelity != debuginfov1.CoverageFidelity_COVERAGE_FIDELITY_LINES ||
		e.Reason != debuginfov1.CoverageReason_COVERAGE_REASON_NO_DEBUGINFO || len(e.Filenames) != 2 || !e.LastSeen.Equal(now) {
		t.Fatalf("merged = %+v", e)
	}
	for _, f := range []Filter{
		{Reason: debuginfov1.CoverageReason_COVERAGE_REASON_INVALID_FILE},
		{Since: now.Add(time.Second)},
	} {
		if got, _, _ := a.List(ctx, f); len(got) != 0 {
			t.Errorf("filter %+v kept %d entries", f, len(got))
		}
	}

	// A replica gone for longer than the retention no longer counts, and its file is removed.
	now = now.Add(31 * 24 * time.Hour)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, _ = a.List(ctx, Filter{})
	if len(got) != 1 || got[0].Asked != 3 {
		t.Fatalf("after retention: %+v", got)
	}
	keys, _ := st.List(ctx, prefix)
	if len(keys) != 1 {
		t.Fatalf("coverage files after retention: %v", keys)
	}

	// An unreadable file is skipped, not fatal.
	bad := []byte("{not json")
	if err := st.Put(ctx, prefix+"broken.json", bytes.NewReader(bad), int64(len(bad))); err != nil {
		t.Fatal(err)
	}
	if got, _, err := a.List(ctx, Filter{}); err != nil || len(got) != 1 {
		t.Fatalf("with a broken file: %v, %v", got, err)
	}
}

func TestMaxEntries(t *testing.T) {
	st, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	r := New(st, Options{MaxEntries: 2, Now: func() time.Time { now = now.Add(time.Second); return now }})
	for _, id := range []string{"a1", "b2", "a1", "c3"} {
		r.Record(mod(id, 1, ""), answer(symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND, 0))
	}
	got, _, err := r.List(context.Background(), Filter{})
	if err != nil || len(got) != 2 {
		t.Fatalf("%v, %v", got, err)
	}
	for _, e := range got {
		if e.ID == "b2" {
			t.Fatal("the least recently seen binary was kept")
		}
	}
}

// withCompanions is an answer of status OK whose file needs the companions given.
func withCompanions(counts []uint32, cs ...*debuginfov1.Companion) *symbolizerv1.ModuleResult {
	return &symbolizerv1.ModuleResult{Status: symbolizerv1.ModuleStatus_MODULE_STATUS_OK, FrameCounts: counts,
		Fidelity: symbolizerv1.Fidelity_FIDELITY_SYMBOLS, Companions: cs}
}

func companion(kind debuginfov1.CompanionKind, id string, missing bool) *debuginfov1.Companion {
	st := debuginfov1.CompanionState_COMPANION_STATE_AVAILABLE
	if missing {
		st = debuginfov1.CompanionState_COMPANION_STATE_MISSING
	}
	return &debuginfov1.Companion{Kind: kind, Id: id, State: st}
}

// TestMissingCompanions: an answer that found a companion missing lists it with the reason
// that says so, even when every frame resolved (at reduced fidelity); the latest answer of any
// replica decides, so a later answer that found it stored clears the list and the reason,
// whichever replica gave either.
func TestMissingCompanions(t *testing.T) {
	sup, dwp := debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY, debuginfov1.CompanionKind_COMPANION_KIND_DWARF_PACKAGE
	ok := symbolizerv1.ModuleStatus_MODULE_STATUS_OK
	type step struct {
		replica int // 0 or 1
		res     *symbolizerv1.ModuleResult
	}
	for _, c := range []struct {
		name        string
		steps       []step
		wantMissing []Companion
		wantReason  debuginfov1.CoverageReason
		wantListed  bool // by UnresolvedOnly and by the reason filter
	}{
		{"supplementary missing, every frame resolved",
			[]step{{0, withCompanions([]uint32{1, 1}, companion(sup, "5a", true))}},
			[]Companion{{sup, "5a"}}, debuginfov1.CoverageReason_COVERAGE_REASON_COMPANION_MISSING, true},
		{"package missing, a frame unresolved",
			[]step{{0, withCompanions([]uint32{1, 0}, companion(dwp, "aa", true))}},
			[]Companion{{dwp, "aa"}}, debuginfov1.CoverageReason_COVERAGE_REASON_COMPANION_MISSING, true},
		{"only the missing one of two is listed",
			[]step{{0, withCompanions([]uint32{1}, companion(sup, "5a", false), companion(dwp, "aa", true))}},
			[]Companion{{dwp, "aa"}}, debuginfov1.CoverageReason_COVERAGE_REASON_COMPANION_MISSING, true},
		{"stored later, answered by the same replica",
			[]step{{0, withCompanions([]uint32{1}, companion(sup, "5a", true))}, {0, withCompanions([]uint32{1}, companion(sup, "5a", false))}},
			nil, debuginfov1.CoverageReason_COVERAGE_REASON_UNSPECIFIED, false},
		{"stored later, answered by the other replica",
			[]step{{0, withCompanions([]uint32{1}, companion(sup, "5a", true))}, {1, withCompanions([]uint32{1}, companion(sup, "5a", false))}},
			nil, debuginfov1.CoverageReason_COVERAGE_REASON_UNSPECIFIED, false},
		{"missing again after an answer that had it, on the other replica",
			[]step{{1, withCompanions([]uint32{1}, companion(sup, "5a", false))}, {0, withCompanions([]uint32{1}, companion(sup, "5a", true))}},
			[]Companion{{sup, "5a"}}, debuginfov1.CoverageReason_COVERAGE_REASON_COMPANION_MISSING, true},
		{"stored later, but other frames stay unresolved",
			[]step{{0, withCompanions([]uint32{0}, companion(sup, "5a", true))}, {1, withCompanions([]uint32{0}, companion(sup, "5a", false))}},
			nil, debuginfov1.CoverageReason_COVERAGE_REASON_NO_SYMBOLS, true},
		{"the file deleted since: nothing known to be missing",
			[]step{{0, withCompanions([]uint32{1}, companion(sup, "5a", true))}, {1, answer(symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND, 0)}},
			nil, debuginfov1.CoverageReason_COVERAGE_REASON_NO_DEBUGINFO, true},
		{"no companions needed", []step{{0, answer(ok, 1)}}, nil, debuginfov1.CoverageReason_COVERAGE_REASON_UNSPECIFIED, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := store.NewFolder(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			reps := []*Recorder{New(st, Options{Now: clock, Instance: "r0"}), New(st, Options{Now: clock, Instance: "r1"})}
			ctx := context.Background()
			for _, s := range c.steps {
				now = now.Add(time.Minute)
				reps[s.replica].Record(mod("bb", len(s.res.GetFrameCounts()), "/bin/p"), s.res)
			}
			for _, r := range reps {
				if err := r.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for i, r := range reps { // each replica's view merges the other's file
				got, _, err := r.List(ctx, Filter{})
				if err != nil || len(got) != 1 {
					t.Fatalf("replica %d: List = %v, %v", i, got, err)
				}
				e := got[0]
				if fmt.Sprint(e.Missing) != fmt.Sprint(c.wantMissing) || e.Reason != c.wantReason {
					t.Errorf("replica %d: missing %v reason %v, want %v %v", i, e.Missing, e.Reason, c.wantMissing, c.wantReason)
				}
				p := e.Proto()
				if len(p.GetMissingCompanions()) != len(c.wantMissing) {
					t.Errorf("replica %d: proto lists %v", i, p.GetMissingCompanions())
				}
				for j, pc := range p.GetMissingCompanions() {
					if pc.GetKind() != c.wantMissing[j].Kind || pc.GetId() != c.wantMissing[j].ID || pc.GetState() != debuginfov1.CompanionState_COMPANION_STATE_MISSING {
						t.Errorf("replica %d: proto companion %v", i, pc)
					}
				}
				for _, f := range []Filter{{UnresolvedOnly: true}, {Reason: c.wantReason}} {
					if f.Reason == debuginfov1.CoverageReason_COVERAGE_REASON_UNSPECIFIED && !f.UnresolvedOnly {
						continue
					}
					if got, _, _ := r.List(ctx, f); (len(got) == 1) != c.wantListed {
						t.Errorf("replica %d: filter %+v listed %d, want listed %v", i, f, len(got), c.wantListed)
					}
				}
			}
		})
	}
}

// TestShardVersions: a replica writes its file with the format version; a file without one (an
// earlier release) is read; one of a later version is skipped, not misread.
func TestShardVersions(t *testing.T) {
	st, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	a := New(st, Options{Now: func() time.Time { return now }, Instance: "a"})
	a.Record(mod("aa", 3, "/bin/x"), answer(symbolizerv1.ModuleStatus_MODULE_STATUS_OK, 1, 1, 1))
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rc, _, err := st.Open(ctx, a.object())
	if err != nil {
		t.Fatal(err)
	}
	var written map[string]any
	err = json.NewDecoder(rc).Decode(&written)
	rc.Close()
	if err != nil || written["version"] != float64(shardVersion) {
		t.Fatalf("written with version %v (%v), want %d", written["version"], err, shardVersion)
	}
	put := func(name string, version int) {
		b, err := json.Marshal(shard{Version: version, Instance: name, UpdatedAt: now,
			Entries: []*Entry{{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: "aa", Asked: 10}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Put(ctx, prefix+name+".json", bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	put("earlier", 0)            // no version field: read as version 1
	put("later", shardVersion+1) // skipped
	b := New(st, Options{Now: func() time.Time { return now }, Instance: "b"})
	got, _, err := b.List(ctx, Filter{})
	if err != nil || len(got) != 1 {
		t.Fatalf("List = %v, %v", got, err)
	}
	if got[0].Asked != 13 {
		t.Fatalf("asked %d, want 13 (3 from this release's file, 10 from the earlier one, none from the later)", got[0].Asked)
	}
}
