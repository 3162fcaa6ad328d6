// Command symbolizer is profsym's symbolization service and its tools: it serves the Connect
// symbolization and debuginfo APIs, uploads debuginfo from CI, and symbolizes local files.
package main

import (
	"fmt"
	"os"

	"github.com/alecthomas/kong"

	"github.com/profsym/profsym/services/symbolizer/internal/flamegraphcmd"
	"github.com/profsym/profsym/services/symbolizer/internal/pprofcmd"
	"github.com/profsym/profsym/services/symbolizer/internal/server"
	"github.com/profsym/profsym/services/symbolizer/internal/symbolizecmd"
	"github.com/profsym/profsym/services/symbolizer/internal/uploadcli"
)

type cli struct {
	Serve     server.Config       `cmd:"" help:"Serve the symbolization and debuginfo APIs (Connect, gRPC, gRPC-Web), debuginfod paths, health and metrics on one port. Traces of its own work (calls, index loads and builds, store, Redis and debuginfod calls) go by OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (the standard OTEL_* variables); off by default."`
	Upload    uploadcli.UploadCmd `cmd:"" help:"Upload ELF files (or every ELF file under directories) the server does not have yet; for CI pipelines."`
	Symbolize symbolizecmd.Cmd    `cmd:"" help:"Resolve ELF virtual addresses of a local file to functions, files, lines and inline frames (output compatible with llvm-symbolizer)."`
	Debuginfo struct {
		Inspect symbolizecmd.InspectCmd `cmd:"" help:"Print a file's build IDs, the debug sources found, their quality and index statistics."`
		List    uploadcli.ListCmd       `cmd:"" help:"List the records a server stores."`
		Get     uploadcli.GetCmd        `cmd:"" help:"Print the record a server stores under an ID."`
		Delete  uploadcli.DeleteCmd     `cmd:"" help:"Delete a stored file and its record from a server."`
		Usage   uploadcli.UsageCmd      `cmd:"" help:"List the stored files with their name, source, size, age and last use (what retention decides on), the least recently used first."`
		Missing uploadcli.MissingCmd    `cmd:"" help:"List the binaries whose frames a server could not resolve or whose companions (dwz supplementary file, DWARF package) are missing, the most unresolved first, and why: what to upload next. For a Linux kernel image or module among them (vmlinux-RELEASE, /lib/modules/RELEASE/MODULE.ko), a line after the table names the distribution package of the release's debuginfo (Debian, Ubuntu, Fedora, RHEL and rebuilds, Amazon Linux) and the files of it to upload."`
	} `cmd:"" help:"Work with debuginfo files."`

	// Profiles: pprof files symbolized from a server, any profile file as a flame graph.
	Pprof      pprofcmd.Cmd      `cmd:"" help:"Symbolize a pprof profile's addresses from a symbolizer (mappings by build ID, inline frames as pprof lines), as pprof -symbolize does from local files."`
	Flamegraph flamegraphcmd.Cmd `cmd:"" help:"Write a self-contained interactive flame graph (one HTML file) of pprof or OTLP profile files."`
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
