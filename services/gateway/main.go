// Command gateway receives OTLP profiles, symbolizes their native frames through the profsym
// symbolizer and sends them on, full fidelity, as OTLP (gRPC, HTTP, files) and pprof files.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/profsym/profsym/pkg/gctune"
	"github.com/profsym/profsym/services/gateway/internal/server"
)

type cli struct {
	GRPCListen      string `name:"grpc-listen" default:":4317" env:"GATEWAY_GRPC_LISTEN" help:"OTLP/gRPC receiver address."`
	HTTPListen      string `name:"http-listen" default:":4318" env:"GATEWAY_HTTP_LISTEN" help:"OTLP/HTTP receiver address (POST /v1development/profiles)."`
	AdminListen     string `name:"admin-listen" default:":8888" env:"GATEWAY_ADMIN_LISTEN" help:"Address of /healthz, /readyz and Prometheus /metrics."`
	AdminPprof      bool   `name:"admin-pprof" env:"GATEWAY_ADMIN_PPROF" help:"Also serve Go runtime profiles at /debug/pprof/ on the admin address (keep that address private)."`
	TLSCert         string `name:"tls-cert" env:"GATEWAY_TLS_CERT" type:"existingfile" help:"PEM certificate: the receivers serve TLS (with --tls-key)."`
	TLSKey          string `name:"tls-key" env:"GATEWAY_TLS_KEY" type:"existingfile" help:"PEM private key of --tls-cert."`
	TLSClientCA     string `name:"tls-client-ca" env:"GATEWAY_TLS_CLIENT_CA" type:"existingfile" help:"PEM CA bundle: the receivers accept only clients with a certificate it signed (mutual TLS; needs --tls-cert)."`
	MaxRequestBytes int64  `name:"max-request-bytes" default:"16777216" env:"GATEWAY_MAX_REQUEST_BYTES" help:"Largest request accepted, compressed and decompressed."`

	SymbolizerURL        string        `name:"symbolizer-url" default:"http://127.0.0.1:7070" env:"GATEWAY_SYMBOLIZER_URL" help:"Base URL of the symbolizer's Connect API; empty disables symbolization (data passes through)."`
	SymbolizerTokenFile  string        `name:"symbolizer-token-file" env:"GATEWAY_SYMBOLIZER_TOKEN_FILE" help:"File holding a bearer token for a symbolizer that guards reads."`
	SymbolizeTimeout     time.Duration `name:"symbolize-timeout" default:"5s" env:"GATEWAY_SYMBOLIZE_TIMEOUT" help:"Deadline for symbolizing one request; after it the request goes out unsymbolized."`
	SymbolizeBatch       int           `name:"symbolize-batch" default:"8192" env:"GATEWAY_SYMBOLIZE_BATCH" help:"Most addresses per symbolizer call."`
	SymbolizeConcurrency int           `name:"symbolize-concurrency" default:"4" env:"GATEWAY_SYMBOLIZE_CONCURRENCY" help:"Most symbolizer calls in flight per request."`
	SymbolCacheEntries   int           `name:"symbol-cache-entries" default:"262144" env:"GATEWAY_SYMBOL_CACHE_ENTRIES" help:"Entries of the in-process (binary, address) result cache; negative disables it."`

	OTLPGRPCEndpoint       string            `name:"otlp-grpc-endpoint" env:"GATEWAY_OTLP_GRPC_ENDPOINT" help:"Export OTLP/gRPC to host:port."`
	OTLPHTTPEndpoint       string            `name:"otlp-http-endpoint" env:"GATEWAY_OTLP_HTTP_ENDPOINT" help:"Export OTLP/HTTP to this URL (path defaults to /v1development/profiles)."`
	OTLPHeader             map[string]string `name:"otlp-header" env:"GATEWAY_OTLP_HEADER" mapsep:"," help:"Header k=v sent with OTLP exports (repeatable)."`
	OTLPInsecure           bool              `name:"otlp-insecure" env:"GATEWAY_OTLP_INSECURE" help:"OTLP/gRPC export without TLS."`
	OTLPCAFile             string            `name:"otlp-ca-file" env:"GATEWAY_OTLP_CA_FILE" help:"PEM CA bundle that verifies the OTLP downstream."`
	OTLPInsecureSkipVerify bool              `name:"otlp-insecure-skip-verify" env:"GATEWAY_OTLP_INSECURE_SKIP_VERIFY" help:"Do not verify the OTLP downstream's certificate."`
	OTLPGzip               bool              `name:"otlp-gzip" default:"true" negatable:"" env:"GATEWAY_OTLP_GZIP" help:"Gzip OTLP exports."`
	OTLPGzipLevel          int               `name:"otlp-gzip-level" default:"1" env:"GATEWAY_OTLP_GZIP_LEVEL" help:"Gzip level of OTLP exports: 1 (fastest; the default, a sixth of the CPU of level 6 for about 20% more bytes) to 9 (smallest)."`
	ExportTimeout          time.Duration     `name:"export-timeout" default:"30s" env:"GATEWAY_EXPORT_TIMEOUT" help:"Deadline per OTLP export attempt."`
	OutputDir              string            `name:"output-dir" env:"GATEWAY_OUTPUT_DIR" help:"Write every request as an OTLP protobuf file here."`
	PprofDir               string            `name:"pprof-dir" env:"GATEWAY_PPROF_DIR" help:"Write every profile as a gzipped pprof file here."`
	OutputKeepFiles        int               `name:"output-keep-files" env:"GATEWAY_OUTPUT_KEEP_FILES" help:"Keep at most this many files in each of --output-dir and --pprof-dir, deleting the oldest (0: keep all)."`
	QueueBytes             int64             `name:"queue-bytes" default:"268435456" env:"GATEWAY_QUEUE_BYTES" help:"Bound of each exporter's queue; when full, senders get UNAVAILABLE / 503."`
	ExportWorkers          int               `name:"export-workers" default:"2" env:"GATEWAY_EXPORT_WORKERS" help:"Concurrent sends per exporter."`
	ShutdownTimeout        time.Duration     `name:"shutdown-timeout" default:"30s" env:"GATEWAY_SHUTDOWN_TIMEOUT" help:"How long shutdown waits for queues to drain."`
	GCMinHeadroom          uint64            `name:"gc-min-headroom" default:"268435456" env:"GATEWAY_GC_MIN_HEADROOM" help:"Bytes the Go heap may grow past its live size before a collection, at least (0: plain GOGC). GOMEMLIMIT is set to 90% of the container's memory limit unless already set (AUTOMEMLIMIT=off disables that)."`
	LogLevel               slog.Level        `name:"log-level" default:"info" env:"GATEWAY_LOG_LEVEL" help:"debug, info, warn or error."`
}

