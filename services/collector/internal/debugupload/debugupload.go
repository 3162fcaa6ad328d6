// Package debugupload is the collector's node-side debuginfo upload: executables and
// libraries seen in process mappings that carry symbols (DWARF, a .symtab or a Go
// .gopclntab) are offered to the symbolizer through DebuginfoService.ShouldUpload (source
// NODE, type EXECUTABLE) and uploaded once, so binaries nobody uploaded from CI still
// symbolize. A stripped file's separate debug file, where the mapping process's filesystem
// holds one (DebugDir), is offered as DEBUGINFO with the dwz supplementary file it names. The
// server ranks sources: a file a CI pipeline uploaded is answered BETTER_STORED and never
// replaced from a node.
//
// It is built to stay out of the way of sampling: Offer never blocks (a bounded queue,
// dropping and counting when full), one worker uploads at a time, files above a size cap
// are skipped, and the bytes sent are rate-limited.
//
// The protocol itself is pkg/uploadclient's, shared with `symbolizer upload`; what is the
// node's own is the policy: which files, when, how fast, and a failure worth a later try
// (uploadclient.RetryableLater) waits for the file's next sighting instead of a retry now.
package debugupload

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/tracing"
	"github.com/profsym/profsym/pkg/uploadclient"
)

// tracer makes root spans: an export or an upload is where a collector trace begins.
var tracer = otel.Tracer("github.com/profsym/profsym/services/collector/internal/debugupload")

// Options configure an Uploader.
type Options struct {
	// SymbolizerURL is the symbolizer's base URL (http://host:port).
	SymbolizerURL string
	// TokenFile holds the bearer token; it is read for every file, so a rotated Secret
	// takes effect without a restart. Token is used when TokenFile is empty.
	TokenFile string
	Token     string
	// MaxFileBytes is the size cap: larger files are not offered (default 256 MiB).
	MaxFileBytes int64
	// BytesPerSecond limits the upload bandwidth (default 2 MiB/s); Burst is the most
	// sent at once (default 1 MiB).
	BytesPerSecond float64
	Burst          int64
	// QueueSize bounds the files waiting to be considered (default 64); offers beyond it
	// are dropped and counted, and the file is offered again when it is seen again.
	QueueSize int
	// MaxSeen bounds the build IDs remembered as handled (default 65536); beyond it the
	// memory is cleared and the server's ALREADY_STORED answers dedupe instead.
	MaxSeen int
	// Timeout bounds one RPC or the PUT of one file (default 5 minutes).
	Timeout time.Duration
	// HTTPClient is used for RPCs and PUTs (default: a new client).
	HTTPClient *http.Client
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
}

func (o *Options) defaults() error {
	if !strings.HasPrefix(o.SymbolizerURL, "http://") && !strings.HasPrefix(o.SymbolizerURL, "https://") {
		return fmt.Errorf("symbolizer URL %q: want http:// or https://", o.SymbolizerURL)
	}
	o.SymbolizerURL = strings.TrimSuffix(o.SymbolizerURL, "/")
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 256 << 20
	}
	if o.BytesPerSecond <= 0 {
		o.BytesPerSecond = 2 << 20
	}
	if o.Burst <= 0 {
		o.Burst = 1 << 20
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 64
	}
	if o.MaxSeen <= 0 {
		o.MaxSeen = 1 << 16
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.HTTPClient == nil {
		// Uploads (presigned PUTs included) show as HTTP client spans of the upload's trace.
		o.HTTPClient = &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport,
			otelhttp.WithTracerProvider(tracing.ChildOnly(otel.GetTracerProvider())), otelhttp.WithPropagators(tracing.Propagator))}
	}
	return nil
}

// putAttempts is how many times one file's PUT is tried before the upload is left to expire.
const putAttempts = 4

// Outcomes of one offered file, as counted in metrics and Stats.
const (
	OutcomeUploaded      = "uploaded"
	OutcomeAlreadyStored = "already_stored"
	OutcomeBetterStored  = "better_stored"
	OutcomeInProgress    = "in_progress"
	OutcomeNoSymbols     = "no_symbols"
	OutcomeTooLarge      = "too_large"
	OutcomeDropped       = "dropped_queue_full"
	OutcomeFailed        = "failed"
)

// Uploader offers files to the symbolizer.
type Uploader struct {
	opts   Options
	log    *slog.Logger
	client *uploadclient.Client
	limit  *bucket
	queue  chan job

	mu     sync.Mutex
	seen   map[string]bool // primary build IDs queued or handled
	counts map[string]int64

	outcomes *prometheus.CounterVec
	bytes    prometheus.Counter
}

type job struct {
	f    *os.File
	ids  buildid.IDs
	name string // the path as the process mapped it, for logs
	root string // the root directory of a process that maps it, "" when unknown
}

