// Command gateway is profsym's gateway as an OpenTelemetry Collector distribution: OTLP profiles
// in (gRPC and HTTP), native frames symbolized by the profsym symbolizer, full-fidelity OTLP
// (gRPC, HTTP, files) and pprof files out, with the Collector's memory limiter, sending queues,
// retries and persistent storage between them.
package main

import (
	_ "embed"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/featuregate"
	"go.opentelemetry.io/collector/otelcol"

	// Replaces gRPC's "gzip" (the standard library's at level 6) with klauspost's at level 1
	// for the OTLP/gRPC exporter and receiver: compressing exports was half of the gateway's
	// CPU, and at level 1 it costs a sixth for output about 20% larger (bench/gateway).
	_ "github.com/profsym/profsym/services/gateway/internal/gzipcodec"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

// defaultConfig is config/local.yaml: the one-command local run needs no file of its own.
//
//go:embed config/local.yaml
var defaultConfig string

// profilesGate is the Collector's feature gate for the profiles signal, still in alpha: a
// profiles gateway without it would refuse its own pipeline.
const profilesGate = "service.profilesSupport"

const help = `profsym gateway: OTLP profiles in, native frames symbolized through the profsym
symbolizer, full-fidelity OTLP and pprof out. It is an OpenTelemetry Collector built from the
OTLP receiver, the memory_limiter, symbolize and k8sattributes processors, the otlp,
otlp_http, file, debug and pprof exporters and the file_storage, health_check, otlp_plain and
refusals extensions; it is configured by Collector YAML.

Without --config it runs config/local.yaml, built in: receivers on 127.0.0.1:4317 (gRPC) and
127.0.0.1:4318 (HTTP, POST /v1development/profiles), the symbolizer at http://127.0.0.1:7070
($PROFSYM_SYMBOLIZER), OTLP and pprof files under ./profsym-gateway ($PROFSYM_GATEWAY_OUTPUT),
Prometheus /metrics on 127.0.0.1:8888, health on 127.0.0.1:13133, readiness on
127.0.0.1:13134/readyz. Print it with
  gateway print-default-config

Examples:
  gateway                                        # the local default
  gateway --config config/production.yaml        # OTLP out with a persistent queue
  gateway --set processors::symbolize::deadline=2s   # the local default, one key changed
  gateway --config file:my.yaml --set processors::symbolize::deadline=2s
  gateway validate --config my.yaml
  gateway components

The feature gate ` + profilesGate + ` is on unless --feature-gates turns it off.
The old gateway's flags and the config keys that replace them: services/gateway/README.md.`

func newCommand() *cobra.Command {
	// Enabled before the flags are parsed, so --feature-gates=-service.profilesSupport still wins.
	if err := featuregate.GlobalRegistry().Set(profilesGate, true); err != nil {
		// The gate is registered by the service package, which this binary links: a missing gate
		// is a build problem, and the pipeline would be refused at start anyway.
		fmt.Fprintln(os.Stderr, "gateway:", err)
	}
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "gateway",
			Description: "profsym gateway (OpenTelemetry Collector distribution)",
			Version:     version,
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				// The default: --config replaces it.
				URIs: []string{"yaml:" + defaultConfig},
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
					yamlprovider.NewFactory(),
				},
				DefaultScheme: "env",
			},
		},
	}
	cmd := otelcol.NewCommand(set)
	// --set alone would replace the built-in configuration with its own few keys (the Collector
	// treats each --set as one more config source, and any source replaces the defaults): keep
	// the built-in configuration under them, so `gateway --set key=value` adjusts the local run.
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		cfg, setFlag := c.Flags().Lookup("config"), c.Flags().Lookup("set")
		if cfg == nil || setFlag == nil || cfg.Changed || !setFlag.Changed {
			return nil
		}
		if err := c.Flags().Set("config", "yaml:"+defaultConfig); err != nil {
			return fmt.Errorf("built-in configuration under --set: %w", err)
		}
		return nil
	}
	cmd.Short = "profsym gateway: symbolizing OTLP profiles gateway (an OpenTelemetry Collector)"
	cmd.Long = help
	cmd.AddCommand(&cobra.Command{
		Use:   "print-default-config",
		Short: "Print the configuration used when no --config is given",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(c.OutOrStdout(), defaultConfig)
			return err
		},
	})
	return cmd
}

func main() {
	if err := newCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
