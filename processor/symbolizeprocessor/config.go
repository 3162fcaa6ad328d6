package symbolizeprocessor

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configtls"

	"github.com/profsym/profsym/pkg/otlpattr"
)

// Frame types a user may list in frame_types. "none" stands for locations that carry no
// profile.frame.type attribute (pprof-style producers), which OTLP leaves to the reader.
const (
	FrameTypeNative = otlpattr.FrameTypeNative
	FrameTypeGo     = otlpattr.FrameTypeGo
	FrameTypeKernel = otlpattr.FrameTypeKernel
	FrameTypeNone   = "none"
)

// Limits of the symbolizer's API (symbolizer.proto); larger settings could only be refused.
const (
	maxBatchAddresses = 100_000
	maxConcurrency    = 256
)

// Config is the processor's configuration.
type Config struct {
	// Endpoint is the symbolizer's base URL, http:// or https://.
	Endpoint string `mapstructure:"endpoint"`
	// TLS configures the client side of https:// endpoints.
	TLS configtls.ClientConfig `mapstructure:"tls"`
	// BearerToken is sent on every call when the symbolizer protects reads.
	BearerToken configopaque.String `mapstructure:"bearer_token"`
	// BearerTokenFile names a file holding the token instead (read at start, trimmed), so a
	// Kubernetes Secret can be mounted rather than written into the config.
	BearerTokenFile string `mapstructure:"bearer_token_file"`
	// Timeout bounds each call to the symbolizer.
	Timeout time.Duration `mapstructure:"timeout"`
	// Deadline bounds the symbolization of one batch of profiles: what is not answered by then
	// goes on unsymbolized and counted, never dropped.
	Deadline time.Duration `mapstructure:"deadline"`
	// BatchAddresses is the most addresses per call.
	BatchAddresses int `mapstructure:"batch_addresses"`
	// Concurrency is the most calls in flight per batch of profiles.
	Concurrency int `mapstructure:"concurrency"`
	// CacheEntries bounds the in-memory cache of answers, per (binary, mapping, address);
	// 0 disables it.
	CacheEntries int `mapstructure:"cache_entries"`
	// FrameTypes lists the frame types to symbolize: native, go, kernel (frames that are
	// addresses of vmlinux or a module's .ko with its build ID, as profsym's collector sends
	// them; their node-side names stay where the symbolizer has no debuginfo) and none (no
	// frame type).
	FrameTypes []string `mapstructure:"frame_types"`
	// Affinity sends each binary's lookups to the symbolizer replica that owns its build ID,
	// rather than to whichever replica the endpoint's connection reached.
	Affinity AffinityConfig `mapstructure:"affinity"`
	// Hold keeps the profiles whose frames wait only for debuginfo that is arriving (an
	// upload under way, an index loading) or for a busy replica, and symbolizes them when
	// the answer exists; the rest of each batch goes on at once.
	Hold HoldConfig `mapstructure:"hold"`

	// prevent unkeyed literals
	_ struct{}
}

// AffinityConfig places lookups on symbolizer replicas by build ID: one replica loads (or
// builds) each index and answers it from memory, instead of every replica a gateway's
// long-lived connection happens to reach.
type AffinityConfig struct {
	// Enabled turns affinity on. Off, every call goes to endpoint.
	Enabled bool `mapstructure:"enabled"`
	// DNS is host:port of a name that resolves to every replica: a headless Service, such as
	// symbolizer-headless.profsym.svc:7070. The scheme, TLS settings and token are endpoint's;
	// with https the certificate is checked against endpoint's host name.
	DNS string `mapstructure:"dns"`
	// Endpoints lists the replicas' host:port instead of DNS (for setups without it).
	Endpoints []string `mapstructure:"endpoints"`
	// RefreshInterval is how often DNS is asked again.
	RefreshInterval time.Duration `mapstructure:"refresh_interval"`
	// AttemptTimeout bounds the call to one replica, so that the next owner can still answer
	// within timeout when one hangs.
	AttemptTimeout time.Duration `mapstructure:"attempt_timeout"`
	// BalanceFactor bounds a replica's calls in flight to this multiple of the mean over the
	// replicas (bounded-load consistent hashing); past it, a binary goes to its next owner.
	// 0 turns the bound off.
	BalanceFactor float64 `mapstructure:"balance_factor"`
	// EjectFor is how long a replica that refused, timed out or could not be reached is
	// passed over.
	EjectFor time.Duration `mapstructure:"eject_for"`
	// GiveUpAfter is how long a replica may go on timing out before its binaries are loaded
	// by their next owners; until then a replica that times out is taken as busy, and its
	// binaries are answered by the next owners only from what they hold.
	GiveUpAfter time.Duration `mapstructure:"give_up_after"`
}

