// Package server wires the symbolizer's parts into one HTTP server: the Connect services
// (Connect, gRPC and gRPC-Web over HTTP/1.1 and h2c, or TLS), gRPC health and reflection,
// /healthz, /readyz, /metrics, the raw upload endpoint and the debuginfod-compatible paths,
// on one port (/metrics on a port of its own when --metrics-listen says so); and it runs that
// server with graceful shutdown.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"connectrpc.com/otelconnect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"

	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/degraded"
	"github.com/profsym/profsym/pkg/gctune"
	"github.com/profsym/profsym/pkg/lease"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/pkg/tracing"
	"github.com/profsym/profsym/services/symbolizer/internal/auth"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/coverage"
	"github.com/profsym/profsym/services/symbolizer/internal/debuginfod"
	"github.com/profsym/profsym/services/symbolizer/internal/indexcache"
	"github.com/profsym/profsym/services/symbolizer/internal/metrics"
	"github.com/profsym/profsym/services/symbolizer/internal/replica"
	"github.com/profsym/profsym/services/symbolizer/internal/resultcache"
	"github.com/profsym/profsym/services/symbolizer/internal/retention"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
	"github.com/profsym/profsym/services/symbolizer/internal/tenant"
	"github.com/profsym/profsym/services/symbolizer/internal/ui"
	"github.com/profsym/profsym/services/symbolizer/internal/uploadapi"
)