func (c *cli) Run() error {
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: c.LogLevel})))
	defer gctune.Start(gctune.Options{MinHeadroom: c.GCMinHeadroom})()
	var token string
	if c.SymbolizerTokenFile != "" {
		b, err := os.ReadFile(c.SymbolizerTokenFile)
		if err != nil {
			return fmt.Errorf("read symbolizer token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	srv, err := server.New(server.Config{
		GRPCListen: c.GRPCListen, HTTPListen: c.HTTPListen, AdminListen: c.AdminListen, AdminPprof: c.AdminPprof,
		TLSCert: c.TLSCert, TLSKey: c.TLSKey, TLSClientCA: c.TLSClientCA, MaxRequestBytes: c.MaxRequestBytes,
		SymbolizerURL: c.SymbolizerURL, SymbolizerToken: token, SymbolizeTimeout: c.SymbolizeTimeout,
		SymbolizeBatch: c.SymbolizeBatch, SymbolizeConcurrency: c.SymbolizeConcurrency, SymbolCacheEntries: c.SymbolCacheEntries,
		OTLPGRPCEndpoint: c.OTLPGRPCEndpoint, OTLPHTTPEndpoint: c.OTLPHTTPEndpoint, OTLPHeaders: c.OTLPHeader,
		OTLPInsecure: c.OTLPInsecure, OTLPCAFile: c.OTLPCAFile, OTLPInsecureSkipVerify: c.OTLPInsecureSkipVerify,
		OTLPGzip: c.OTLPGzip, OTLPGzipLevel: c.OTLPGzipLevel, ExportTimeout: c.ExportTimeout, OutputDir: c.OutputDir, PprofDir: c.PprofDir, OutputKeepFiles: c.OutputKeepFiles,
		QueueBytes: c.QueueBytes, ExportWorkers: c.ExportWorkers,
	})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	slog.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	srv.Shutdown(sctx)
	return nil
}

func main() {
	var c cli
	ctx := kong.Parse(&c,
		kong.Name("gateway"),
		kong.Description("profsym gateway: OTLP profiles in, symbolized full-fidelity OTLP and pprof out."),
		kong.UsageOnError(),
	)
	if err := ctx.Run(); err != nil {
		slog.Error("gateway failed", "err", err)
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
