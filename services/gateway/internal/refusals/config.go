package refusals

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config of the refusals extension.
type Config struct {
	// LogInterval is the least time between two log lines about one reason's refusals, and
	// how long refusals must stop for their episode to end (logged at INFO).
	LogInterval time.Duration `mapstructure:"log_interval"`
	// Readiness is the optional readiness endpoint.
	Readiness ReadinessConfig `mapstructure:"readiness"`

	// prevent unkeyed literals
	_ struct{}
}

// ReadinessConfig is the readiness endpoint: 503 while the pipelines are not running or the
// gateway pushed senders back within PushbackWindow, 200 otherwise.
type ReadinessConfig struct {
	// Endpoint is host:port to serve on; empty serves nothing.
	Endpoint string `mapstructure:"endpoint"`
	// Path answered; other paths are 404.
	Path string `mapstructure:"path"`
	// PushbackWindow is how recent a pushback (gRPC UNAVAILABLE, HTTP 503 or 429) must be to
	// answer 503.
	PushbackWindow time.Duration `mapstructure:"pushback_window"`

	// prevent unkeyed literals
	_ struct{}
}

func createDefaultConfig() *Config {
	return &Config{
		LogInterval: 30 * time.Second,
		Readiness:   ReadinessConfig{Path: "/readyz", PushbackWindow: 10 * time.Second},
	}
}

// Validate checks the durations and the path.
func (c *Config) Validate() error {
	var errs []error
	if c.LogInterval <= 0 {
		errs = append(errs, fmt.Errorf("log_interval must be positive, is %v", c.LogInterval))
	}
	if c.Readiness.Endpoint != "" {
		if !strings.HasPrefix(c.Readiness.Path, "/") {
			errs = append(errs, fmt.Errorf("readiness::path must start with /, is %q", c.Readiness.Path))
		}
		if c.Readiness.PushbackWindow <= 0 {
			errs = append(errs, fmt.Errorf("readiness::pushback_window must be positive, is %v", c.Readiness.PushbackWindow))
		}
	}
	return errors.Join(errs...)
}