// Config is the `symbolizer serve` command line; every flag has a SYMBOLIZER_* variable.
type Config struct {
	Listen          string        `default:"127.0.0.1:7070" env:"SYMBOLIZER_LISTEN" help:"Address to serve every API on. Loopback by default: a store holds whole binaries, so reaching it from elsewhere is a choice (--listen=:7070), best made with read tokens."`
	MetricsListen   string        `name:"metrics-listen" env:"SYMBOLIZER_METRICS_LISTEN" help:"Serve /metrics on this address, without a token, instead of on --listen (where it is guarded like reads). For a scraper that a network policy admits to this port alone."`
	TLSCert         string        `name:"tls-cert" env:"SYMBOLIZER_TLS_CERT" type:"path" help:"TLS certificate (PEM); serves HTTPS and HTTP/2 with --tls-key."`
	TLSKey          string        `name:"tls-key" env:"SYMBOLIZER_TLS_KEY" type:"path" help:"TLS private key (PEM)."`
	PublicURL       string        `name:"public-url" env:"SYMBOLIZER_PUBLIC_URL" help:"Base URL clients reach this server at, used in upload URLs (default: from the request's Host)."`
	ShutdownTimeout time.Duration `default:"30s" env:"SYMBOLIZER_SHUTDOWN_TIMEOUT" help:"How long in-flight requests may take to finish on shutdown."`

	StoreDir       string        `default:"./profsym-data" env:"SYMBOLIZER_STORE_DIR" type:"path" help:"Folder store (used unless --s3-endpoint is set)."`
	S3Endpoint     string        `name:"s3-endpoint" env:"SYMBOLIZER_S3_ENDPOINT" help:"S3-compatible endpoint host:port; selects the S3 store."`
	S3Bucket       string        `name:"s3-bucket" env:"SYMBOLIZER_S3_BUCKET" help:"Bucket (must exist)."`
	S3Prefix       string        `name:"s3-prefix" env:"SYMBOLIZER_S3_PREFIX" help:"Key prefix inside the bucket."`
	S3Region       string        `name:"s3-region" env:"SYMBOLIZER_S3_REGION" help:"Bucket region."`
	S3AccessKey    string        `name:"s3-access-key" env:"SYMBOLIZER_S3_ACCESS_KEY" help:"Access key."`
	S3AccessFile   string        `name:"s3-access-key-file" env:"SYMBOLIZER_S3_ACCESS_KEY_FILE" type:"path" help:"File holding the access key."`
	S3SecretKey    string        `name:"s3-secret-key" env:"SYMBOLIZER_S3_SECRET_KEY" help:"Secret key."`
	S3SecretFile   string        `name:"s3-secret-key-file" env:"SYMBOLIZER_S3_SECRET_KEY_FILE" type:"path" help:"File holding the secret key."`
	S3Insecure     bool          `name:"s3-insecure" env:"SYMBOLIZER_S3_INSECURE" help:"Plain HTTP to the S3 endpoint."`
	S3Create       bool          `name:"s3-create-bucket" env:"SYMBOLIZER_S3_CREATE_BUCKET" help:"Create the bucket at start when it does not exist (development MinIO)."`
	S3MaxRetries   int           `name:"s3-max-retries" default:"3" env:"SYMBOLIZER_S3_MAX_RETRIES" help:"Attempts of one S3 request before it fails (the client backs off between them). Few: a store that is down shows as unavailable within seconds, and callers retry."`
	MaxUpload      uint64        `name:"max-upload-bytes" default:"4294967296" env:"SYMBOLIZER_MAX_UPLOAD_BYTES" help:"Largest file accepted."`
	UploadTTL      time.Duration `name:"upload-ttl" default:"15m" env:"SYMBOLIZER_UPLOAD_TTL" help:"How long an initiated upload stays open."`
	TokensFile     string        `name:"upload-tokens-file" env:"SYMBOLIZER_UPLOAD_TOKENS_FILE" type:"path" help:"Bearer tokens accepted for writes, one per line (reloaded on SIGHUP)."`
	Tokens         []string      `name:"upload-token" env:"SYMBOLIZER_UPLOAD_TOKENS" help:"A bearer token accepted for writes (repeatable)."`
	ReadTokens     []string      `name:"read-token" env:"SYMBOLIZER_READ_TOKENS" help:"A bearer token accepted for reads (repeatable). Any read token, or --require-read-token, makes reads (Symbolize, Get, List, ListCoverage, debuginfod paths, /ui/, /metrics on --listen) need a read or an upload token."`
	ReadTokensFile string        `name:"read-tokens-file" env:"SYMBOLIZER_READ_TOKENS_FILE" type:"path" help:"Bearer tokens accepted for reads, one per line (reloaded on SIGHUP); see --read-token."`
	RequireRead    bool          `name:"require-read-token" env:"SYMBOLIZER_REQUIRE_READ_TOKEN" help:"Require a token for reads even without read tokens: then upload tokens only are accepted."`

	RedisURL        string        `name:"redis-url" env:"SYMBOLIZER_REDIS_URL" help:"Redis for the result cache: redis://, rediss://, redis+cluster://, redis+sentinel://...?master_name=; empty: none. Put no password here when others can read the command line: use --redis-password-file."`
	RedisPassword   string        `name:"redis-password-file" env:"SYMBOLIZER_REDIS_PASSWORD_FILE" type:"path" help:"File holding the Redis password; it replaces any password in --redis-url (kept off the command line, which every process sharing the PID namespace can read)."`
	RedisTimeout    time.Duration `name:"redis-timeout" default:"250ms" env:"SYMBOLIZER_REDIS_TIMEOUT" help:"Timeout of one Redis call; a slower Redis is skipped."`
	LeaseTTL        time.Duration `name:"lease-ttl" default:"15s" env:"SYMBOLIZER_LEASE_TTL" help:"Replicas coordinate through leases: one builds an index the store lacks while the others wait for it, and one reserves an upload of a build ID while the others are told it is in progress. The leases are keys in Redis with --redis-url, else objects under leases/ in the S3 bucket written with conditional requests (If-None-Match, If-Match); a folder store serves one replica. A dead holder's lease expires after this long (it is renewed every third of it). 0: no coordination across replicas."`
	CacheTTL        time.Duration `name:"cache-ttl" default:"24h" env:"SYMBOLIZER_CACHE_TTL" help:"Redis TTL of results, empty ones included (they are as final as any: a result depends only on the file's content). Counted per bucket of addresses from its last write."`
	HoldUploaded    bool          `name:"hold-uploaded-indexes" default:"true" negatable:"" env:"SYMBOLIZER_HOLD_UPLOADED_INDEXES" help:"Keep the index built while verifying an upload in memory. With build-ID affinity in the gateways, the replica that verifies an upload is seldom the one asked for its lookups: --no-hold-uploaded-indexes leaves the index to its owner, which loads it from the store."`
	IndexCacheBytes int64         `name:"index-cache-bytes" default:"1073741824" env:"SYMBOLIZER_INDEX_CACHE_BYTES" help:"Memory for loaded indexes."`
	StringsBytes    int64         `name:"strings-cache-bytes" default:"268435456" env:"SYMBOLIZER_STRINGS_CACHE_BYTES" help:"Memory for the string tables of indexes not in memory, with which results cached in Redis are read (each about 14% of its index's memory for a large Go binary, up to a third for a small C one; a table is dropped once its index is loaded, and not loaded while the index is in memory)."`
	ResultEntries   int           `name:"result-cache-entries" default:"200000" env:"SYMBOLIZER_RESULT_CACHE_ENTRIES" help:"Entries of the in-process result cache (0: off)."`
	MaxModules      int           `name:"max-modules" default:"1024" env:"SYMBOLIZER_MAX_MODULES" help:"Modules per Symbolize request."`
	MaxAddresses    int           `name:"max-addresses" default:"100000" env:"SYMBOLIZER_MAX_ADDRESSES" help:"Addresses per Symbolize request."`
	SymbolizeBudget int64         `name:"symbolize-memory-budget" default:"536870912" env:"SYMBOLIZER_SYMBOLIZE_MEMORY_BUDGET" help:"Bytes that Symbolize requests in flight may cost, reserved from each request's size before it is decoded (a compressed request reserves the largest legal size); over it, callers get resource_exhausted at once."`

	UsageInterval     time.Duration `name:"usage-interval" default:"5m" env:"SYMBOLIZER_USAGE_INTERVAL" help:"How often this replica writes down which stored files Symbolize and the debuginfod paths used (usage/ in the store: one small object per day, rewritten only when the day's set grew). Retention and 'symbolizer debuginfo usage' read it."`
	RetentionUsedDays int           `name:"retention-keep-used-days" env:"SYMBOLIZER_RETENTION_KEEP_USED_DAYS" help:"Retention: keep every file used (or uploaded) in the last this many days. Retention is off, and everything is kept, while every --retention-keep-* is 0; with any set, a file none of them keeps is deleted."`
	RetentionBuilds   int           `name:"retention-keep-builds" env:"SYMBOLIZER_RETENTION_KEEP_BUILDS" help:"Retention: keep the last this many uploads of each binary name (the name 'symbolizer upload' sends, else the file name Symbolize last saw)."`
	RetentionCIDays   int           `name:"retention-keep-ci-days" env:"SYMBOLIZER_RETENTION_KEEP_CI_DAYS" help:"Retention: keep every file uploaded from CI in the last this many days."`
	RetentionDryRun   bool          `name:"retention-dry-run" env:"SYMBOLIZER_RETENTION_DRY_RUN" help:"Retention: log and count what the policy would delete (symbolizer_retention_records_total{result=\"dry_run\"}) and delete nothing."`
	RetentionInterval time.Duration `name:"retention-interval" default:"1h" env:"SYMBOLIZER_RETENTION_INTERVAL" help:"How often a replica tries to sweep (one at a time across replicas, through the leases of --lease-ttl); the first try is at start."`

	TenantTokensFile string `name:"tenant-tokens-file" env:"SYMBOLIZER_TENANT_TOKENS_FILE" type:"path" help:"Tenants: a file of lines 'TENANT upload|read TOKEN' (and optionally 'TENANT quota bytes=N uploads-per-day=M'), reloaded on SIGHUP. A tenant's token reads and writes that tenant's build IDs only: its records, uploads, coverage, usage and retention live under tenants/TENANT/ in the store and its results and leases under its own Redis keys. The tokens of no tenant (--upload-token, --read-token) act for the default tenant, whose layout is that of a symbolizer without tenants, or for the tenant their request names in the X-Profsym-Tenant header. With it, every read needs a token."`
	TenantMaxBytes   uint64 `name:"tenant-max-bytes" env:"SYMBOLIZER_TENANT_MAX_BYTES" help:"Tenants: bytes of files a tenant may store, uploads in progress included (0: no bound); a quota line of the tenant tokens file overrides it. The default tenant has no quota."`
	TenantMaxUploads int    `name:"tenant-max-uploads-per-day" env:"SYMBOLIZER_TENANT_MAX_UPLOADS_PER_DAY" help:"Tenants: uploads a tenant may start in a UTC day (0: no bound); a quota line of the tenant tokens file overrides it."`

	CoverageInterval time.Duration `name:"coverage-interval" default:"1m" env:"SYMBOLIZER_COVERAGE_INTERVAL" help:"How often this replica writes its tally of what Symbolize resolved (coverage/ in the store; read by ListCoverage, /ui/ and 'symbolizer debuginfo missing')."`
	CoverageEntries  int           `name:"coverage-entries" default:"100000" env:"SYMBOLIZER_COVERAGE_ENTRIES" help:"Binaries tallied in memory; beyond it the least recently seen is dropped."`

	DebuginfodURLs     []string      `name:"debuginfod-url" env:"SYMBOLIZER_DEBUGINFOD_URLS" help:"Upstream debuginfod server (repeatable; DEBUGINFOD_URLS, space separated, is used when unset)."`
	DebuginfodTimeout  time.Duration `name:"debuginfod-timeout" default:"60s" env:"SYMBOLIZER_DEBUGINFOD_TIMEOUT" help:"Timeout of one upstream fetch."`
	DebuginfodNegTTL   time.Duration `name:"debuginfod-negative-ttl" default:"10m" env:"SYMBOLIZER_DEBUGINFOD_NEGATIVE_TTL" help:"How long a build ID no upstream has is not asked again."`
	DebuginfodParallel int           `name:"debuginfod-parallel" default:"4" env:"SYMBOLIZER_DEBUGINFOD_PARALLEL" help:"Concurrent upstream fetches."`
	DebuginfodBreaker  int           `name:"debuginfod-breaker-failures" default:"5" env:"SYMBOLIZER_DEBUGINFOD_BREAKER_FAILURES" help:"Consecutive failed fetches that stop asking an upstream for --debuginfod-breaker-open."`
	DebuginfodOpen     time.Duration `name:"debuginfod-breaker-open" default:"30s" env:"SYMBOLIZER_DEBUGINFOD_BREAKER_OPEN" help:"How long an upstream that failed --debuginfod-breaker-failures times in a row is not asked."`

	TempDir       string `name:"temp-dir" env:"SYMBOLIZER_TEMP_DIR" type:"path" help:"Scratch space for downloads from S3 and upstreams (default: the system's)."`
	GCMinHeadroom uint64 `name:"gc-min-headroom" default:"268435456" env:"SYMBOLIZER_GC_MIN_HEADROOM" help:"Bytes the Go heap may grow past its live size before a collection, at least (0: plain GOGC). With little live heap, as in a replica answering from Redis, plain GOGC collects twice per 10,000-address batch. The soft memory limit (--memory-limit) bounds the growth."`
	MemoryLimit   string `name:"memory-limit" default:"auto" env:"SYMBOLIZER_MEMORY_LIMIT" help:"Soft memory limit of the Go runtime (the collector works harder as the heap nears it) where neither GOMEMLIMIT nor a container gives one; inside a container with a memory limit it is 90% of that limit (AUTOMEMLIMIT=off: no limit at all). auto: what the replica is configured to hold, --index-cache-bytes + --strings-cache-bytes + 256 bytes per --result-cache-entries, plus 384 MiB for an upload's verification and requests in flight (1.7 GiB at the defaults); a size (e.g. 2GiB) sets it; off sets none, and the heap grows to twice its live size before each collection. Logged at start with its source."`
	Pprof         bool   `name:"pprof" env:"SYMBOLIZER_PPROF" help:"Serve Go profiling at /debug/pprof/ (guarded like writes: it needs a token)."`
	LogFormat     string `name:"log-format" default:"text" enum:"text,json" env:"SYMBOLIZER_LOG_FORMAT" help:"Log format: text or json."`
	LogLevel      string `name:"log-level" default:"info" enum:"debug,info,warn,error" env:"SYMBOLIZER_LOG_LEVEL" help:"Log level."`
}

