package retention

import (
	"testing"
	"time"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
)

// TestPlanWhy checks what a deletion says of itself: each rule that is on, and why it did not
// keep the record, never a rule that is off.
func TestPlanWhy(t *testing.T) {
	now := dayStart(100)
	build := func(key, name string, uploadedDay int, src debuginfov1.UploadSource) *catalog.Record {
		return &catalog.Record{Key: key, Current: &catalog.File{Name: name, Source: src, UploadedAt: dayStart(uploadedDay),
			BuildID: catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: key}}}
	}
	node, ci := debuginfov1.UploadSource_UPLOAD_SOURCE_NODE, debuginfov1.UploadSource_UPLOAD_SOURCE_CI
	recs := []*catalog.Record{
		build("a1", "app", 90, node), build("a2", "app", 80, node), build("a3", "app", 70, node),
		build("x", "", 10, node), build("c", "tool", 5, ci),
	}
	usage := map[string]Entry{"a3": {Day: dayStart(95).Format(dayLayout)}}
	for _, tc := range []struct {
		name string
		p    Policy
		want map[string]string // key -> why, for the records deleted
	}{
		{"builds only", Policy{KeepBuilds: 1}, map[string]string{
			"a2": "1 newer builds of app", "a3": "2 newer builds of app", "x": "no name to count its builds by"}},
		{"used and builds", Policy{UsedWithin: 15 * 24 * time.Hour, KeepBuilds: 1}, map[string]string{
			"a2": "unused since 2026-03-22, 1 newer builds of app", "x": "unused since 2026-01-11, no name to count its builds by"}},
		{"CI only", Policy{CIWithin: 30 * 24 * time.Hour}, map[string]string{
			"a1": "not uploaded from CI", "a2": "not uploaded from CI", "a3": "not uploaded from CI", "x": "not uploaded from CI",
			"c": "uploaded from CI 2026-01-06"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{}
			for _, d := range Plan(tc.p, recs, usage, time.Time{}, now) {
				if !d.Keep {
					got[d.Key] = d.Why
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("deleted %v, want %v", got, tc.want)
			}
			for k, why := range tc.want {
				if got[k] != why {
					t.Errorf("%s: why %q, want %q", k, got[k], why)
				}
			}
		})
	}
}
