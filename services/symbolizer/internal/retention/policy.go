package retention

import (
	"fmt"
	"sort"
	"strings"
	"time"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
)

// Policy says what to keep. A record is kept when any rule keeps it; a rule that is zero is
// off, and a policy with every rule off keeps everything (the default).
type Policy struct {
	// UsedWithin keeps every record used (or uploaded) in this long.
	UsedWithin time.Duration
	// KeepBuilds keeps the latest this many uploads of each binary name.
	KeepBuilds int
	// CIWithin keeps every record uploaded from CI in this long.
	CIWithin time.Duration
}

// Enabled reports whether the policy deletes anything at all.
func (p Policy) Enabled() bool { return p.UsedWithin > 0 || p.KeepBuilds > 0 || p.CIWithin > 0 }

func (p Policy) String() string {
	if !p.Enabled() {
		return "keep everything"
	}
	var rules []string
	if p.UsedWithin > 0 {
		rules = append(rules, fmt.Sprintf("used in the last %s", days(p.UsedWithin)))
	}
	if p.KeepBuilds > 0 {
		rules = append(rules, fmt.Sprintf("the last %d builds of each name", p.KeepBuilds))
	}
	if p.CIWithin > 0 {
		rules = append(rules, fmt.Sprintf("uploaded from CI in the last %s", days(p.CIWithin)))
	}
	return "keep " + strings.Join(rules, ", or ")
}

func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

// Decision is what a policy decided of one record.
type Decision struct {
	Key        string
	BuildID    string
	Name       string
	Type       debuginfov1.DebuginfoType
	Source     debuginfov1.UploadSource
	SHA256     string
	Size       uint64
	UploadedAt time.Time
	// LastUsed is the latest of the recorded last use, the upload, and (for a record uploaded
	// before use was first recorded) the start of the recording.
	LastUsed time.Time
	Keep     bool
	Why      string
}

// Plan decides of every record. usage is the recorded last use by record key, recordingSince
// when the store began to record use (zero: never).
func Plan(p Policy, recs []*catalog.Record, usage map[string]Entry, recordingSince, now time.Time) []Decision {
	out := make([]Decision, len(recs))
	byName := map[string][]int{}
	for i, r := range recs {
		f := r.Current
		d := Decision{Key: r.Key, BuildID: f.BuildID.String(), Name: f.Name, Type: f.Type, Source: f.Source,
			SHA256: f.SHA256, Size: f.Size, UploadedAt: f.UploadedAt, LastUsed: f.UploadedAt}
		u, used := usage[r.Key]
		if d.Name == "" {
			d.Name = u.Name
		}
		if used && u.LastUsed().After(d.LastUsed) {
			d.LastUsed = u.LastUsed()
		}
		if !recordingSince.IsZero() && f.UploadedAt.Before(recordingSince) && recordingSince.After(d.LastUsed) {
			d.LastUsed = recordingSince
		}
		switch {
		case !p.Enabled():
			d.Keep, d.Why = true, "no retention policy"
		case p.UsedWithin > 0 && !d.LastUsed.Before(now.Add(-p.UsedWithin)):
			d.Keep, d.Why = true, "used "+d.LastUsed.UTC().Format(dayLayout)
		case p.CIWithin > 0 && f.Source == debuginfov1.UploadSource_UPLOAD_SOURCE_CI && !f.UploadedAt.Before(now.Add(-p.CIWithin)):
			d.Keep, d.Why = true, "uploaded from CI "+f.UploadedAt.UTC().Format(dayLayout)
		default:
			// Every rule that is on, and why it does not keep the record; the builds rule
			// adds its own below.
			var why []string
			if p.UsedWithin > 0 {
				why = append(why, "unused since "+d.LastUsed.UTC().Format(dayLayout))
			}
			if p.CIWithin > 0 {
				if f.Source == debuginfov1.UploadSource_UPLOAD_SOURCE_CI {
					why = append(why, "uploaded from CI "+f.UploadedAt.UTC().Format(dayLayout))
				} else {
					why = append(why, "not uploaded from CI")
				}
			}
			if p.KeepBuilds > 0 && (d.Name == "" || f.IsCompanion()) {
				why = append(why, "no name to count its builds by")
			}
			d.Why = strings.Join(why, ", ")
		}
		if d.Name != "" && !f.IsCompanion() {
			byName[d.Name] = append(byName[d.Name], i)
		}
		out[i] = d
	}
	if p.KeepBuilds > 0 {
		for name, idx := range byName {
			sort.Slice(idx, func(a, b int) bool {
				x, y := out[idx[a]], out[idx[b]]
				if !x.UploadedAt.Equal(y.UploadedAt) {
					return x.UploadedAt.After(y.UploadedAt)
				}
				return x.Key > y.Key
			})
			for n, i := range idx {
				switch {
				case out[i].Keep:
				case n < p.KeepBuilds:
					out[i].Keep, out[i].Why = true, fmt.Sprintf("build %d of the last %d of %s", n+1, p.KeepBuilds, name)
				case out[i].Why != "":
					out[i].Why = fmt.Sprintf("%s, %d newer builds of %s", out[i].Why, n, name)
				default:
					out[i].Why = fmt.Sprintf("%d newer builds of %s", n, name)
				}
			}
		}
	}
	// Companions stay while a binary that needs them stays.
	sup := map[string]bool{} // supplementary IDs kept binaries name
	gnu := map[string]bool{} // GNU build IDs of binaries (their DWARF packages): kept or not
	for i, r := range recs {
		if f := r.Current; !f.IsCompanion() {
			if f.Supplementary != "" && out[i].Keep {
				sup[f.Supplementary] = true
			}
			if f.IDs.GNU != "" {
				gnu[f.IDs.GNU] = gnu[f.IDs.GNU] || out[i].Keep
			}
		}
	}
	for i, r := range recs {
		f := r.Current
		switch {
		case !p.Enabled():
		case f.Type == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY:
			if !out[i].Keep && (sup[f.SupplementaryOf] || sup[f.BuildID.ID]) {
				out[i].Keep, out[i].Why = true, "supplementary file of a kept binary"
			}
		case f.Type == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DWARF_PACKAGE:
			// A binary's package goes when the binary goes (the catalog deletes them
			// together) and stays while it stays; one whose binary is not stored follows
			// the rules alone.
			if kept, ok := gnu[f.BuildID.ID]; ok {
				out[i].Keep = kept
				if kept {
					out[i].Why = "DWARF package of a kept binary"
				} else {
					out[i].Why = "DWARF package of a deleted binary"
				}
			}
		}
	}
	return out
}
