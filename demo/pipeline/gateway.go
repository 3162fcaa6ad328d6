package pipeline

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// GatewayConfig is what the demo, the end-to-end tests and the gateway's own tests vary in
// the gateway's Collector configuration; YAML writes the configuration itself. Zero values keep
// the Collector's or the component's defaults.
type GatewayConfig struct {
	// Symbolizer is the symbolize processor's endpoint; SymbolizerTokenFile, if set, holds the
	// bearer token for a symbolizer that guards reads.
	Symbolizer, SymbolizerTokenFile string
	// Timeout of one symbolizer call and Deadline after which data goes on unsymbolized.
	Timeout, Deadline time.Duration
	// CacheEntries of the symbolize processor (0: no cache); nil keeps its default.
	CacheEntries *int

	// Downstream is the OTLP/gRPC exporter's endpoint (plaintext); empty: none.
	Downstream string
	// QueueSize bounds the sending queue in requests; 0 keeps the Collector's default.
	QueueSize int
	// StorageDir makes the sending queue persistent (file_storage); empty: in memory.
	StorageDir string
	// OutputFile is the file exporter's path: every request as a 4-byte big-endian length and
	// the OTLP protobuf (ReadOTLPFile reads it); empty: none.
	OutputFile string
	// PprofDir receives a gzipped pprof file per profile (keeping PprofKeepFiles); empty: none.
	PprofDir       string
	PprofKeepFiles int

	// K8sPassthrough puts k8sattributes first, in passthrough mode (it adds k8s.pod.ip from
	// the sender's address and needs no Kubernetes API).
	K8sPassthrough bool
	// TLSCert and TLSKey make both receivers serve TLS, and with TLSClientCA require a client
	// certificate it signed.
	TLSCert, TLSKey, TLSClientCA string
	// MemoryLimitMiB replaces memory_limiter's limit (1024 MiB); the spike limit is half of it.
	MemoryLimitMiB int
	// JSONLogs writes the Collector's logs as JSON lines.
	JSONLogs bool
	// RefusalLogInterval is the refusals extension's log_interval (the least time between two
	// lines about one reason's refusals, and the quiet time that ends them); 0 keeps 30s.
	RefusalLogInterval time.Duration
	// PushbackWindow is how long the readiness endpoint answers 503 after the gateway pushed a
	// sender back; 0 keeps 10s.
	PushbackWindow time.Duration
	// TracesURL turns on the gateway's own traces (service::telemetry::traces), exported by
	// OTLP/HTTP to this URL (http://host:port/v1/traces) in batches sent every 100 ms; empty:
	// off, the Collector's default.
	TracesURL string
}

// GatewayPorts are the loopback ports a gateway listens on.
type GatewayPorts struct {
	GRPC, HTTP, Metrics, Health, Readiness int
}

// GRPCAddr is the OTLP/gRPC receiver's address.
func (p GatewayPorts) GRPCAddr() string { return "127.0.0.1:" + strconv.Itoa(p.GRPC) }

// HTTPAddr is the OTLP/HTTP receiver's address.
func (p GatewayPorts) HTTPAddr() string { return "127.0.0.1:" + strconv.Itoa(p.HTTP) }

// MetricsURL is the Prometheus endpoint of the gateway's own telemetry.
func (p GatewayPorts) MetricsURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", p.Metrics)
}

// HealthURL answers 200 once every pipeline runs.
func (p GatewayPorts) HealthURL() string { return fmt.Sprintf("http://127.0.0.1:%d/", p.Health) }

// ReadinessURL answers 200 while the gateway takes data, 503 while it pushes senders back.
func (p GatewayPorts) ReadinessURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/readyz", p.Readiness)
}