// New returns an Uploader; Run must run for offers to be handled.
func New(opts Options, log *slog.Logger) (*Uploader, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	u := &Uploader{
		opts:   opts,
		log:    log,
		limit:  newBucket(opts.BytesPerSecond, opts.Burst),
		queue:  make(chan job, opts.QueueSize),
		seen:   map[string]bool{},
		counts: map[string]int64{},
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "profsym_collector", Name: "debuginfo_uploads_total",
			Help: "Files offered for node-side debuginfo upload, by outcome."}, []string{"outcome"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "profsym_collector", Name: "debuginfo_upload_bytes_total",
			Help: "Bytes of debuginfo uploaded from this node."}),
	}
	client, err := uploadclient.New(uploadclient.Options{Server: opts.SymbolizerURL, Token: u.token, RPCTimeout: opts.Timeout, HTTPClient: opts.HTTPClient})
	if err != nil {
		return nil, err
	}
	u.client = client
	if opts.Registerer != nil {
		queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "profsym_collector", Name: "debuginfo_upload_queue_length",
			Help: "Files waiting for node-side debuginfo upload."}, func() float64 { return float64(len(u.queue)) })
		if err := registerAll(opts.Registerer, u.outcomes, u.bytes, queued); err != nil {
			return nil, err
		}
	}
	return u, nil
}

func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register debuginfo upload metrics: %w", err)
		}
	}
	return nil
}

func (u *Uploader) token() (string, error) {
	if u.opts.TokenFile == "" {
		return u.opts.Token, nil
	}
	b, err := os.ReadFile(u.opts.TokenFile)
	if err != nil {
		return "", fmt.Errorf("read upload token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (u *Uploader) count(outcome string) {
	u.outcomes.WithLabelValues(outcome).Inc()
	u.mu.Lock()
	u.counts[outcome]++
	u.mu.Unlock()
}

// Stats returns how many offered files ended in each outcome.
func (u *Uploader) Stats() map[string]int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]int64, len(u.counts))
	for k, v := range u.counts {
		out[k] = v
	}
	return out
}

// forget lets a file be offered again (after a drop or a transient failure).
func (u *Uploader) forget(id string) {
	u.mu.Lock()
	delete(u.seen, id)
	u.mu.Unlock()
}

// Offer queues the file at path (reachable now, for example through
// /proc/<pid>/map_files) with the build IDs the collector computed for it. It does not
// block: a file whose primary build ID was offered before returns at once, and a full
// queue drops the offer. The file is opened here, so it stays readable after the process
// that mapped it exits. name is the path the process mapped, for logs; root is that
// process's root directory (/proc/<pid>/root), where the separate debug file of a stripped
// file is looked for (see DebugDir), or "" not to look.
func (u *Uploader) Offer(path, name, root string, ids buildid.IDs) {
	_, id := ids.Primary()
	if id == "" {
		return
	}
	u.mu.Lock()
	if u.seen[id] {
		u.mu.Unlock()
		return
	}
	if len(u.seen) >= u.opts.MaxSeen {
		u.seen = map[string]bool{}
	}
	u.seen[id] = true
	u.mu.Unlock()

	f, err := os.Open(path)
	if err != nil {
		u.log.Debug("debuginfo upload: open mapped file", "file", name, "err", err)
		u.forget(id)
		return
	}
	select {
	case u.queue <- job{f: f, ids: ids, name: name, root: root}:
	default:
		f.Close()
		u.forget(id)
		u.count(OutcomeDropped)
	}
}

