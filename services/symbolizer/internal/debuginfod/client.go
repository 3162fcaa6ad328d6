// Package debuginfod speaks the debuginfod protocol both ways: a client that fetches files the
// store lacks from upstream servers (and stores them like uploads), and a server handler that
// serves the store at `GET /buildid/<id>/debuginfo|executable`.
package debuginfod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sync/singleflight"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/degraded"
	"github.com/profsym/profsym/pkg/tracing"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
)

var tracer = tracing.Tracer("github.com/profsym/profsym/services/symbolizer/internal/debuginfod")

// ClientOptions configures the upstream client.
type ClientOptions struct {
	URLs        []string
	Timeout     time.Duration // per request, including the body
	NegativeTTL time.Duration // how long a build ID no upstream has is not asked again
	MaxParallel int           // concurrent upstream requests
	MaxSize     int64         // largest file accepted
	// BreakerFailures consecutive failures open an upstream's circuit for BreakerOpen.
	BreakerFailures int
	BreakerOpen     time.Duration
	TempDir         string
	Logger          *slog.Logger
	// Count receives (upstream, result) per fetch; result is ok, not_found, error or
	// open_circuit.
	Count func(upstream, result string)
	// OnDegraded, when set, hears an upstream's degraded mode start (true) and end.
	OnDegraded func(upstream string, down bool)
}

// Client fetches from upstream debuginfod servers, in order.
type Client struct {
	opt       ClientOptions
	meta      *catalog.Catalog
	http      *http.Client
	sem       chan struct{}
	sf        singleflight.Group
	upstreams []*upstream

	mu  sync.Mutex
	neg map[string]time.Time
}

type upstream struct {
	url string
	// health tells the logs when the upstream starts failing, how it goes while it does, and
	// when it answers again: one line each, not one per failed fetch.
	health    *degraded.Tracker
	threshold int
	open      time.Duration
	mu        sync.Mutex
	failures  int
	openUntil time.Time
}

// ParseURLs splits DEBUGINFOD_URLS-style lists (space separated) and flag values.
func ParseURLs(values ...string) []string {
	var out []string
	for _, v := range values {
		for _, u := range strings.Fields(v) {
			out = append(out, strings.TrimSuffix(u, "/"))
		}
	}
	return out
}

// NewClient returns a client that stores what it fetches through md.
func NewClient(md *catalog.Catalog, opt ClientOptions) *Client {
	if opt.Timeout == 0 {
		opt.Timeout = 30 * time.Second
	}
	if opt.NegativeTTL == 0 {
		opt.NegativeTTL = 10 * time.Minute
	}
	if opt.MaxParallel == 0 {
		opt.MaxParallel = 4
	}
	if opt.BreakerFailures == 0 {
		opt.BreakerFailures = 5
	}
	if opt.BreakerOpen == 0 {
		opt.BreakerOpen = 30 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	c := &Client{opt: opt, meta: md, sem: make(chan struct{}, opt.MaxParallel), neg: map[string]time.Time{},
		// Fetches made for a traced Symbolize call show as HTTP client spans of its trace.
		http: &http.Client{Timeout: opt.Timeout, Transport: otelhttp.NewTransport(http.DefaultTransport,
			otelhttp.WithTracerProvider(tracing.ChildOnly(otel.GetTracerProvider())), otelhttp.WithPropagators(tracing.Propagator))}}
	for _, u := range opt.URLs {
		health := degraded.New("debuginfod upstream "+u,
			"files only it has are not fetched: their frames stay unsymbolized until it answers (the store and other upstreams still serve)",
			time.Minute, opt.Logger)
		if opt.OnDegraded != nil {
			health.OnChange(func(down bool) { opt.OnDegraded(u, down) })
		}
		c.upstreams = append(c.upstreams, &upstream{url: u, health: health, threshold: opt.BreakerFailures, open: opt.BreakerOpen})
	}
	return c
}

// kind is one of the files debuginfod serves for a build ID.
type kind struct {
	path string
	typ  debuginfov1.DebuginfoType
}

var (
	debuginfoKind  = kind{"debuginfo", debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO}
	executableKind = kind{"executable", debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE}
)

// Fetch implements symbolizeapi.Fetcher: the debug file, else the executable.
func (c *Client) Fetch(ctx context.Context, gnu string) (bool, error) {
	return c.get(ctx, gnu, debuginfoKind, executableKind)
}

// FetchExecutable implements symbolizeapi.Fetcher: the executable only, for the program
// headers a stored debug file lacks. Its misses are remembered apart from Fetch's.
func (c *Client) FetchExecutable(ctx context.Context, gnu string) (bool, error) {
	return c.get(ctx, gnu, executableKind)
}

func (c *Client) get(ctx context.Context, gnu string, kinds ...kind) (found bool, err error) {
	if len(c.upstreams) == 0 {
		return false, nil
	}
	ctx, span := tracing.Start(ctx, tracer, "debuginfod.fetch", attribute.String("profsym.build_id", gnu), attribute.String("profsym.debuginfod.kind", kinds[0].path))
	defer func() {
		span.SetAttributes(attribute.Bool("profsym.debuginfod.found", found))
		tracing.End(span, err)
	}()
	id := strings.ToLower(gnu)
	if catalog.ValidateID(debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, id) != nil {
		return false, fmt.Errorf("debuginfod: invalid build ID %q", gnu)
	}
	key := id
	for _, k := range kinds {
		key += "/" + k.path
	}
	c.mu.Lock()
	until, negative := c.neg[key]
	c.mu.Unlock()
	if negative && time.Now().Before(until) {
		span.SetAttributes(attribute.Bool("profsym.debuginfod.negative_cache_hit", true))
		return false, nil
	}
	ch := c.sf.DoChan(key, func() (any, error) {
		return c.fetch(context.WithoutCancel(ctx), id, key, kinds)
	})
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return false, r.Err
		}
		return r.Val.(bool), nil
	}
}

