// Package ui serves the symbolizer's pages at /ui/: which binaries Symbolize was asked about,
// how much of each resolved and why the rest did not, and each binary's stored record. The
// pages are rendered on the server from html/template: nothing to build, no script.
package ui

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/services/symbolizer/internal/auth"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/coverage"
	"github.com/profsym/profsym/services/symbolizer/internal/kernelpkg"
)

//go:embed templates/*.html
var files embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"reason":   reasonText,
	"fidelity": fidelityText,
	"idtype":   idTypeText,
	"kind":     kindText,
	"kernel":   kernelpkg.Proto,
	"percent": func(part, whole uint64) string {
		if whole == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"short": func(enum, prefix string) string { return strings.ToLower(strings.TrimPrefix(enum, prefix)) },
}).ParseFS(files, "templates/*.html"))

// Handler serves /ui/. tokens, when set, guards the pages like every other read.
func Handler(cov *coverage.Recorder, md *catalog.Catalog, tokens *auth.Tokens, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	h := &handler{cov: cov, md: md, log: log}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		if tokens != nil {
			if err := tokens.Check(r.Header.Get("Authorization")); err != nil {
				http.Error(w, err.Error(), auth.HTTPStatus(err))
				return
			}
		}
		// Nothing on these pages is meant to be framed or to load anything from elsewhere.
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		switch rest := strings.TrimPrefix(r.URL.Path, "/ui/"); {
		case rest == "":
			h.list(w, r)
		case strings.HasPrefix(rest, "buildid/"):
			h.record(w, r, strings.TrimPrefix(rest, "buildid/"))
		default:
			http.NotFound(w, r)
		}
	})
}

type handler struct {
	cov *coverage.Recorder
	md  *catalog.Catalog
	log *slog.Logger
}

type listPage struct {
	Entries        []*coverage.Entry
	Total          int
	Asked          uint64
	Resolved       uint64
	Reason         string
	Reasons        []string
	UnresolvedOnly bool
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := coverage.Filter{UnresolvedOnly: q.Get("unresolved") != "", Limit: 1000}
	page := listPage{UnresolvedOnly: f.UnresolvedOnly, Reason: q.Get("reason")}
	for v, name := range debuginfov1.CoverageReason_name {
		if v == 0 {
			continue
		}
		short := strings.ToLower(strings.TrimPrefix(name, "COVERAGE_REASON_"))
		page.Reasons = append(page.Reasons, short)
		if short == page.Reason {
			f.Reason = debuginfov1.CoverageReason(v)
		}
	}
	slices.Sort(page.Reasons)
	if page.Reason != "" && f.Reason == debuginfov1.CoverageReason_COVERAGE_REASON_UNSPECIFIED {
		http.Error(w, fmt.Sprintf("reason %q: want one of %s", page.Reason, strings.Join(page.Reasons, ", ")), http.StatusBadRequest)
		return
	}
	entries, total, err := h.cov.List(r.Context(), f)
	if err != nil {
		h.fail(w, "list coverage", err)
		return
	}
	page.Entries, page.Total = entries, total
	for _, e := range entries {
		page.Asked += e.Asked
		page.Resolved += e.Resolved
	}
	h.render(w, "list.html", page)
}

type recordPage struct {
	Type, ID string
	Coverage *coverage.Entry
	Record   *debuginfov1.Debuginfo
	// Debuginfod is the path of the debuginfod URL of the stored file, for GNU build IDs.
	Debuginfod string
}

func (h *handler) record(w http.ResponseWriter, r *http.Request, rest string) {
	typName, id, ok := strings.Cut(rest, "/")
	typ, known := debuginfov1.BuildIDType_value["BUILD_ID_TYPE_"+strings.ToUpper(typName)]
	if !ok || !known || typ == 0 || catalog.ValidateID(debuginfov1.BuildIDType(typ), id) != nil {
		http.Error(w, "want /ui/buildid/<gnu|go|htlhash>/<id> with a valid ID", http.StatusBadRequest)
		return
	}
	bt := debuginfov1.BuildIDType(typ)
	page := recordPage{Type: typName, ID: id}
	var err error
	if page.Coverage, err = h.cov.Lookup(r.Context(), bt, id); err != nil {
		h.fail(w, "look up coverage", err)
		return
	}
	rec, err := h.md.Resolve(r.Context(), catalog.ID{Type: bt, ID: id})
	switch {
	case errors.Is(err, catalog.ErrNotFound):
	case err != nil:
		h.fail(w, "look up record", err)
		return
	default:
		if page.Record, err = h.md.Describe(r.Context(), rec); err != nil {
			h.fail(w, "look up companions", err)
			return
		}
		for _, i := range page.Record.GetIds() {
			if i.GetType() == debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU {
				page.Debuginfod = "/buildid/" + i.GetId() + "/debuginfo"
			}
		}
	}
	if page.Coverage == nil && page.Record == nil {
		w.WriteHeader(http.StatusNotFound)
	}
	h.render(w, "record.html", page)
}

func (h *handler) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, name, data); err != nil {
		// The page is partly written: all that is left is to say so in the log.
		h.log.Warn("render page", "page", name, "err", err)
	}
}

func (h *handler) fail(w http.ResponseWriter, what string, err error) {
	h.log.Warn("ui: "+what, "err", err)
	http.Error(w, what+": the store did not answer; see the symbolizer's log", http.StatusServiceUnavailable)
}

func reasonText(r debuginfov1.CoverageReason) string {
	switch r {
	case debuginfov1.CoverageReason_COVERAGE_REASON_NO_DEBUGINFO:
		return "no debuginfo"
	case debuginfov1.CoverageReason_COVERAGE_REASON_INVALID_FILE:
		return "invalid file"
	case debuginfov1.CoverageReason_COVERAGE_REASON_UPSTREAM_MISS:
		return "upstream or store failed"
	case debuginfov1.CoverageReason_COVERAGE_REASON_EXECUTABLE_NEEDED:
		return "executable needed"
	case debuginfov1.CoverageReason_COVERAGE_REASON_INVALID_MAPPING:
		return "invalid mapping"
	case debuginfov1.CoverageReason_COVERAGE_REASON_NO_SYMBOLS:
		return "no symbols there"
	case debuginfov1.CoverageReason_COVERAGE_REASON_COMPANION_MISSING:
		return "companion missing"
	}
	return ""
}

func fidelityText(f debuginfov1.CoverageFidelity) string {
	switch f {
	case debuginfov1.CoverageFidelity_COVERAGE_FIDELITY_SYMBOLS:
		return "symbols only"
	case debuginfov1.CoverageFidelity_COVERAGE_FIDELITY_LINES:
		return "lines"
	case debuginfov1.CoverageFidelity_COVERAGE_FIDELITY_FULL:
		return "full (inlines)"
	}
	return "nothing"
}

func kindText(k debuginfov1.CompanionKind) string {
	switch k {
	case debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY:
		return "supplementary DWARF file (dwz)"
	case debuginfov1.CompanionKind_COMPANION_KIND_DWARF_PACKAGE:
		return "DWARF package (.dwp)"
	}
	return "companion"
}

func idTypeText(t debuginfov1.BuildIDType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "BUILD_ID_TYPE_"))
}