// Run handles offers until ctx ends, then closes what is still queued.
func (u *Uploader) Run(ctx context.Context) {
	defer func() {
		for {
			select {
			case j := <-u.queue:
				j.f.Close()
			default:
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-u.queue:
			outcome, err := u.handle(ctx, j)
			j.f.Close()
			u.count(outcome)
			_, id := j.ids.Primary()
			switch {
			case err != nil && ctx.Err() == nil:
				u.log.Warn("debuginfo upload failed", "file", j.name, "build_id", id, "err", err)
				if uploadclient.RetryableLater(err) {
					u.forget(id)
				}
			case outcome == OutcomeInProgress:
				// Another node is uploading it; if that upload is abandoned, a later
				// sighting tries again.
				u.forget(id)
			case err == nil:
				u.log.Debug("debuginfo upload", "file", j.name, "build_id", id, "outcome", outcome)
			}
		}
	}
}

// HasSymbols reports whether an ELF file carries symbols worth uploading: DWARF, a
// non-empty .symtab, or a Go .gopclntab. A stripped file (at most .dynsym) gives the
// symbolizer nothing a node could not send as addresses, unless the server holds only a
// separate debug file of it and needs its program headers (EXECUTABLE_NEEDED).
func HasSymbols(f *elfx.File) bool {
	if f.HasDWARF() {
		return true
	}
	for _, s := range f.ELF().Sections {
		if s == nil || s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		if s.Type == elf.SHT_SYMTAB && s.Size > s.Entsize {
			return true
		}
		if s.Name == ".gopclntab" {
			return true
		}
	}
	return false
}

func (u *Uploader) handle(ctx context.Context, j job) (outcome string, err error) {
	// A span per offered file: its RPCs (ShouldUpload, Initiate, ...) and PUT are its children.
	typ, id := j.ids.Primary()
	ctx, span := tracer.Start(ctx, "collector.debuginfo.upload", trace.WithAttributes(
		attribute.String("profsym.build_id", typ+":"+id)))
	defer func() {
		span.SetAttributes(attribute.String("profsym.upload.outcome", outcome))
		tracing.End(span, err)
	}()
	st, err := j.f.Stat()
	if err != nil {
		return OutcomeFailed, fmt.Errorf("stat: %w", err)
	}
	size := st.Size()
	if size > u.opts.MaxFileBytes {
		return OutcomeTooLarge, nil
	}
	ef, err := elfx.Open(j.f, size, elfx.DefaultLimits())
	if err != nil {
		return OutcomeFailed, fmt.Errorf("parse ELF: %w", err)
	}
	// A file without DWARF may have its separate debug file in the process's filesystem
	// (before the file itself, so that the server knows to ask for a stripped file's program
	// headers). A stripped file gives the symbolizer no names, but its program headers are
	// what a separate debug file lacks: it is uploaded only when the server says so.
	if !ef.HasDWARF() && j.root != "" {
		u.offerDebugFile(ctx, j)
	}
	symbols := HasSymbols(ef)
	idType := map[string]debuginfov1.BuildIDType{
		buildid.TypeGNU: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, buildid.TypeGo: debuginfov1.BuildIDType_BUILD_ID_TYPE_GO,
		buildid.TypeHTLHash: debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH,
	}[typ]
	file := uploadclient.File{BuildID: id, BuildIDType: idType, Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE,
		Size: size, Source: debuginfov1.UploadSource_UPLOAD_SOURCE_NODE}
	var wanted func(debuginfov1.ShouldUploadReason) bool
	if !symbols {
		wanted = func(r debuginfov1.ShouldUploadReason) bool {
			return r == debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_EXECUTABLE_NEEDED
		}
	}
	return u.send(ctx, j.f, file, j.name, wanted)
}

// send offers one file to the server and uploads it when the server wants it and wanted, when
// not nil, accepts the server's reason (else the outcome is OutcomeNoSymbols). file's SHA256
// is computed here.
func (u *Uploader) send(ctx context.Context, f *os.File, file uploadclient.File, name string, wanted func(debuginfov1.ShouldUploadReason) bool) (string, error) {
	size := file.Size
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size)); err != nil {
		return OutcomeFailed, fmt.Errorf("hash: %w", err)
	}
	file.SHA256 = hex.EncodeToString(h.Sum(nil))
	should, err := u.client.ShouldUpload(ctx, file)
	if err != nil {
		return OutcomeFailed, fmt.Errorf("ShouldUpload: %w", err)
	}
	if wanted != nil && !wanted(should.GetReason()) {
		return OutcomeNoSymbols, nil
	}
	if !should.GetShouldUpload() {
		switch should.GetReason() {
		case debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_ALREADY_STORED:
			return OutcomeAlreadyStored, nil
		case debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_BETTER_STORED:
			return OutcomeBetterStored, nil
		case debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_UPLOAD_IN_PROGRESS:
			return OutcomeInProgress, nil
		case debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_TOO_LARGE:
			return OutcomeTooLarge, nil
		}
		return OutcomeFailed, fmt.Errorf("ShouldUpload declined with reason %v: %s", should.GetReason(), should.GetMessage())
	}
	init, err := u.client.InitiateUpload(ctx, file)
	if err != nil {
		// The decision is repeated atomically: a CI upload may have landed in between.
		if connect.CodeOf(err) == connect.CodeAlreadyExists {
			return OutcomeBetterStored, nil
		}
		if connect.CodeOf(err) == connect.CodeAborted {
			return OutcomeInProgress, nil
		}
		return OutcomeFailed, fmt.Errorf("InitiateUpload: %w", err)
	}
	if max := init.GetMaxSize(); max > 0 && uint64(size) > max {
		return OutcomeTooLarge, nil
	}
	// A PUT cut short (a connection the store closed, a 5xx) is sent again at once, a few
	// times: until this upload expires the server answers every node, this one included,
	// that it is in progress, so waiting for a later sighting would leave the binary
	// unsymbolized on every node for the upload's whole lifetime. The timeout bounds the
	// rate limiter's waits as well as the request.
	_, err = uploadclient.Retry(ctx, putAttempts, func() (struct{}, error) {
		pctx, cancel := context.WithTimeout(ctx, u.opts.Timeout)
		defer cancel()
		return struct{}{}, u.client.Put(pctx, init, &limitedReader{ctx: pctx, r: io.NewSectionReader(f, 0, size), b: u.limit}, size)
	})
	if err != nil {
		return OutcomeFailed, err
	}
	if _, err := u.client.FinishUpload(ctx, file.BuildID, init.GetUploadId()); err != nil {
		return OutcomeFailed, fmt.Errorf("FinishUpload: %w", err)
	}
	u.bytes.Add(float64(size))
	u.log.Info("uploaded debuginfo from this node", "file", name, "type", file.Type, "build_id", file.BuildID, "bytes", size)
	return OutcomeUploaded, nil
}
