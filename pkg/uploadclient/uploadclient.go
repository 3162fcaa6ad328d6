// Package uploadclient is the client side of the debuginfo upload protocol
// (DebuginfoService in proto/profsym/debuginfo/v1): ShouldUpload, InitiateUpload, the PUT of
// the bytes outside the RPC, FinishUpload, and which failures are worth trying again. The
// node collector (uploading what it finds on a node) and `symbolizer upload` (run by CI
// pipelines) speak it through this one client, so they send the same requests, guard the
// token the same way and classify failures alike; each keeps its own policy (what to offer,
// how often to try).
package uploadclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	"github.com/profsym/profsym/pkg/tracing"
)

// Options configure a Client.
type Options struct {
	// Server is the symbolizer's base URL (http:// or https://).
	Server string
	// Token returns the bearer token ("" sends none). It is asked for every RPC and PUT, so a
	// caller that reads it from a file picks up a rotated token without a restart. Nil: no
	// token.
	Token func() (string, error)
	// RPCTimeout bounds each RPC (0: only the caller's context). A PUT, whose length depends
	// on the file, is bounded by the context the caller gives it.
	RPCTimeout time.Duration
	// HTTPClient is used for RPCs and PUTs (default: a new client).
	HTTPClient *http.Client
	// Tenant, when set, is sent as the X-Profsym-Tenant header on every RPC and PUT to the
	// symbolizer: the tenant a token that belongs to no tenant (an operator's) acts for.
	Tenant string
}

// TenantHeader names the tenant a request acts for (see Options.Tenant).
const TenantHeader = "X-Profsym-Tenant"

// Client speaks the upload protocol to one symbolizer.
type Client struct {
	opts Options
	rpc  debuginfov1connect.DebuginfoServiceClient
}

// New returns a Client of the symbolizer at opts.Server.
func New(opts Options) (*Client, error) {
	if !strings.HasPrefix(opts.Server, "http://") && !strings.HasPrefix(opts.Server, "https://") {
		return nil, fmt.Errorf("server URL %q: want an http:// or https:// URL", opts.Server)
	}
	opts.Server = strings.TrimSuffix(opts.Server, "/")
	if opts.Token == nil {
		opts.Token = func() (string, error) { return "", nil }
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	c := &Client{opts: opts}
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			tok, err := c.opts.Token()
			if err != nil {
				return nil, err
			}
			if tok != "" {
				req.Header().Set("Authorization", "Bearer "+tok)
			}
			if c.opts.Tenant != "" {
				req.Header().Set(TenantHeader, c.opts.Tenant)
			}
			if c.opts.RPCTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.opts.RPCTimeout)
				defer cancel()
			}
			return next(ctx, req)
		}
	})
	// RPCs made under a span (the collector's upload span) are client spans of its trace,
	// carrying W3C trace context to the symbolizer; without one they make none.
	traces, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(tracing.ChildOnly(otel.GetTracerProvider())),
		otelconnect.WithoutMetrics(), otelconnect.WithPropagator(tracing.Propagator))
	if err != nil {
		return nil, fmt.Errorf("connect tracing: %w", err)
	}
	c.rpc = debuginfov1connect.NewDebuginfoServiceClient(opts.HTTPClient, opts.Server, connect.WithInterceptors(traces, auth))
	return c, nil
}

// RPC is the DebuginfoService client underneath, with the token and the timeout, for the
// calls outside the upload protocol (Get, List, Delete).
func (c *Client) RPC() debuginfov1connect.DebuginfoServiceClient { return c.rpc }

// File describes the file an upload is about.
type File struct {
	BuildID     string
	BuildIDType debuginfov1.BuildIDType
	Type        debuginfov1.DebuginfoType
	SHA256      string // hex
	Size        int64
	Source      debuginfov1.UploadSource
	// Name is the binary's name (optional): the server's retention keeps the last builds
	// of each name.
	Name string
}

