package server

import (
	"bytes"
	"context"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/uploadcli"
)

// companionCase is a program whose DWARF needs a companion: the files of the binary, uploaded
// in order, and the companion with its kind and the ID it is stored under.
type companionCase struct {
	name        string
	binary      []string
	id          string // the binary's GNU build ID
	addrs       []uint64
	companion   string
	kind        debuginfov1.CompanionKind
	companionID string
}

// companionCases builds a dwz'ed program (stripped executable, debug file, common file) and a
// -gsplit-dwarf one (executable, .dwp).
func companionCases(t *testing.T) []companionCase {
	t.Helper()
	dwz := buildDWZ(t, 5, false)
	bin, ids, addrs := buildSplit(t)
	return []companionCase{
		{"dwz", []string{dwz.debug, dwz.exe}, dwz.ids.GNU, dwz.addrs, dwz.common, debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY, dwz.supID},
		{"split", []string{bin}, ids.GNU, addrs, bin + ".dwp", debuginfov1.CompanionKind_COMPANION_KIND_DWARF_PACKAGE, ids.GNU},
	}
}

func uploadAll(t *testing.T, url string, paths ...string) {
	t.Helper()
	for _, p := range paths { // one after the other: one build ID's uploads do not overlap
		if res := upload(t, url, p); len(res) != 1 || res[0].Err != nil {
			t.Fatalf("upload %s: %+v", p, res)
		}
	}
}

// coverageOf returns the ListCoverage entry of the binary with GNU build ID id under req's
// filter, or nil.
func coverageOf(t *testing.T, url, id string, req *debuginfov1.ListCoverageRequest) *debuginfov1.Coverage {
	t.Helper()
	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, url)
	resp, err := dc.ListCoverage(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("ListCoverage: %v", err)
	}
	for _, e := range resp.Msg.GetEntries() {
		if e.GetBuildId() == id && e.GetBuildIdType() == debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU {
			return e
		}
	}
	return nil
}

func missingCLI(t *testing.T, url string, set func(*uploadcli.MissingCmd)) string {
	t.Helper()
	var out bytes.Buffer
	cmd := &uploadcli.MissingCmd{Conn: uploadcli.Conn{Server: url, Timeout: time.Minute}, Limit: 100, Out: &out}
	if set != nil {
		set(cmd)
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("symbolizer debuginfo missing: %v", err)
	}
	return out.String()
}

// TestCoverageMissingCompanions: a binary uploaded without the companion its DWARF needs is
// answered at reduced fidelity, and coverage says why and what to upload: the companion's kind
// and ID, through ListCoverage, `symbolizer debuginfo missing` (its table and --companions,
// with --paths still naming the executable) and /ui/. Once the companion is uploaded and a
// later answer is full, the entry lists nothing missing and no longer needs an upload.
func TestCoverageMissingCompanions(t *testing.T) {
	const exe = "/usr/bin/p1"
	for _, c := range companionCases(t) {
		t.Run(c.name, func(t *testing.T) {
			r := start(t)
			uploadAll(t, r.url, c.binary...)
			mod := &symbolizerv1.Module{GnuBuildId: c.id, Addresses: c.addrs, Filename: exe}
			if m, _ := symbolizeOne(t, r.url, mod); m.GetFidelity() == symbolizerv1.Fidelity_FIDELITY_FULL {
				t.Fatalf("full answers without the companion: %v", m)
			}
			kind := strings.ToLower(strings.TrimPrefix(c.kind.String(), "COMPANION_KIND_"))

			// ListCoverage: the companion and the reason, also under the filters an operator
			// asking "what should I upload?" uses.
			for _, req := range []*debuginfov1.ListCoverageRequest{{}, {UnresolvedOnly: true},
				{Reason: debuginfov1.CoverageReason_COVERAGE_REASON_COMPANION_MISSING}} {
				e := coverageOf(t, r.url, c.id, req)
				if e == nil {
					t.Fatalf("ListCoverage %v: no entry for %s", req, c.id)
				}
				mc := e.GetMissingCompanions()
				if e.GetReason() != debuginfov1.CoverageReason_COVERAGE_REASON_COMPANION_MISSING || len(mc) != 1 ||
					mc[0].GetKind() != c.kind || mc[0].GetId() != c.companionID || mc[0].GetState() != debuginfov1.CompanionState_COMPANION_STATE_MISSING {
					t.Fatalf("ListCoverage %v: entry %v", req, e)
				}
			}

			// The CLI: the table names the companion, --companions prints the line a CI step
			// acts on, --paths the executable as before.
			table := missingCLI(t, r.url, nil)
			if !strings.Contains(table, "MISSING COMPANIONS") || !strings.Contains(table, kind+":"+c.companionID) || !strings.Contains(table, "companion_missing") {
				t.Fatalf("table:\n%s", table)
			}
			t.Logf("symbolizer debuginfo missing:\n%s", table)
			if got, want := missingCLI(t, r.url, func(m *uploadcli.MissingCmd) { m.Companions = true }), kind+"\t"+c.companionID+"\t"+exe+"\n"; got != want {
				t.Fatalf("--companions = %q, want %q", got, want)
			}
			if got := missingCLI(t, r.url, func(m *uploadcli.MissingCmd) { m.Paths = true }); got != exe+"\n" {
				t.Fatalf("--paths = %q", got)
			}
			if got := missingCLI(t, r.url, func(m *uploadcli.MissingCmd) { m.Reason = "companion_missing"; m.Companions = true }); !strings.Contains(got, c.companionID) {
				t.Fatalf("--reason companion_missing --companions = %q", got)
			}

			// /ui/: the list and the binary's page.
			for _, page := range []string{"/ui/", "/ui/buildid/gnu/" + c.id} {
				code, body := testsupport.Get(t, r.url+page)
				if code != http.StatusOK || !strings.Contains(string(body), "companion missing") || !strings.Contains(string(body), "<code>"+c.companionID+"</code>") {
					t.Fatalf("%s (%d) does not show the missing companion:\n%s", page, code, body)
				}
			}

			uploadAll(t, r.url, c.companion)
			if m, _ := symbolizeOne(t, r.url, mod); m.GetFidelity() != symbolizerv1.Fidelity_FIDELITY_FULL {
				t.Fatalf("with the companion: %v", m)
			}
			e := coverageOf(t, r.url, c.id, &debuginfov1.ListCoverageRequest{})
			if e == nil || len(e.GetMissingCompanions()) != 0 || e.GetReason() == debuginfov1.CoverageReason_COVERAGE_REASON_COMPANION_MISSING ||
				e.GetFidelity() != debuginfov1.CoverageFidelity_COVERAGE_FIDELITY_FULL {
				t.Fatalf("after the companion: %v", e)
			}
			if e.GetFramesResolved() == e.GetFramesAsked() {
				// Nothing left to upload: the lists for that leave it out.
				if e := coverageOf(t, r.url, c.id, &debuginfov1.ListCoverageRequest{UnresolvedOnly: true}); e != nil {
					t.Fatalf("still listed as needing an upload: %v", e)
				}
			}
			if got := missingCLI(t, r.url, func(m *uploadcli.MissingCmd) { m.Companions = true; m.All = true }); got != "" {
				t.Fatalf("--companions after the upload = %q", got)
			}
			if _, body := testsupport.Get(t, r.url+"/ui/buildid/gnu/"+c.id); strings.Contains(string(body), "Missing companion") {
				t.Fatalf("the binary's page still shows a missing companion:\n%s", body)
			}
		})
	}
}

