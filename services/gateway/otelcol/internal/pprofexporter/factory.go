// Package pprofexporter is a Collector profiles exporter that writes every OTLP profile as a
// gzipped pprof file (profile-<unix nanos>-<sequence>-<resource>.<scope>.<profile>.pb.gz), the
// main executable's mapping first as pprof expects, with a bound on the files kept.
package pprofexporter

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"

	gwexporter "github.com/profsym/profsym/services/gateway/internal/exporter"
	"github.com/profsym/profsym/services/gateway/internal/queue"
)

// Type is the component's name in a Collector configuration.
var Type = component.MustNewType("pprof")

// NewFactory returns the factory of the pprof exporter.
func NewFactory() xexporter.Factory {
	return xexporter.NewFactory(Type, func() component.Config { return createDefaultConfig() },
		xexporter.WithProfiles(createProfiles, component.StabilityLevelAlpha))
}

func createProfiles(ctx context.Context, set exporter.Settings, cfg component.Config) (xexporter.Profiles, error) {
	c, ok := cfg.(*Config)
	if !ok {
		return nil, fmt.Errorf("pprof exporter: config of type %T, want *pprofexporter.Config", cfg)
	}
	e := &pprofExporter{cfg: c, logger: set.Logger}
	// No sending queue and no retries: a local disk either takes the file now or has a problem
	// that waiting does not fix, and a queue would only hide that from the sender.
	return xexporterhelper.NewProfiles(ctx, set, cfg, e.push,
		exporterhelper.WithStart(e.start),
	)
}

type pprofExporter struct {
	cfg    *Config
	logger *zap.Logger
	files  *gwexporter.Pprof
}

func (e *pprofExporter) start(context.Context, component.Host) error {
	f, err := gwexporter.NewPprof(e.cfg.Directory)
	if err != nil {
		return fmt.Errorf("pprof exporter: %w", err)
	}
	f.KeepFiles(e.cfg.KeepFiles)
	e.files = f
	return nil
}

func (e *pprofExporter) push(ctx context.Context, pd pprofile.Profiles) error {
	err := e.files.Export(ctx, pd)
	var perm *queue.PermanentError
	if errors.As(err, &perm) {
		// A profile pprof cannot express will not convert on a retry either.
		return consumererror.NewPermanent(err)
	}
	return err
}
