// Package exporter sends symbolized profiles on: OTLP/gRPC and OTLP/HTTP to a downstream
// endpoint, OTLP protobuf files, and pprof files. Each exporter's Export is called by a queue
// worker, which retries unless the error is queue.Permanent.
package exporter

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/services/gateway/internal/gzipcodec"
	"github.com/profsym/profsym/services/gateway/internal/queue"
)

// Exporter sends one request downstream.
type Exporter interface {
	Name() string
	Export(ctx context.Context, pd pprofile.Profiles) error
	Close() error
}

// OTLPConfig configures the OTLP exporters.
type OTLPConfig struct {
	// Endpoint: host:port for gRPC; a URL for HTTP (the path defaults to
	// /v1development/profiles).
	Endpoint string
	Headers  map[string]string
	// Insecure sends without TLS (gRPC) or allows http:// (HTTP, implied by the scheme).
	Insecure bool
	// CAFile, if set, is the PEM bundle that verifies the downstream's certificate.
	CAFile             string
	InsecureSkipVerify bool
	Gzip               bool
	Timeout            time.Duration
}

func (c OTLPConfig) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificates", c.CAFile)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// GRPC exports over OTLP/gRPC.
type GRPC struct {
	cfg  OTLPConfig
	conn *grpc.ClientConn
}

// exportMethod is the OTLP profiles Export RPC. The gateway calls it with bytes from Marshal
// rather than through pdata's client, which encodes resource and scope attributes as
// string-table references of its own (see Marshal).
const exportMethod = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// rawMessage is an encoded request or response; rawCodec passes it through as it is.
type rawMessage struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	m.b = data.Materialize()
	return nil
}

// Name is the content subtype: the bytes are protobuf.
func (rawCodec) Name() string { return "proto" }

// NewGRPC dials lazily: an unreachable endpoint shows up as retried export errors.
func NewGRPC(cfg OTLPConfig) (*GRPC, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	var creds credentials.TransportCredentials
	if cfg.Insecure {
		creds = insecure.NewCredentials()
	} else {
		tc, err := cfg.tlsConfig()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("otlp grpc client for %s: %w", cfg.Endpoint, err)
	}
	return &GRPC{cfg: cfg, conn: conn}, nil
}

func (e *GRPC) Name() string { return "otlp_grpc" }

func (e *GRPC) Export(ctx context.Context, pd pprofile.Profiles) error {
	body, err := Marshal(pd)
	if err != nil {
		return queue.Permanent(err)
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	md := metadata.New(e.cfg.Headers)
	// What pdata's client sends: the schema version the bytes are encoded in.
	md.Set(otlpprofiles.DevelopmentVersionHeader, otlpprofiles.DevelopmentVersion)
	ctx = metadata.NewOutgoingContext(ctx, md)
	opts := []grpc.CallOption{grpc.ForceCodecV2(rawCodec{})}
	if e.cfg.Gzip {
		opts = append(opts, grpc.UseCompressor(gzipcodec.Name))
	}
	var raw rawMessage
	err = e.conn.Invoke(ctx, exportMethod, &rawMessage{b: body}, &raw, opts...)
	if err != nil {
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Canceled, codes.Internal, codes.Unknown:
			return fmt.Errorf("otlp grpc export to %s: %w", e.cfg.Endpoint, err)
		default:
			return queue.Permanent(fmt.Errorf("otlp grpc export to %s: %w", e.cfg.Endpoint, err))
		}
	}
	resp := pprofileotlp.NewExportResponse()
	if err := resp.UnmarshalProto(raw.b); err != nil {
		// The data was accepted; only the partial-success report is unreadable.
		slog.Warn("unreadable export response", "exporter", e.Name(), "err", err)
		return nil
	}
	if ps := resp.PartialSuccess(); ps.RejectedProfiles() > 0 {
		slog.Warn("downstream rejected part of an export", "exporter", e.Name(), "rejected_profiles", ps.RejectedProfiles(), "message", ps.ErrorMessage())
	}
	return nil
}

func (e *GRPC) Close() error { return e.conn.Close() }

// HTTP exports over OTLP/HTTP with protobuf bodies.
type HTTP struct {
	cfg    OTLPConfig
	url    string
	client *http.Client
}

// HTTPPath is the OTLP/HTTP path for profiles.
const HTTPPath = "/v1development/profiles"

// NewHTTP validates the endpoint URL.
func NewHTTP(cfg OTLPConfig) (*HTTP, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("otlp http endpoint %q: want http(s)://host[:port][/path]", cfg.Endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = HTTPPath
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &HTTP{cfg: cfg, url: u.String(), client: &http.Client{Transport: tr, Timeout: cfg.Timeout}}, nil
}

func (e *HTTP) Name() string { return "otlp_http" }

func (e *HTTP) Export(ctx context.Context, pd pprofile.Profiles) error {
	body, err := Marshal(pd)
	if err != nil {
		return queue.Permanent(err)
	}
	if e.cfg.Gzip {
		var buf bytes.Buffer
		zw := gzipcodec.NewWriter(&buf)
		if _, err := zw.Write(body); err != nil {
			return fmt.Errorf("gzip body: %w", err)
		}
		if err := zw.Close(); err != nil {
			return fmt.Errorf("gzip body: %w", err)
		}
		body = buf.Bytes()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return queue.Permanent(fmt.Errorf("build request: %w", err))
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.cfg.Gzip {
		req.Header.Set("Content-Encoding", gzipcodec.Name)
	}
	for k, v := range e.cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("otlp http export to %s: %w", e.url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		return fmt.Errorf("otlp http export to %s: %s", e.url, resp.Status)
	default:
		return queue.Permanent(fmt.Errorf("otlp http export to %s: %s: %s", e.url, resp.Status, strings.TrimSpace(string(msg))))
	}
}

func (e *HTTP) Close() error {
	e.client.CloseIdleConnections()
	return nil
}