// HoldConfig bounds the hold in time and memory. A held profile goes on when its frames are
// answered, or at the end of timeout, as it is, its waiting frames counted unsymbolized.
// While max_bytes are held, a new batch is refused with a retryable error (its sender's
// OTLP exporter retries it): the Collector's queues and memory limiter stay in charge.
type HoldConfig struct {
	// Enabled turns the hold on (default). Off, such frames go on unsymbolized at once.
	Enabled bool `mapstructure:"enabled"`
	// Timeout is the most a profile is held past its arrival.
	Timeout time.Duration `mapstructure:"timeout"`
	// MaxBytes bounds the held profiles by their protobuf size (in memory, pdata takes a
	// few times that).
	MaxBytes int64 `mapstructure:"max_bytes"`
	// RetryInterval is how long a held profile waits between two asks.
	RetryInterval time.Duration `mapstructure:"retry_interval"`
}

func createDefaultConfig() *Config {
	return &Config{
		Timeout:        2 * time.Second,
		Deadline:       5 * time.Second,
		BatchAddresses: 8192,
		Concurrency:    4,
		CacheEntries:   1 << 18,
		FrameTypes:     []string{FrameTypeNative, FrameTypeGo, FrameTypeKernel, FrameTypeNone},
		Affinity: AffinityConfig{
			RefreshInterval: 10 * time.Second,
			AttemptTimeout:  time.Second,
			BalanceFactor:   1.25,
			EjectFor:        10 * time.Second,
			GiveUpAfter:     30 * time.Second,
		},
		Hold: HoldConfig{
			Enabled:       true,
			Timeout:       30 * time.Second,
			MaxBytes:      64 << 20,
			RetryInterval: time.Second,
		},
	}
}

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Endpoint == "" {
		errs = append(errs, errors.New("endpoint: required (the symbolizer's base URL, such as http://symbolizer:7070)"))
	} else if u, err := url.Parse(c.Endpoint); err != nil {
		errs = append(errs, fmt.Errorf("endpoint: %w", err))
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("endpoint %q: want http://host:port or https://host:port", c.Endpoint))
	} else if u.Scheme == "http" && tlsConfigured(c.TLS) {
		errs = append(errs, fmt.Errorf("endpoint %q: tls settings need an https:// endpoint", c.Endpoint))
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("tls: %w", err))
	}
	if c.BearerToken != "" && c.BearerTokenFile != "" {
		errs = append(errs, errors.New("bearer_token and bearer_token_file: set one, not both"))
	}
	if c.BearerTokenFile != "" {
		if _, err := os.Stat(c.BearerTokenFile); err != nil {
			errs = append(errs, fmt.Errorf("bearer_token_file: %w", err))
		}
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout %v: must be positive", c.Timeout))
	}
	if c.Deadline <= 0 {
		errs = append(errs, fmt.Errorf("deadline %v: must be positive", c.Deadline))
	}
	if c.BatchAddresses <= 0 || c.BatchAddresses > maxBatchAddresses {
		errs = append(errs, fmt.Errorf("batch_addresses %d: must be between 1 and %d", c.BatchAddresses, maxBatchAddresses))
	}
	if c.Concurrency <= 0 || c.Concurrency > maxConcurrency {
		errs = append(errs, fmt.Errorf("concurrency %d: must be between 1 and %d", c.Concurrency, maxConcurrency))
	}
	if c.CacheEntries < 0 {
		errs = append(errs, fmt.Errorf("cache_entries %d: must not be negative (0 disables the cache)", c.CacheEntries))
	}
	if len(c.FrameTypes) == 0 {
		errs = append(errs, errors.New("frame_types: list at least one of native, go, kernel, none"))
	}
	for _, t := range c.FrameTypes {
		if !slices.Contains([]string{FrameTypeNative, FrameTypeGo, FrameTypeKernel, FrameTypeNone}, t) {
			errs = append(errs, fmt.Errorf("frame_types: unknown %q (want native, go, kernel or none)", t))
		}
	}
	errs = append(errs, c.Affinity.validate(c.Timeout)...)
	errs = append(errs, c.Hold.validate()...)
	return errors.Join(errs...)
}

