package pprofexporter

import (
	"errors"
	"fmt"
)

// Config is the pprof exporter's configuration.
type Config struct {
	// Directory receives one gzipped pprof file per profile; it is created when missing.
	Directory string `mapstructure:"directory"`
	// KeepFiles bounds the files kept in Directory: after each write the oldest beyond it are
	// deleted, so a volume that is only written to (a development gateway's emptyDir) never
	// fills. 0 keeps every file.
	KeepFiles int `mapstructure:"keep_files"`

	// prevent unkeyed literals
	_ struct{}
}

func createDefaultConfig() *Config { return &Config{} }

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Directory == "" {
		errs = append(errs, errors.New("directory: required (where the pprof files go)"))
	}
	if c.KeepFiles < 0 {
		errs = append(errs, fmt.Errorf("keep_files %d: must not be negative (0 keeps every file)", c.KeepFiles))
	}
	return errors.Join(errs...)
}
