//go:build linux

// Command collector is profsym's eBPF node agent: it samples CPU stacks of every process (or
// those the filters select), resolves them to ELF virtual addresses with build IDs, names
// kernel frames from kallsyms, and exports OTLP profiles to the gateway.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/profsym/profsym/services/collector/internal/app"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	var cli app.CLI
	kong.Parse(&cli,
		kong.Name("collector"),
		kong.Description("profsym eBPF node collector: CPU profiles as OTLP, addresses and build IDs, symbolized centrally. Traces of its exports and uploads go by OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (the standard OTEL_* variables); off by default."),
		kong.UsageOnError())
	log := cli.Logger()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := cli.Run(ctx, log, version); err != nil {
		if app.IsPrivilegeError(err) {
			log.Error("cannot load or attach the eBPF programs: run as root, or grant CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (and hostPID in Kubernetes)", "err", err)
		} else {
			log.Error("collector failed", "err", err)
		}
		os.Exit(1)
	}
}