// ErrNotFound is Download's error for a file the server does not have.
var ErrNotFound = errors.New("not found")

// fetch asks each upstream for each kind in turn and stores the first file found. key names
// the request in the negative cache.
func (c *Client) fetch(ctx context.Context, id, key string, kinds []kind) (bool, error) {
	var errs []error
	for _, u := range c.upstreams {
		if !u.allow() {
			c.count(u.url, "open_circuit")
			err := fmt.Errorf("%s: circuit open after repeated failures", u.url)
			u.health.Fail(err)
			errs = append(errs, err)
			continue
		}
		for _, kind := range kinds {
			start := time.Now()
			path, err := c.download(ctx, u.url+"/buildid/"+id+"/"+kind.path)
			if errors.Is(err, ErrNotFound) {
				u.result(true, start)
				c.count(u.url, "not_found")
				continue
			}
			if err != nil {
				u.result(false, start)
				c.count(u.url, "error")
				u.health.Fail(err)
				c.opt.Logger.Debug("debuginfod fetch failed", "upstream", u.url, "build_id", id, "err", err)
				errs = append(errs, err)
				break
			}
			u.result(true, start)
			_, err = c.meta.Ingest(ctx, catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: id}, path, kind.typ, debuginfov1.UploadSource_UPLOAD_SOURCE_DEBUGINFOD)
			if rerr := os.Remove(path); rerr != nil {
				c.opt.Logger.Warn("remove downloaded debuginfod file", "path", path, "err", rerr)
			}
			if err != nil {
				c.count(u.url, "error")
				c.opt.Logger.Warn("debuginfod file not stored", "upstream", u.url, "build_id", id, "err", err)
				errs = append(errs, fmt.Errorf("%s: store fetched file: %w", u.url, err))
				continue
			}
			c.count(u.url, "ok")
			c.opt.Logger.Info("fetched from debuginfod", "upstream", u.url, "build_id", id, "kind", kind.path)
			return true, nil
		}
	}
	if len(errs) > 0 {
		return false, fmt.Errorf("debuginfod: %w", errors.Join(errs...))
	}
	c.mu.Lock()
	if len(c.neg) > 100000 {
		c.neg = map[string]time.Time{}
	}
	c.neg[key] = time.Now().Add(c.opt.NegativeTTL)
	c.mu.Unlock()
	return false, nil
}

func (c *Client) download(ctx context.Context, url string) (string, error) {
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return Download(ctx, c.http, url, c.opt.TempDir, c.opt.MaxSize)
}

// Download GETs url (a debuginfod /buildid/<id>/<kind> address) into a new file in dir (the
// default temporary directory when empty) and returns the file's path: ErrNotFound when the
// server has no such file, an error for any other answer or for a body over maxSize bytes (0:
// no cap), with nothing left behind.
func Download(ctx context.Context, hc *http.Client, url, dir string, maxSize int64) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		// A *url.Error: it names the method and the address.
		return "", err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", ErrNotFound
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if maxSize > 0 && resp.ContentLength > maxSize {
		return "", fmt.Errorf("GET %s: %d bytes is over the size cap of %d", url, resp.ContentLength, maxSize)
	}
	f, err := os.CreateTemp(dir, "debuginfod-*")
	if err != nil {
		return "", err
	}
	limit := maxSize
	if limit <= 0 {
		limit = 1 << 62
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = fmt.Errorf("body over the size cap of %d bytes", limit)
	}
	if err != nil {
		if rerr := os.Remove(f.Name()); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the partial download: %w", rerr))
		}
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	return f.Name(), nil
}

func (c *Client) count(up, result string) {
	if c.opt.Count != nil {
		c.opt.Count(up, result)
	}
}

func (u *upstream) allow() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return !time.Now().Before(u.openUntil)
}

// result records the outcome of a download begun at start.
func (u *upstream) result(ok bool, start time.Time) {
	if ok {
		u.health.OKStarted(start)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if ok {
		u.failures = 0
		return
	}
	u.failures++
	if u.failures >= u.threshold {
		u.openUntil = time.Now().Add(u.open)
		u.failures = 0
	}
}