// qualityOf returns the record of the binary with GNU build ID id (not its companion) as Get
// and as List answer it.
func qualityOf(t *testing.T, url, id string) (get, list *debuginfov1.Quality) {
	t.Helper()
	get = getRecord(t, url, id).GetQuality()
	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, url)
	token := ""
	for {
		resp, err := dc.List(context.Background(), connect.NewRequest(&debuginfov1.ListRequest{PageToken: token}))
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, d := range resp.Msg.GetDebuginfos() {
			if d.GetBuildId() == id && d.GetType() != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DWARF_PACKAGE {
				list = d.GetQuality()
			}
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	if list == nil {
		t.Fatalf("List has no record of %s", id)
	}
	return get, list
}

// TestCompanionQuality: a record's quality is that of its file read with the companions stored
// now, whichever arrived first. A dwz'ed debug file without its supplementary file, or a
// -gsplit-dwarf executable without its package, has no inline frames; once the companion is
// stored, Get and List say it has, on the replica that stored it and on another sharing the
// store: computed by the first read, or stored by a symbolization that came first.
func TestCompanionQuality(t *testing.T) {
	const (
		companionBefore = iota // the binary verified with the companion
		readFirst              // stored after the binary; Get and List come first
		symbolizedFirst        // stored after the binary; a symbolization comes first
	)
	for _, c := range companionCases(t) {
		for _, order := range []struct {
			name string
			when int
		}{{"companion-before", companionBefore}, {"companion-after/read-first", readFirst}, {"companion-after/symbolized-first", symbolizedFirst}} {
			t.Run(c.name+"/"+order.name, func(t *testing.T) {
				storeDir := t.TempDir()
				a := start(t, "--store-dir", storeDir)
				b := start(t, "--store-dir", storeDir)
				check := func(when string, inlines bool) {
					t.Helper()
					for _, url := range []string{a.url, b.url} {
						get, list := qualityOf(t, url, c.id)
						if get.GetHasInlineInfo() != inlines || list.GetHasInlineInfo() != inlines || !get.GetHasDwarf() {
							t.Fatalf("%s, %s: Get %v, List %v; want has_inline_info %v", when, url, get, list, inlines)
						}
						if get.GetDwarfError() != "" {
							t.Fatalf("%s, %s: dwarf_error %q", when, url, get.GetDwarfError())
						}
					}
				}
				symbolize := func() {
					t.Helper()
					if m, _ := symbolizeOne(t, b.url, &symbolizerv1.Module{GnuBuildId: c.id, Addresses: c.addrs}); m.GetFidelity() != symbolizerv1.Fidelity_FIDELITY_FULL {
						t.Fatalf("with the companion: %v", m)
					}
				}
				if order.when == companionBefore {
					uploadAll(t, a.url, c.companion)
					uploadAll(t, a.url, c.binary...)
				} else {
					uploadAll(t, a.url, c.binary...)
					check("without the companion", false)
					uploadAll(t, a.url, c.companion)
				}
				qualities := func() []string {
					var found []string
					err := filepath.WalkDir(storeDir, func(p string, _ fs.DirEntry, err error) error {
						if strings.HasSuffix(p, ".quality") {
							found = append(found, p)
						}
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
					return found
				}
				if order.when == symbolizedFirst {
					symbolize()
					// The symbolization stored the quality it found: reads need no build.
					if q := qualities(); len(q) != 1 {
						t.Fatalf("quality objects after the symbolization: %v", q)
					}
				}
				check("with the companion", true)
				if order.when == companionBefore {
					// Verified with the companion: the record's own quality serves.
					if q := qualities(); len(q) != 0 {
						t.Fatalf("quality objects: %v", q)
					}
				}
				symbolize()
				check("after a symbolization", true)
			})
		}
	}
}
