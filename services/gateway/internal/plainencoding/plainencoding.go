// Package plainencoding is a Collector encoding extension for OTLP profiles protobuf whose
// resource and scope attributes stay in place: the string table holds only what the dictionary
// and the profiles reference. pdata's ProtoMarshaler writes those attributes as string-table
// references and appends their strings, which the Profiling SIG's profcheck -check-orphans
// reports as orphans; Marshal puts them back in place. The contrib
// file exporter uses it with `encoding: otlp_plain` (and `format: proto` for its length-prefixed
// framing).
package plainencoding

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Type is the extension's name in a Collector configuration.
var Type = component.MustNewType("otlp_plain")

// Config has no settings: the encoding is OTLP protobuf.
type Config struct {
	// prevent unkeyed literals
	_ struct{}
}

// NewFactory returns the factory of the encoding extension.
func NewFactory() extension.Factory {
	return extension.NewFactory(Type, func() component.Config { return &Config{} },
		func(context.Context, extension.Settings, component.Config) (extension.Extension, error) {
			return plain{}, nil
		}, component.StabilityLevelAlpha)
}

type plain struct{}

var _ pprofile.Marshaler = plain{}

func (plain) Start(context.Context, component.Host) error { return nil }

func (plain) Shutdown(context.Context) error { return nil }

// MarshalProfiles encodes pd as an ExportProfilesServiceRequest; pd is not changed.
func (plain) MarshalProfiles(pd pprofile.Profiles) ([]byte, error) {
	return Marshal(pd)
}