func (h *HoldConfig) validate() []error {
	if !h.Enabled {
		return nil
	}
	var errs []error
	if h.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("hold.timeout %v: must be positive (or hold.enabled: false)", h.Timeout))
	}
	if h.MaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("hold.max_bytes %d: must be positive", h.MaxBytes))
	}
	if h.RetryInterval <= 0 || (h.Timeout > 0 && h.RetryInterval >= h.Timeout) {
		errs = append(errs, fmt.Errorf("hold.retry_interval %v: must be positive and below hold.timeout (%v)", h.RetryInterval, h.Timeout))
	}
	return errs
}

func (a *AffinityConfig) validate(timeout time.Duration) []error {
	if !a.Enabled {
		return nil
	}
	var errs []error
	if (a.DNS == "") == (len(a.Endpoints) == 0) {
		errs = append(errs, errors.New("affinity: set dns (a headless Service's host:port) or endpoints, not both"))
	}
	if a.DNS != "" {
		if _, _, err := net.SplitHostPort(a.DNS); err != nil {
			errs = append(errs, fmt.Errorf("affinity.dns %q: want host:port: %w", a.DNS, err))
		}
	}
	for _, e := range a.Endpoints {
		if _, _, err := net.SplitHostPort(e); err != nil {
			errs = append(errs, fmt.Errorf("affinity.endpoints: %q: want host:port: %w", e, err))
		}
	}
	if a.RefreshInterval <= 0 {
		errs = append(errs, fmt.Errorf("affinity.refresh_interval %v: must be positive", a.RefreshInterval))
	}
	if a.AttemptTimeout <= 0 || a.AttemptTimeout > timeout {
		errs = append(errs, fmt.Errorf("affinity.attempt_timeout %v: must be positive and at most timeout (%v), so the next owner has time to answer", a.AttemptTimeout, timeout))
	}
	if a.BalanceFactor != 0 && a.BalanceFactor <= 1 {
		errs = append(errs, fmt.Errorf("affinity.balance_factor %v: must be above 1, or 0 for no bound", a.BalanceFactor))
	}
	if a.EjectFor <= 0 {
		errs = append(errs, fmt.Errorf("affinity.eject_for %v: must be positive", a.EjectFor))
	}
	if a.GiveUpAfter <= 0 {
		errs = append(errs, fmt.Errorf("affinity.give_up_after %v: must be positive", a.GiveUpAfter))
	}
	return errs
}

// tlsConfigured reports whether any TLS setting was made that only an https endpoint uses.
func tlsConfigured(c configtls.ClientConfig) bool {
	return c.CAFile != "" || c.CAPem != "" || c.CertFile != "" || c.CertPem != "" ||
		c.KeyFile != "" || c.KeyPem != "" || c.InsecureSkipVerify || c.ServerName != ""
}

// frameTypes translates frame_types into the attribute values the symbolizer matches.
func (c *Config) frameTypes() []string {
	out := make([]string, 0, len(c.FrameTypes))
	for _, t := range c.FrameTypes {
		if t == FrameTypeNone {
			t = ""
		}
		out = append(out, t)
	}
	return out
}

// token returns the bearer token, from the file when one is named.
func (c *Config) token() (string, error) {
	if c.BearerTokenFile == "" {
		return string(c.BearerToken), nil
	}
	b, err := os.ReadFile(c.BearerTokenFile)
	if err != nil {
		return "", fmt.Errorf("bearer_token_file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