// ShouldUpload asks whether the server wants f.
func (c *Client) ShouldUpload(ctx context.Context, f File) (*debuginfov1.ShouldUploadResponse, error) {
	resp, err := c.rpc.ShouldUpload(ctx, connect.NewRequest(&debuginfov1.ShouldUploadRequest{
		BuildId: f.BuildID, BuildIdType: f.BuildIDType, Type: f.Type, Sha256: f.SHA256, Size: uint64(f.Size), Source: f.Source}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// InitiateUpload opens an upload of f. The server repeats ShouldUpload's decision
// atomically: AlreadyExists when a better file landed in between, Aborted when another
// upload of a different file is under way.
func (c *Client) InitiateUpload(ctx context.Context, f File) (*debuginfov1.InitiateUploadResponse, error) {
	resp, err := c.rpc.InitiateUpload(ctx, connect.NewRequest(&debuginfov1.InitiateUploadRequest{
		BuildId: f.BuildID, BuildIdType: f.BuildIDType, Type: f.Type, Sha256: f.SHA256, Size: uint64(f.Size), Source: f.Source, Name: f.Name}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// FinishUpload closes the upload; the server verifies the stored file and returns its record.
func (c *Client) FinishUpload(ctx context.Context, buildID, uploadID string) (*debuginfov1.FinishUploadResponse, error) {
	resp, err := c.rpc.FinishUpload(ctx, connect.NewRequest(&debuginfov1.FinishUploadRequest{BuildId: buildID, UploadId: uploadID}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// Put sends the size bytes of body where init says: a presigned object-store URL or the
// symbolizer's own upload endpoint. An answer other than 2xx is a *StatusError. A URL that
// makes no request is a permanent error (Retry does not try it again).
func (c *Client) Put(ctx context.Context, init *debuginfov1.InitiateUploadResponse, body io.Reader, size int64) error {
	method := init.GetMethod()
	if method == "" {
		method = http.MethodPut
	}
	req, err := http.NewRequestWithContext(ctx, method, init.GetUploadUrl(), body)
	if err != nil {
		return backoff.Permanent(fmt.Errorf("upload URL: %w", err))
	}
	req.ContentLength = size
	for k, v := range init.GetRequiredHeaders() {
		req.Header.Set(k, v)
	}
	// The token goes only to the symbolizer itself, never to a presigned object-store URL.
	if strings.HasPrefix(init.GetUploadUrl(), c.opts.Server+"/") {
		tok, err := c.opts.Token()
		if err != nil {
			return err
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if c.opts.Tenant != "" {
			req.Header.Set(TenantHeader, c.opts.Tenant)
		}
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("PUT: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &StatusError{Status: resp.StatusCode, Message: strings.TrimSpace(string(msg))}
	}
	return nil
}

// StatusError is a PUT answered with a status other than 2xx.
type StatusError struct {
	Status  int
	Message string // the start of the answer's body
}

func (e *StatusError) Error() string { return fmt.Sprintf("PUT: HTTP %d: %s", e.Status, e.Message) }

// Retryable reports whether the same step, tried again in a few seconds, may succeed: the
// server or the network failed, or was busy. A request the server refused, or one the
// caller cancelled, is not.
func Retryable(err error) bool { return retryable(err, false) }

// RetryableLater reports whether the same file, offered again later (on its next sighting,
// minutes on), may succeed: what Retryable says, and also a spent quota and a refused token,
// which rotating a Secret fixes without a restart.
func RetryableLater(err error) bool { return retryable(err, true) }

func retryable(err error, later bool) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status >= 500 || se.Status == http.StatusTooManyRequests
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeInternal, connect.CodeUnknown:
			return true
		case connect.CodeResourceExhausted, connect.CodeUnauthenticated, connect.CodePermissionDenied:
			return later
		}
		return false
	}
	return later || !errors.Is(err, context.Canceled)
}

// Retry runs op up to attempts times (at least once) while its error is Retryable, waiting
// between attempts with exponential backoff and jitter, so that clients failed by the same
// outage do not come back in step. An error op marks with backoff.Permanent is not retried.
func Retry[T any](ctx context.Context, attempts uint, op func() (T, error)) (T, error) {
	return backoff.Retry(ctx, func() (T, error) {
		v, err := op()
		if err != nil && !Retryable(err) {
			return v, backoff.Permanent(err)
		}
		return v, err
	}, backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: 200 * time.Millisecond, RandomizationFactor: 0.3, Multiplier: 2, MaxInterval: 10 * time.Second}),
		backoff.WithMaxTries(max(attempts, 1)))
}
