// Package symbolizeprocessor is an OpenTelemetry Collector profiles processor that adds
// functions, lines and inline frames to native frames, asking profsym's symbolizer service.
// Everything else passes through as it came in; data the symbolizer does not answer in time
// passes on unsymbolized, counted, never dropped.
package symbolizeprocessor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper/xprocessorhelper"
	"go.opentelemetry.io/collector/processor/xprocessor"
)

// typeStr is the processor's name in a Collector configuration.
const typeStr = "symbolize"

// Type is the component type, symbolize.
var Type = component.MustNewType(typeStr)

// NewFactory returns the processor's factory, for a Collector's components list.
func NewFactory() xprocessor.Factory {
	return xprocessor.NewFactory(Type, func() component.Config { return createDefaultConfig() },
		xprocessor.WithProfiles(createProfiles, component.StabilityLevelDevelopment))
}

func createProfiles(ctx context.Context, set processor.Settings, cfg component.Config, next xconsumer.Profiles) (xprocessor.Profiles, error) {
	c, ok := cfg.(*Config)
	if !ok {
		return nil, fmt.Errorf("symbolize processor: config of type %T, want *Config", cfg)
	}
	p, err := newProcessor(c, set.TelemetrySettings, next)
	if err != nil {
		return nil, err
	}
	return xprocessorhelper.NewProfiles(ctx, set, cfg, next, p.processProfiles,
		xprocessorhelper.WithStart(p.start),
		xprocessorhelper.WithShutdown(p.shutdown),
		// Symbols are added to the dictionary in place and it is compacted: fan-out pipelines
		// must hand this processor its own copy.
		xprocessorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}