// YAML is the Collector configuration of c, listening on loopback at ports.
func (c GatewayConfig) YAML(ports GatewayPorts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "extensions:\n  health_check:\n    endpoint: 127.0.0.1:%d\n", ports.Health)
	// The receivers' middleware: InvalidArgument for undecodable gRPC requests, refusals
	// counted and logged, readiness that reflects pushback.
	logInterval, window := c.RefusalLogInterval, c.PushbackWindow
	if logInterval == 0 {
		logInterval = 30 * time.Second
	}
	if window == 0 {
		window = 10 * time.Second
	}
	fmt.Fprintf(&b, "  refusals:\n    log_interval: %s\n    readiness:\n      endpoint: 127.0.0.1:%d\n      path: /readyz\n      pushback_window: %s\n",
		logInterval, ports.Readiness, window)
	extensions := []string{"health_check", "refusals"}
	if c.Downstream != "" {
		// The exporter's middleware: a downstream outage logged at its start, summarized while
		// it lasts, and logged at its end.
		fmt.Fprintf(&b, "  downstream_watch:\n    summary_interval: %s\n", logInterval)
		extensions = append(extensions, "downstream_watch")
	}
	if c.StorageDir != "" {
		fmt.Fprintf(&b, "  file_storage:\n    directory: %s\n    create_directory: true\n    fsync: true\n", c.StorageDir)
		extensions = append(extensions, "file_storage")
	}
	if c.OutputFile != "" {
		// Without it pdata's marshaler appends the resource attributes' strings to the
		// string table, as orphans.
		b.WriteString("  otlp_plain: {}\n")
		extensions = append(extensions, "otlp_plain")
	}
	limit := c.MemoryLimitMiB
	if limit == 0 {
		limit = 1024
	}
	tls := ""
	if c.TLSCert != "" {
		tls = fmt.Sprintf("\n        tls:\n          cert_file: %s\n          key_file: %s", c.TLSCert, c.TLSKey)
		if c.TLSClientCA != "" {
			tls += "\n          client_ca_file: " + c.TLSClientCA
		}
	}
	fmt.Fprintf(&b, `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
        max_recv_msg_size_mib: 16
        middlewares: [{id: refusals}]%s
      http:
        endpoint: 127.0.0.1:%d
        middlewares: [{id: refusals}]%s
processors:
  memory_limiter:
    check_interval: 100ms
    limit_mib: %d
    spike_limit_mib: %d
  symbolize:
    endpoint: %s
`, ports.GRPC, tls, ports.HTTP, tls, limit, limit/2, c.Symbolizer)
	if c.SymbolizerTokenFile != "" {
		fmt.Fprintf(&b, "    bearer_token_file: %s\n", c.SymbolizerTokenFile)
	}
	if c.Timeout > 0 {
		fmt.Fprintf(&b, "    timeout: %s\n", c.Timeout)
	}
	if c.Deadline > 0 {
		fmt.Fprintf(&b, "    deadline: %s\n", c.Deadline)
	}
	if c.CacheEntries != nil {
		fmt.Fprintf(&b, "    cache_entries: %d\n", *c.CacheEntries)
	}
	processors := []string{"memory_limiter", "symbolize"}
	if c.K8sPassthrough {
		b.WriteString("  k8sattributes:\n    auth_type: none\n    passthrough: true\n")
		processors = append([]string{"k8sattributes"}, processors...)
	}
	b.WriteString("exporters:\n")
	var exporters []string
	if c.Downstream != "" {
		exporters = append(exporters, "otlp_grpc")
		fmt.Fprintf(&b, `  otlp_grpc:
    endpoint: %s
    middlewares: [{id: downstream_watch}]
    tls:
      insecure: true
    timeout: 2s
    retry_on_failure:
      initial_interval: 50ms
      max_interval: 500ms
      max_elapsed_time: 0
    sending_queue:
      num_consumers: 2
`, c.Downstream)
		if c.QueueSize > 0 {
			fmt.Fprintf(&b, "      sizer: requests\n      queue_size: %d\n", c.QueueSize)
		}
		if c.StorageDir != "" {
			b.WriteString("      storage: file_storage\n")
		}
	}
	if c.OutputFile != "" {
		exporters = append(exporters, "file")
		fmt.Fprintf(&b, "  file:\n    path: %s\n    format: proto\n    encoding: otlp_plain\n    create_directory: true\n", c.OutputFile)
	}
	if c.PprofDir != "" {
		exporters = append(exporters, "pprof")
		fmt.Fprintf(&b, "  pprof:\n    directory: %s\n", c.PprofDir)
		if c.PprofKeepFiles > 0 {
			fmt.Fprintf(&b, "    keep_files: %d\n", c.PprofKeepFiles)
		}
	}
	if len(exporters) == 0 {
		// A pipeline needs an exporter; debug at its basic verbosity only counts.
		b.WriteString("  debug: {}\n")
		exporters = append(exporters, "debug")
	}
	logs := ""
	if c.JSONLogs {
		logs = "\n    logs:\n      encoding: json"
	}
	if c.TracesURL != "" {
		logs += fmt.Sprintf(`
    traces:
      processors:
        - batch:
            schedule_delay: 100
            exporter:
              otlp:
                protocol: http/protobuf
                endpoint: %s`, c.TracesURL)
	}
	fmt.Fprintf(&b, `service:
  extensions: [%s]
  telemetry:%s
    metrics:
      level: detailed
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
  pipelines:
    profiles:
      receivers: [otlp]
      processors: [%s]
      exporters: [%s]
`, strings.Join(extensions, ", "), logs, ports.Metrics, strings.Join(processors, ", "), strings.Join(exporters, ", "))
	return b.String()
}

