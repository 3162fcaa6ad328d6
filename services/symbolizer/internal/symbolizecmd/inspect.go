package symbolizecmd

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/services/symbolizer/internal/debuginfod"
)

// InspectCmd is `symbolizer debuginfo inspect`.
type InspectCmd struct {
	File      string   `arg:"" help:"ELF binary or debug file to inspect." type:"existingfile"`
	DebugFile string   `help:"Separate debug file to use instead of searching for one." type:"existingfile" placeholder:"FILE"`
	DebugDir  []string `help:"Directory to search for separate debug files; repeatable. Default: /usr/lib/debug; a --debug-dir given replaces it, and an empty one (--debug-dir=) searches none." placeholder:"DIR"`
	// Companions a store keeps apart, given by hand.
	Supplementary  string `help:"Supplementary DWARF file (dwz's common file) to use instead of searching for it." type:"existingfile" placeholder:"FILE"`
	DWARFPackage   string `name:"dwarf-package" help:"DWARF package (.dwp) to use instead of FILE.dwp." type:"existingfile" placeholder:"FILE"`
	DebuginfodURLs string `name:"debuginfod-urls" env:"DEBUGINFOD_URLS" help:"debuginfod servers to ask, in turn, for what symbolize would ask them for: the separate debug file of a binary that has neither DWARF nor a Go pclntab and whose debug file is not on disk, and a missing dwz supplementary file; space-separated. Fetched files are kept by build ID under the cache directory, where symbolize finds them." placeholder:"URLS"`
	CacheDir       string `help:"The cache directory symbolize uses, where fetched debuginfod files are kept (default: profsym/index under the user's cache directory)." placeholder:"DIR" env:"SYMBOLIZER_CACHE_DIR"`
	CacheSize      int64  `help:"Largest total size of the cache directory in bytes, as for symbolize: after a fetch, the least recently used indexes and fetched files are removed beyond it." default:"2147483648" placeholder:"BYTES"`
	JSON           bool   `help:"Print the report as JSON."`
	NoIndex        bool   `help:"Do not build the index (faster; omits index statistics)." name:"no-index"`
}

// Run prints the IDs, the debug sources found, their quality and the index statistics.
func (c *InspectCmd) Run() error { return c.run(os.Stdout) }

