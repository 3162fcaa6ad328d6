package symbolizeprocessor

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
)

// scopeName names the processor's instruments in the Collector's own telemetry.
const scopeName = "github.com/profsym/profsym/processor/symbolizeprocessor"

// Metric names, documented in README.md ("Telemetry").
const (
	metricResolved       = "otelcol_processor_symbolize_frames_resolved"
	metricUnsymbolized   = "otelcol_processor_symbolize_frames_unsymbolized"
	metricCacheHits      = "otelcol_processor_symbolize_cache_hits"
	metricErrors         = "otelcol_processor_symbolize_symbolizer_errors"
	metricCallDuration   = "otelcol_processor_symbolize_symbolizer_call_duration"
	metricInvalidBatches = "otelcol_processor_symbolize_invalid_batches"
)

type telemetry struct {
	resolved, unsymbolized, cacheHits, errors, invalid metric.Int64Counter
	callDuration                                       metric.Float64Histogram
	// reasons holds one attribute set per reason, so counting does not allocate.
	reasons map[string]metric.AddOption
}

func newTelemetry(set component.TelemetrySettings) (*telemetry, error) {
	m := set.MeterProvider.Meter(scopeName)
	t := &telemetry{reasons: map[string]metric.AddOption{}}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	t.resolved, err = m.Int64Counter(metricResolved, metric.WithUnit("{frame}"),
		metric.WithDescription("Native frames that got functions and lines."))
	add(err)
	t.unsymbolized, err = m.Int64Counter(metricUnsymbolized, metric.WithUnit("{frame}"),
		metric.WithDescription("Frames that needed symbols and passed on without them, by reason (deadline, symbolizer_error, not_found, no_build_id, ...)."))
	add(err)
	t.cacheHits, err = m.Int64Counter(metricCacheHits, metric.WithUnit("{address}"),
		metric.WithDescription("Distinct (binary, address) pairs answered from the processor's cache."))
	add(err)
	t.errors, err = m.Int64Counter(metricErrors, metric.WithUnit("{call}"),
		metric.WithDescription("Symbolizer calls that failed (unreachable, refused, timed out)."))
	add(err)
	t.invalid, err = m.Int64Counter(metricInvalidBatches, metric.WithUnit("{batch}"),
		metric.WithDescription("Batches passed on unsymbolized because an index in them points outside its table."))
	add(err)
	t.callDuration, err = m.Float64Histogram(metricCallDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of symbolizer calls."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, r := range []string{symbolize.ReasonNoBuildID, symbolize.ReasonDisabled, symbolize.ReasonNotFound,
		symbolize.ReasonInvalidDebuginfo, symbolize.ReasonUnavailable, symbolize.ReasonInvalidMapping,
		symbolize.ReasonExecutableNeeded, symbolize.ReasonNoFrames, symbolize.ReasonDeadline,
		symbolize.ReasonSymbolizerError, symbolize.ReasonBadResponse} {
		t.reasons[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r)))
	}
	return t, nil
}

func (t *telemetry) record(ctx context.Context, rep symbolize.Report) {
	if rep.Symbolized > 0 {
		t.resolved.Add(ctx, int64(rep.Symbolized))
	}
	if rep.CacheHits > 0 {
		t.cacheHits.Add(ctx, int64(rep.CacheHits))
	}
	for reason, n := range rep.Unresolved {
		if n == 0 {
			continue
		}
		opt, ok := t.reasons[reason]
		if !ok {
			opt = metric.WithAttributes(attribute.String("reason", reason))
		}
		t.unsymbolized.Add(ctx, int64(n), opt)
	}
}

// onCall observes one symbolizer call; the context of the call is gone by then.
func (t *telemetry) onCall(d time.Duration, err error) {
	ctx := context.Background()
	t.callDuration.Record(ctx, d.Seconds())
	if err != nil {
		t.errors.Add(ctx, 1)
	}
}
