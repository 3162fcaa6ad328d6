package coverage

import (
	"bytes"
	"context"
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
	a := New(st, Options{Now: clock})
	b := New(st, Options{Now: clock})
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
