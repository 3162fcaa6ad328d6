// Command symbolizer is profsym's symbolization service and its tools: it serves the Connect
// symbolization and debuginfo APIs, uploads debuginfo from CI, and symbolizes local files.
package main

import (
	"fmt"
	"os"

	"github.com/alecthomas/kong"

	"github.com/profsym/profsym/services/symbolizer/internal/symbolizecmd"
)

type cli struct {
	Symbolize symbolizecmd.Cmd `cmd:"" help:"Resolve ELF virtual addresses of a local file to functions, files, lines and inline frames (output compatible with llvm-symbolizer)."`
	Debuginfo struct {
		Inspect symbolizecmd.InspectCmd `cmd:"" help:"Print a file's build IDs, the debug sources found, their quality and index statistics."`
	} `cmd:"" help:"Work with debuginfo files."`
}

func main() {
	var c cli
	ctx := kong.Parse(&c,
		kong.Name("symbolizer"),
		kong.Description("profsym symbolizer: turns addresses from OpenTelemetry profiles into functions, files, lines and inline frames."),
		kong.UsageOnError(),
	)
	if err := ctx.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "symbolizer:", err)
		os.Exit(1)
	}
}