// retentionPolicy checks the retention flags.
func (c *Config) retentionPolicy() (retention.Policy, error) {
	if c.RetentionUsedDays < 0 || c.RetentionBuilds < 0 || c.RetentionCIDays < 0 {
		return retention.Policy{}, errors.New("--retention-keep-used-days, --retention-keep-builds and --retention-keep-ci-days must not be negative")
	}
	if c.RetentionInterval <= 0 || c.UsageInterval <= 0 {
		return retention.Policy{}, errors.New("--retention-interval and --usage-interval must be positive")
	}
	day := 24 * time.Hour
	return retention.Policy{UsedWithin: time.Duration(c.RetentionUsedDays) * day, KeepBuilds: c.RetentionBuilds,
		CIWithin: time.Duration(c.RetentionCIDays) * day}, nil
}

// Run serves until SIGINT or SIGTERM.
func (c *Config) Run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := c.Logger()
	slog.SetDefault(log)
	limit, err := c.memoryLimit()
	if err != nil {
		return err
	}
	defer gctune.Start(gctune.Options{MinHeadroom: c.GCMinHeadroom, MemoryLimit: limit, Logger: log})()
	stopTraces, err := tracing.Install(ctx, "profsym-symbolizer", log)
	if err != nil {
		return err
	}
	defer stopTraces()
	s, err := New(ctx, c, log)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Serve(ctx)
}