// StartGateway writes cfg as configPath and starts the gateway binary bin with it on fresh
// loopback ports, waiting until its health endpoint answers.
func StartGateway(ctx context.Context, bin, configPath, logPath string, cfg GatewayConfig, timeout time.Duration) (*Proc, GatewayPorts, error) {
	var gp GatewayPorts
	var writeErr error
	p, _, err := StartService(ctx, "gateway", logPath, bin, 5, timeout, func(ports []int) ([]string, string) {
		gp = GatewayPorts{GRPC: ports[0], HTTP: ports[1], Metrics: ports[2], Health: ports[3], Readiness: ports[4]}
		if err := os.WriteFile(configPath, []byte(cfg.YAML(gp)), 0o644); err != nil {
			writeErr = err
		}
		return []string{"--config", configPath}, gp.HealthURL()
	})
	if writeErr != nil {
		return nil, gp, fmt.Errorf("gateway config: %w", writeErr)
	}
	if err != nil {
		return nil, gp, err
	}
	return p, gp, nil
}

// RestartGateway starts bin again with the configuration StartGateway wrote, on the same ports.
func RestartGateway(ctx context.Context, bin, configPath, logPath string, ports GatewayPorts, timeout time.Duration) (*Proc, error) {
	p, err := Start("gateway", logPath, bin, "--config", configPath)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := WaitReady(rctx, p, ports.HealthURL()); err != nil {
		_ = p.Stop(syscall.SIGKILL, time.Second)
		return nil, err
	}
	return p, nil
}

// ReadOTLPFile reads the gateway's file exporter output (format: proto): every request as a
// 4-byte big-endian length, then the ExportProfilesServiceRequest. A file that does not exist
// holds no request.
func ReadOTLPFile(path string) ([]pprofile.Profiles, error) {
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Size() > maxFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d read back here", path, st.Size(), maxFileBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []pprofile.Profiles
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, fmt.Errorf("%s: record %d: %d trailing bytes, not a length", path, len(out), len(b))
		}
		n := binary.BigEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return nil, fmt.Errorf("%s: record %d of %d bytes, %d left", path, len(out), n, len(b)-4)
		}
		pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b[4 : 4+n])
		if err != nil {
			return nil, fmt.Errorf("%s: record %d: %w", path, len(out), err)
		}
		out = append(out, pd)
		b = b[4+n:]
	}
	return out, nil
}