func (c *InspectCmd) run(out io.Writer) error {
	warn := func(err error) { fmt.Fprintf(os.Stderr, "symbolizer debuginfo inspect: %v\n", err) }
	servers := fromDebuginfod{urls: debuginfod.ParseURLs(c.DebuginfodURLs), cacheDir: cacheDirOr(c.CacheDir), warn: warn}
	b, fetched, done, err := servers.open(c.File, debuginfo.Options{DebugFile: c.DebugFile, DebugDirs: debugDirs(c.DebugDir),
		SupplementaryFile: c.Supplementary, DWARFPackage: c.DWARFPackage})
	defer done()
	if len(fetched) > 0 {
		// What was fetched counts against the cache's size as symbolize's fetches do; it is the
		// most recently used, so it goes last.
		defer func() {
			if err := (&indexCache{dir: servers.cacheDir, maxBytes: c.CacheSize}).evict(); err != nil {
				warn(err)
			}
		}()
	}
	if err != nil {
		return err
	}
	// Only read from: a failing close loses nothing.
	defer func() { _ = b.Close() }()
	var ixErr error
	if !c.NoIndex {
		_, ixErr = b.Index()
	}
	rep := report{Info: b.Info()}
	// A fetched file was handed to the engine as a given one.
	if slices.Contains(fetched, rep.DebugFile) {
		rep.DebugFileFoundBy = "debuginfod"
	}
	if s := rep.Supplementary; s != nil && slices.Contains(fetched, s.Path) {
		sup := *s // the Binary's own
		sup.FoundBy = "debuginfod"
		rep.Supplementary = &sup
	}
	// A file that links to none may be a supplementary file itself; an error reading its
	// units means it is not one, and the DWARF line below says what is wrong.
	if id, ok, err := debuginfo.SupplementaryFileID(c.File, elfx.Limits{}); err == nil && ok {
		rep.SupplementaryOf = id
	}
	if units, ok, err := debuginfo.DWARFPackageUnits(c.File, elfx.Limits{}); ok {
		rep.PackageUnits, rep.PackageError = units, errString(err)
	}
	info := rep.Info
	if c.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
		return ixErr
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	yes := func(v bool) string {
		if v {
			return "yes"
		}
		return "no"
	}
	row("file", info.Path)
	row("size", fmt.Sprintf("%d bytes", info.Size))
	row("build_id.gnu", orNone(info.IDs.GNU))
	row("build_id.go", orNone(info.IDs.Go))
	row("build_id.htlhash", orNone(info.IDs.HTLHash))
	row("debug file", orNone(info.DebugFile)+foundBy(info.DebugFileFoundBy))
	row("debuglink", orNone(info.Debuglink))
	if rep.SupplementaryOf != "" {
		row("supplementary file", "this file is one (only DWARF partial units, or .debug_sup): debug files name it by ID "+rep.SupplementaryOf+"; upload it like any debug file")
	}
	if rep.PackageUnits > 0 || rep.PackageError != "" {
		row("dwarf package", fmt.Sprintf("this file is one, of %d split units%s: upload it under its executable's build ID", rep.PackageUnits, orEmpty(", unreadable: ", rep.PackageError)))
	}
	if s := info.Supplementary; s != nil {
		state := "found at " + s.Path + foundBy(s.FoundBy)
		if s.Missing {
			state = "MISSING: the DWARF was not read (give it with --supplementary, or put it in a --debug-dir by build ID)"
		}
		row("supplementary", fmt.Sprintf("%s names %q, ID %s; %s", s.Section, s.Name, s.ID, state))
	}
	dw := yes(info.DWARF)
	if info.DWARFVersion > 0 {
		dw += fmt.Sprintf(" (version %d)", info.DWARFVersion)
	}
	if info.DWARFError != "" {
		dw += ", unreadable: " + info.DWARFError
	}
	row("dwarf", dw)
	row("debug sections", fmt.Sprintf("%d bytes, compression %s", info.DebugBytes, info.Compression))
	if info.SkeletonUnits > 0 {
		state := orNone(info.DWARFPackage)
		if n := info.SkeletonsWithoutPackage; n > 0 {
			state += fmt.Sprintf("; %d units MISSING their functions (give the .dwp with --dwarf-package)", n)
		}
		row("split dwarf", fmt.Sprintf("%d skeleton units, functions from %s", info.SkeletonUnits, state))
	}
	row("go pclntab", yes(info.GoPclntab))
	row("symtab", yes(info.Symtab))
	row("dynsym", yes(info.Dynsym))
	row("minidebuginfo", yes(info.MiniDebugInfo))
	if info.Runnable {
		row("program headers", "the executable's: mapped addresses can be placed")
	} else {
		row("program headers", "a separate debug file's: file offsets are not the executable's; mapped addresses need the executable")
	}
	if !c.NoIndex {
		row("index sources", orNone(strings.Join(info.Sources, ", ")))
		row("index fidelity", orNone(info.Fidelity))
		if st := info.IndexStats; st != nil {
			row("index", fmt.Sprintf("%d functions/inlined instances, %d intervals, %d line rows, %d strings, ~%d bytes in memory",
				st.Nodes, st.Intervals, st.LineRows, st.Strings, st.Bytes))
			if info.DebugBytes > 0 {
				row("index/debug size", fmt.Sprintf("%.1f%%", 100*float64(st.Bytes)/float64(info.DebugBytes)))
			}
		}
		row("index build time", info.BuildTime)
	}
	for _, w := range info.Warnings {
		row("warning", w)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return ixErr
}

// report is what inspect prints: the engine's Info and what the file is to a store.
type report struct {
	debuginfo.Info
	// SupplementaryOf is the ID of a supplementary DWARF file, by which others name it.
	SupplementaryOf string `json:"supplementary_of,omitempty"`
	// PackageUnits counts the split units of a DWARF package, PackageError why it does not read.
	PackageUnits int    `json:"dwarf_package_units,omitempty"`
	PackageError string `json:"dwarf_package_error,omitempty"`
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func orEmpty(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func foundBy(how string) string {
	if how == "" {
		return ""
	}
	return " (found by " + how + ")"
}