// Logger builds the configured logger.
func (c *Config) Logger() *slog.Logger {
	var lvl slog.Level
	// kong's enum refuses an unknown level on the command line; a Config built in code may
	// leave it empty, which means info.
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// Server is a wired symbolizer.
type Server struct {
	cfg     *Config
	log     *slog.Logger
	Metrics *metrics.Metrics
	Store   store.Store
	Meta    *catalog.Catalog
	Tokens  *auth.Tokens
	// Readers are the tokens reads need (read and upload tokens); nil while reads are open.
	Readers *auth.Tokens
	Handler http.Handler
	// MetricsHandler serves /metrics on --metrics-listen.
	MetricsHandler http.Handler
	// Coverage tallies Symbolize answers per binary.
	Coverage *coverage.Recorder
	closers  []func()
	ready    atomic.Bool
	// admission bounds the memory of Symbolize requests in flight.
	admission *admission
	// Usage records which records lookups used; Retention deletes what the policy does not keep.
	Usage     *retention.Usage
	Retention *retention.Sweeper
	// Tenants maps tokens to tenants (--tenant-tokens-file); nil without tenants.
	Tenants *tenant.Tokens
	access  *tenant.Access
	shared  *shared
	// stacks are the tenants' symbolizers by tenant ("": the default tenant's, whose parts
	// Meta, Usage, Coverage and Retention are).
	stacksMu sync.RWMutex
	stacks   map[string]*stack
	bgCtx    context.Context // set once the stacks' background work runs
	bg       sync.WaitGroup  // the stacks' background work (runStack)
}

func readSecret(value, file, what string) (string, error) {
	if file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read %s file: %w", what, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// withRedisPassword puts the password read from file into the URL's user info, where every
// go-redis URL parser (single node, Cluster, Sentinel) takes it from.
func withRedisPassword(rawURL, file string) (string, error) {
	if file == "" {
		return rawURL, nil
	}
	password, err := readSecret("", file, "Redis password")
	if err != nil {
		return "", err
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("--redis-url: %w", err)
	}
	user := ""
	if u.User != nil {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, password)
	return u.String(), nil
}

// New builds every part from the configuration.
func New(ctx context.Context, c *Config, log *slog.Logger) (*Server, error) {
	s := &Server{cfg: c, log: log, Metrics: metrics.New()}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	var err error
	var bucket *store.S3 // the S3 store, when it is one
	if c.S3Endpoint != "" {
		ak, err := readSecret(c.S3AccessKey, c.S3AccessFile, "S3 access key")
		if err != nil {
			return nil, err
		}
		sk, err := readSecret(c.S3SecretKey, c.S3SecretFile, "S3 secret key")
		if err != nil {
			return nil, err
		}
		s3, err := store.NewS3(store.S3Config{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Region: c.S3Region,
			AccessKey: ak, SecretKey: sk, Insecure: c.S3Insecure, Prefix: c.S3Prefix, MaxRetries: c.S3MaxRetries})
		if err != nil {
			return nil, err
		}
		if c.S3Create {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := s3.EnsureBucket(ctx, c.S3Region)
			cancel()
			if err != nil {
				return nil, err
			}
		}
		s.Store = s3
		bucket = s3
	} else {
		s.Store, err = store.NewFolder(c.StoreDir)
		if err != nil {
			return nil, err
		}
	}
	s.Store = store.Observe(store.Trace(s.Store), &storeHealth{
		tracker: degraded.New("store", "uploads fail, and files and indexes not in memory cannot be read: their frames go out unsymbolized",
			time.Minute, log).OnChange(s.Metrics.DegradedGauge("store")),
		errors: s.Metrics.StoreErrors,
	})
	s.Tokens, err = auth.New(c.TokensFile, c.Tokens)
	if err != nil {
		return nil, err
	}
	if s.Tokens.Count() == 0 {
		log.Warn("no upload tokens configured (--upload-tokens-file, --upload-token): every write is refused")
	}
	// With tenants every read needs a token too: a request without one could be anyone's.
	if c.RequireRead || c.ReadTokensFile != "" || len(c.ReadTokens) > 0 || c.TenantTokensFile != "" {
		s.Readers, err = auth.Union([]string{c.TokensFile, c.ReadTokensFile}, append(slices.Clip(c.Tokens), c.ReadTokens...))
		if err != nil {
			return nil, err
		}
		if s.Readers.Count() == 0 && c.TenantTokensFile == "" {
			log.Warn("reads need a token but none is configured (--read-tokens-file, --read-token, upload tokens): every read is refused")
		}
	} else if !loopbackOnly(c.Listen) {
		log.Warn("reads need no token on a listener others can reach: anyone who reaches it can download every stored binary; set --read-tokens-file, or listen on loopback",
			"listen", c.Listen)
	}

	var redisClient redis.UniversalClient
	var locks *leaseLocks
	// Without Redis, replicas on one bucket coordinate through lease objects written
	// conditionally in it; a folder store serves one replica (its volume is ReadWriteOnce),
	// which coordinates within itself.
	if c.RedisURL == "" && bucket != nil && c.LeaseTTL > 0 {
		cl, name, prefix := bucket.Bucket()
		locks = newLeaseLocks(lease.NewS3(cl, name, lease.Options{Prefix: prefix + "leases/", TTL: c.LeaseTTL, Timeout: 5 * time.Second, Logger: log}),
			degraded.New("store leases", "replicas do not coordinate index builds and uploads: each builds what it lacks",
				time.Minute, log).OnChange(s.Metrics.DegradedGauge("store leases")))
	}
	if c.RedisURL != "" {
		resultcache.SetRedisLogger(log)
		redisURL, err := withRedisPassword(c.RedisURL, c.RedisPassword)
		if err != nil {
			return nil, err
		}
		client, err := resultcache.NewRedisClient(redisURL)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() {
			if err := client.Close(); err != nil {
				log.Warn("close redis client", "err", err)
			}
		})
		// Redis calls made for a traced request show as spans of its trace; the keys stay out
		// of them (db.statement off): they are build IDs and addresses, many per call.
		if err := redisotel.InstrumentTracing(client, redisotel.WithTracerProvider(tracing.ChildOnly(otel.GetTracerProvider())),
			redisotel.WithDBStatement(false)); err != nil {
			return nil, fmt.Errorf("redis tracing: %w", err)
		}
		redisClient = client
		if c.LeaseTTL > 0 {
			locks = newLeaseLocks(lease.New(client, lease.Options{TTL: c.LeaseTTL, Timeout: c.RedisTimeout * 4, Logger: log}),
				degraded.New("redis leases", "replicas do not coordinate index builds and uploads: each builds what it lacks",
					time.Minute, log).OnChange(s.Metrics.DegradedGauge("redis leases")))
		}
	}

	policy, err := c.retentionPolicy()
	if err != nil {
		return nil, err
	}
	if policy.Enabled() {
		log.Info("retention", "policy", policy.String(), "dry_run", c.RetentionDryRun, "every", c.RetentionInterval)
	}
	sh := &shared{replica: replica.New(), policy: policy, locks: locks, ix: indexcache.New(c.IndexCacheBytes), strs: indexcache.New(c.StringsBytes)}
	rcOpt := resultcache.Options{TTL: c.CacheTTL, Timeout: c.RedisTimeout,
		LocalSize: c.ResultEntries, Metrics: s.Metrics, Logger: log}
	if redisClient != nil {
		rcOpt.Redis = redisClient
		rcOpt.OnDegraded = s.Metrics.DegradedGauge("redis")
	}
	sh.rc = resultcache.New(rcOpt)
	s.closers = append([]func(){sh.rc.Close}, s.closers...)
	if err := sh.rc.Ping(ctx); err != nil {
		log.Warn("redis does not answer yet; symbolizing without it until it does", "err", err)
	}
	sh.urls = debuginfod.ParseURLs(c.DebuginfodURLs...)
	if len(c.DebuginfodURLs) == 0 {
		sh.urls = debuginfod.ParseURLs(os.Getenv("DEBUGINFOD_URLS"))
	}
	sh.gauges = map[string]func(bool){}
	for _, u := range sh.urls {
		sh.gauges[u] = s.Metrics.DegradedGauge("debuginfod " + u)
	}
	s.shared = sh
	if c.TenantTokensFile != "" {
		s.Tenants, err = tenant.LoadTokens(c.TenantTokensFile, tenant.Quota{Bytes: c.TenantMaxBytes, UploadsPerDay: c.TenantMaxUploads})
		if err != nil {
			return nil, err
		}
		s.access = &tenant.Access{Tenants: s.Tenants, Writers: s.Tokens, Readers: s.Readers}
	}
	def, err := s.stack("")
	if err != nil {
		return nil, err
	}
	s.Meta, s.Usage, s.Coverage, s.Retention = def.meta, def.usage, def.coverage, def.retention
	if s.Tenants != nil {
		if err := s.addTenants(); err != nil {
			return nil, err
		}
	}
	sym, up := def.sym, def.up

	// A request at the limits (100,000 addresses, 1,024 modules with 4 KiB file names) is
	// a few MiB; anything far larger is refused before it is buffered.
	// Each call is a server span, the child of its caller's (the symbolize processor's client
	// span) when the request carries W3C trace context: the symbolizer serves its own gateways
	// and collectors, whose trace context it trusts.
	traces, err := otelconnect.NewInterceptor(otelconnect.WithTrustRemote(), otelconnect.WithoutMetrics(), otelconnect.WithPropagator(tracing.Propagator))
	if err != nil {
		return nil, fmt.Errorf("connect tracing: %w", err)
	}
	opts := []connect.HandlerOption{fastGzip(), connect.WithCompressMinBytes(1024), connect.WithReadMaxBytes(maxRequestBytes), connect.WithInterceptors(traces, s.Metrics.Interceptor(), auth.Interceptor(s.Tokens, s.Readers, uploadapi.WriteProcedures))}
	if s.access != nil {
		opts[len(opts)-1] = connect.WithInterceptors(traces, s.Metrics.Interceptor(), s.access.Interceptor(uploadapi.WriteProcedures))
	}
	mux := http.NewServeMux()
	// Symbolize answers are large: their binary encoding is written by hand (pkg/symbolizecodec).
	maxSym := maxSymbolizeBytes(c.MaxModules, c.MaxAddresses)
	symOpts := append(slices.Clip(opts), connect.WithCodec(symbolizecodec.Codec{}), connect.WithReadMaxBytes(int(maxSym)))
	var symService symbolizerv1connect.SymbolizerServiceHandler = sym
	var upService debuginfov1connect.DebuginfoServiceHandler = up
	if s.access != nil {
		symService, upService = symbolizeByTenant{s}, debuginfoByTenant{s: s}
	}
	symPath, symHandler := symbolizerv1connect.NewSymbolizerServiceHandler(symService, symOpts...)
	if c.SymbolizeBudget <= 0 {
		return nil, fmt.Errorf("--symbolize-memory-budget %d must be positive", c.SymbolizeBudget)
	}
	s.admission = newAdmission(c.SymbolizeBudget, maxSym, s.Metrics.Registry, log)
	mux.Handle(symPath, s.admission.wrap(symHandler))
	mux.Handle(debuginfov1connect.NewDebuginfoServiceHandler(upService, opts...))
	services := []string{symbolizerv1connect.SymbolizerServiceName, debuginfov1connect.DebuginfoServiceName}
	mux.Handle(grpchealth.NewHandler(&healthChecker{s: s, static: grpchealth.NewStaticChecker(services...)}))
	reflector := grpcreflect.NewStaticReflector(services...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	if s.access != nil {
		mux.Handle("/upload/", s.access.Guard(true, s.byTenant(func(st *stack) http.Handler { return st.put })))
		mux.Handle("/buildid/", s.access.Guard(false, s.byTenant(func(st *stack) http.Handler { return st.buildid })))
		mux.Handle("/ui/", s.access.Guard(false, s.byTenant(func(st *stack) http.Handler { return st.ui })))
	} else {
		mux.Handle("/upload/", up.PutHandler(s.Tokens))
		mux.Handle("/buildid/", debuginfod.Handler(s.Meta, s.Readers, log, s.Usage.Use))
		mux.Handle("/ui/", ui.Handler(s.Coverage, s.Meta, s.Readers, log))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { s.writeProbe(w, "healthz") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := s.Store.Ping(ctx); err != nil {
			http.Error(w, "store unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		s.writeProbe(w, "readyz")
	})
	// Metric labels name binaries and outcomes, which a reader of the store may see and others
	// not: on the API port /metrics is a read; on a port of its own it is open, and which
	// scrapers reach that port is the network's decision (deploy/ opens it to scrapers only).
	metricsHandler := promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{})
	if c.MetricsListen != "" {
		m := http.NewServeMux()
		m.Handle("/metrics", metricsHandler)
		s.MetricsHandler = m
	} else {
		mux.Handle("/metrics", auth.Guard(s.Readers, metricsHandler))
	}
	if c.Pprof {
		mux.Handle("/debug/pprof/", s.requireToken(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/profile", s.requireToken(http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/trace", s.requireToken(http.HandlerFunc(pprof.Trace)))
	}
	s.Handler = uploadapi.WithBaseURL(mux)
	s.ready.Store(true)
	return s, nil
}

func (s *Server) requireToken(h http.Handler) http.Handler {
	return auth.Guard(s.Tokens, h)
}

// storeHealth counts the store's failed calls and tells the logs when it goes away and comes
// back (store.Observe).
type storeHealth struct {
	tracker *degraded.Tracker
	errors  *prometheus.CounterVec
}

func (h *storeHealth) Fail(op string, err error) {
	h.errors.WithLabelValues(op).Inc()
	h.tracker.Fail(fmt.Errorf("%s: %w", op, err))
}

func (h *storeHealth) OK(start time.Time) { h.tracker.OKStarted(start) }

// loopbackOnly reports whether a listen address can be reached from this host alone.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

const maxRequestBytes = 64 << 20

// healthChecker answers gRPC health checks: SERVING while the server is not shutting down
// and its store answers, for the whole server ("") and each service.
type healthChecker struct {
	s      *Server
	static *grpchealth.StaticChecker
}

func (h *healthChecker) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	resp, err := h.static.Check(ctx, req)
	if err != nil {
		return nil, err
	}
	if !h.s.ready.Load() {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := h.s.Store.Ping(ctx); err != nil {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return resp, nil
}

// sweep removes a stack's abandoned upload bytes at start and then hourly.
func (s *Server) sweep(ctx context.Context, meta *catalog.Catalog) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		n, err := meta.Sweep(ctx)
		if err != nil {
			s.log.Warn("sweep abandoned uploads", "err", err)
		} else if n > 0 {
			s.log.Info("removed abandoned upload objects", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close releases clients.
func (s *Server) Close() {
	for _, c := range s.closers {
		c()
	}
}

// NewHTTPServer returns the http.Server for the handler: HTTP/1.1 and prior-knowledge
// HTTP/2 without TLS (h2c), HTTP/1.1 and HTTP/2 with TLS.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP2(true)
	return &http.Server{
		Handler: h, Protocols: &p, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 5 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// writeProbe answers a health probe. The status is already decided; a failed write means the
// prober hung up and will count it as a failure itself.
func (s *Server) writeProbe(w http.ResponseWriter, probe string) {
	if _, err := w.Write([]byte("ok\n")); err != nil {
		s.log.Debug("probe answer not written", "probe", probe, "err", err)
	}
}

// Serve listens and serves until ctx ends, then finishes in-flight requests.
func (s *Server) Serve(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
	}
	return s.ServeListener(ctx, ln)
}

// ServeListener serves on ln until ctx ends.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	srv := NewHTTPServer(s.Handler, s.log)
	if s.cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
		if err != nil {
			return errors.Join(fmt.Errorf("load TLS key pair: %w", err), ln.Close())
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			if err := s.Tokens.Reload(); err != nil {
				s.log.Error("reload tokens", "err", err)
			} else {
				s.log.Info("tokens reloaded", "count", s.Tokens.Count())
			}
			s.tenantsReload()
			if s.Readers == nil {
				continue
			}
			if err := s.Readers.Reload(); err != nil {
				s.log.Error("reload read tokens", "err", err)
			} else {
				s.log.Info("read tokens reloaded", "count", s.Readers.Count())
			}
		}
	}()
	// The usage and coverage writers' last writes happen when bgCtx ends; waiting for them
	// keeps a stop from losing the last interval, and for the sweeps, from writing after it.
	bgCtx, bgStop := context.WithCancel(ctx)
	s.startStacks(bgCtx)
	defer func() { bgStop(); s.bg.Wait() }()
	errc := make(chan error, 2)
	var metricsSrv *http.Server
	if s.MetricsHandler != nil {
		var lc net.ListenConfig
		mln, err := lc.Listen(ctx, "tcp", s.cfg.MetricsListen)
		if err != nil {
			return errors.Join(fmt.Errorf("listen on %s for metrics: %w", s.cfg.MetricsListen, err), ln.Close())
		}
		// Plain HTTP even when the API serves TLS: scrapers reach this port inside the cluster
		// network only, and it carries no token.
		metricsSrv = &http.Server{Handler: s.MetricsHandler, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
		go func() { errc <- metricsSrv.Serve(mln) }()
		s.log.Info("metrics serving", "addr", mln.Addr().String())
	}
	// Serve writes srv.TLSConfig (HTTP/2 set-up): whether to serve TLS is read before.
	useTLS := srv.TLSConfig != nil
	go func() {
		if useTLS {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	s.log.Info("symbolizer serving", "addr", ln.Addr().String(), "store", s.Store.String(), "tls", useTLS, "replica", s.shared.replica)
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.ready.Store(false)
	s.log.Info("shutting down; finishing in-flight requests", "timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if metricsSrv != nil {
		if err := metricsSrv.Shutdown(sctx); err != nil {
			s.log.Warn("shutdown metrics listener", "err", err)
		}
	}
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
