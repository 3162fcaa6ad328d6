// Package pprofexporter is a Collector profiles exporter that writes every OTLP profile as a
// gzipped pprof file (profile-<unix nanos>-<sequence>-<resource>.<scope>.<profile>.pb.gz), the
// main executable's mapping first as pprof expects, with a bound on the files kept.
package pprofexporter

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"
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
	e := &pprofExporter{cfg: c, logger: set.Logger, ret: retention{prefix: "profile-", keep: c.KeepFiles}}
	// No sending queue and no retries: a local disk either takes the file now or has a problem
	// that waiting does not fix, and a queue would only hide that from the sender.
	return xexporterhelper.NewProfiles(ctx, set, cfg, e.push,
		exporterhelper.WithStart(e.start),
	)
}

type pprofExporter struct {
	cfg    *Config
	logger *zap.Logger
	seq    atomic.Uint64
	ret    retention
}

func (e *pprofExporter) start(context.Context, component.Host) error {
	if err := os.MkdirAll(e.cfg.Directory, 0o755); err != nil {
		return fmt.Errorf("pprof exporter: directory: %w", err)
	}
	return nil
}

// push writes every profile of the request as profile-<unix nanos>-<sequence>-<resource>.<scope>.<profile>.pb.gz.
func (e *pprofExporter) push(_ context.Context, pd pprofile.Profiles) error {
	seq := e.seq.Add(1)
	now := time.Now().UnixNano()
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			ps := sps.At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				p, err := ToPprof(pd.Dictionary(), rps.At(i).Resource(), ps.At(k))
				if err != nil {
					// A profile pprof cannot express will not convert on a retry either.
					return consumererror.NewPermanent(fmt.Errorf("resource %d scope %d profile %d: %w", i, j, k, err))
				}
				name := fmt.Sprintf("profile-%d-%06d-%d.%d.%d.pb.gz", now, seq, i, j, k)
				if err := writeAtomic(e.cfg.Directory, name, func(f *os.File) error { return p.Write(f) }); err != nil {
					return err
				}
			}
		}
	}
	// The profiles are written: a failed deletion of old files must not make them be sent again.
	if err := e.ret.prune(e.cfg.Directory); err != nil {
		e.logger.Warn("pprof output retention", zap.Error(err))
	}
	return nil
}
