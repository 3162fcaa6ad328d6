package symbolizeapi

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/profsym/profsym/pkg/tracing"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
)

var tracer = tracing.Tracer("github.com/profsym/profsym/services/symbolizer/internal/symbolizeapi")

// startIndexSpan starts one of the spans of getting a file's index: index (memory or below),
// index.load (the stored serialized index) and index.build (from the file). They carry the
// build ID and companion variant only: a span per file and stage, never per address.
func startIndexSpan(ctx context.Context, name string, f *catalog.File, variant string) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{attribute.String("profsym.build_id", f.BuildID.ID)}
	if variant != "" {
		attrs = append(attrs, attribute.String("profsym.index.companions", variant))
	}
	return tracing.Start(ctx, tracer, name, attrs...)
}
