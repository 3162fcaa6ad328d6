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
	metricHeld           = "otelcol_processor_symbolize_held"
	metricHeldExpired    = "otelcol_processor_symbolize_held_expired"
	metricHoldRefused    = "otelcol_processor_symbolize_hold_refused"
	metricHoldDuration   = "otelcol_processor_symbolize_hold_duration"
	metricHeldBytes      = "otelcol_processor_symbolize_held_bytes"
)

type telemetry struct {
	resolved, unsymbolized, cacheHits, errors, invalid metric.Int64Counter
	held, heldExpired, holdRefused                     metric.Int64Counter
	callDuration, holdDuration                         metric.Float64Histogram
	// reasons holds one attribute set per reason, so counting does not allocate.
	reasons map[string]metric.AddOption
}

// newTelemetry creates the instruments; heldBytes reports the bytes of profiles held.
func newTelemetry(set component.TelemetrySettings, heldBytes func() int64) (*telemetry, error) {
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
	t.held, err = m.Int64Counter(metricHeld, metric.WithUnit("{batch}"),
		metric.WithDescription("Parts of batches held because frames in them waited for arriving debuginfo or a busy replica."))
	add(err)
	t.heldExpired, err = m.Int64Counter(metricHeldExpired, metric.WithUnit("{batch}"),
		metric.WithDescription("Held parts that went on at the end of the hold with frames still unanswered (counted unsymbolized by reason)."))
	add(err)
	t.holdRefused, err = m.Int64Counter(metricHoldRefused, metric.WithUnit("{batch}"),
		metric.WithDescription("Batches refused with a retryable error because the hold was full."))
	add(err)
	t.holdDuration, err = m.Float64Histogram(metricHoldDuration, metric.WithUnit("s"),
		metric.WithDescription("How long held parts were held past their arrival."))
	add(err)
	_, err = m.Int64ObservableGauge(metricHeldBytes, metric.WithUnit("By"),
		metric.WithDescription("Protobuf size of the profiles held now."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(heldBytes())
			return nil
		}))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, r := range []string{symbolize.ReasonNoBuildID, symbolize.ReasonDisabled, symbolize.ReasonNotFound,
		symbolize.ReasonInvalidDebuginfo, symbolize.ReasonUnavailable, symbolize.ReasonInvalidMapping,
		symbolize.ReasonExecutableNeeded, symbolize.ReasonNoFrames, symbolize.ReasonDeadline,
		symbolize.ReasonSymbolizerError, symbolize.ReasonBadResponse, symbolize.ReasonArriving, symbolize.ReasonBreakerOpen} {
		t.reasons[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r)))
	}
	return t, nil
}

// record counts a batch's first pass. When a part of it was held, frames that wait
// (symbolize.Retryable reasons) are not counted unsymbolized now: recordHeld counts them when
// the part goes on.
func (t *telemetry) record(ctx context.Context, rep symbolize.Report, held bool) {
	if rep.Symbolized > 0 {
		t.resolved.Add(ctx, int64(rep.Symbolized))
	}
	if rep.CacheHits > 0 {
		t.cacheHits.Add(ctx, int64(rep.CacheHits))
	}
	if held {
		t.held.Add(ctx, 1)
	}
	t.countUnresolved(ctx, rep, func(reason string) bool { return !held || !symbolize.Retryable(reason) })
}

// recordHeld counts a held part as it goes on: what later passes symbolized, and when the
// hold ended first, the frames still waiting.
func (t *telemetry) recordHeld(ctx context.Context, res symbolize.HoldResult) {
	if res.Symbolized > 0 {
		t.resolved.Add(ctx, int64(res.Symbolized))
	}
	t.holdDuration.Record(ctx, res.Held.Seconds())
	if res.Expired {
		t.heldExpired.Add(ctx, 1)
		t.countUnresolved(ctx, res.Report, symbolize.Retryable)
	}
}

func (t *telemetry) countUnresolved(ctx context.Context, rep symbolize.Report, counted func(reason string) bool) {
	for reason, n := range rep.Unresolved {
		if n == 0 || !counted(reason) {
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
