package symbolizecmd

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/profsym/profsym/pkg/debuginfo"
)

// InspectCmd is `symbolizer debuginfo inspect`.
type InspectCmd struct {
	File      string   `arg:"" help:"ELF binary or debug file to inspect." type:"existingfile"`
	DebugFile string   `help:"Separate debug file to use instead of searching for one." type:"existingfile" placeholder:"FILE"`
	DebugDir  []string `help:"Directory to search for separate debug files; repeatable." placeholder:"DIR"`
	JSON      bool     `help:"Print the report as JSON."`
	NoIndex   bool     `help:"Do not build the index (faster; omits index statistics)." name:"no-index"`
}

// Run prints the IDs, the debug sources found, their quality and the index statistics.
func (c *InspectCmd) Run() error { return c.run(os.Stdout) }

func (c *InspectCmd) run(out io.Writer) error {
	b, err := debuginfo.Open(c.File, debuginfo.Options{DebugFile: c.DebugFile, DebugDirs: c.DebugDir})
	if err != nil {
		return err
	}
	// Only read from: a failing close loses nothing.
	defer func() { _ = b.Close() }()
	var ixErr error
	if !c.NoIndex {
		_, ixErr = b.Index()
	}
	info := b.Info()
	if c.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(info); err != nil {
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
	dw := yes(info.DWARF)
	if info.DWARFVersion > 0 {
		dw += fmt.Sprintf(" (version %d)", info.DWARFVersion)
	}
	if info.DWARFError != "" {
		dw += ", unreadable: " + info.DWARFError
	}
	row("dwarf", dw)
	row("debug sections", fmt.Sprintf("%d bytes, compression %s", info.DebugBytes, info.Compression))
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
