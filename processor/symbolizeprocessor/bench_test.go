package symbolizeprocessor

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize/symbolizetest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// BenchmarkConsumeCached is the processor's added latency per request once the symbols of
// its frames are cached, as in a steady fleet: resolution of attribute references, validation,
// collection, cache lookups, the dictionary rewrite and compaction. The request holds every
// address of the test binaries' functions in the OTel eBPF profiler's shape; each iteration
// consumes a fresh copy, the copy not timed.
func BenchmarkConsumeCached(b *testing.B) {
	bins := otlptest.Binaries(b)
	sym := testsupport.StartSymbolizer(b, "")
	paths := make([]string, len(bins))
	for i, bin := range bins {
		paths[i] = bin.Path
	}
	sym.Upload(b, paths...)
	cfg := createDefaultConfig()
	cfg.Endpoint = sym.URL()
	set := processortest.NewNopSettings(Type)
	set.TelemetrySettings = componenttest.NewNopTelemetrySettings()
	next := consumertest.NewNop()
	proc, err := NewFactory().CreateProfiles(b.Context(), set, cfg, next)
	if err != nil {
		b.Fatal(err)
	}
	if err := proc.Start(b.Context(), componenttest.NewNopHost()); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = proc.Shutdown(context.Background()) }()
	pd, _ := otlptest.BuildRequest(b, otlptest.ShapeEBPF, bins)
	warm := pprofile.NewProfiles()
	pd.CopyTo(warm)
	if err := proc.ConsumeProfiles(b.Context(), warm); err != nil {
		b.Fatal(err)
	}
	var spent time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		in := pprofile.NewProfiles()
		pd.CopyTo(in)
		b.StartTimer()
		begin := time.Now()
		if err := proc.ConsumeProfiles(b.Context(), in); err != nil {
			b.Fatal(err)
		}
		spent += time.Since(begin)
	}
	b.ReportMetric(float64(spent.Microseconds())/float64(b.N), "us/request")
	// Reported last: ResetTimer drops metrics reported before it.
	b.ReportMetric(float64(pd.Dictionary().LocationTable().Len()), "locations")
}

// BenchmarkConsumeCached500 is BenchmarkConsumeCached on the request the gateway's
// BenchmarkProcessCached (pkg/otlpprofiles/symbolize) measures, 500 locations over 20 mappings
// in 200 stacks, answered by a synthetic symbolizer: the two figures compare the processor
// with the gateway's own symbolization step on one request.
func BenchmarkConsumeCached500(b *testing.B) {
	h := &symbolizetest.Synthetic{}
	cfg := createDefaultConfig()
	cfg.Endpoint = symbolizetest.Start(b, h)
	set := processortest.NewNopSettings(Type)
	set.TelemetrySettings = componenttest.NewNopTelemetrySettings()
	proc, err := NewFactory().CreateProfiles(b.Context(), set, cfg, consumertest.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	if err := proc.Start(b.Context(), componenttest.NewNopHost()); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = proc.Shutdown(context.Background()) }()
	tmpl := otlptest.Realistic(500, 20)
	warm := pprofile.NewProfiles()
	tmpl.CopyTo(warm)
	if err := proc.ConsumeProfiles(b.Context(), warm); err != nil {
		b.Fatal(err)
	}
	calls := h.Calls.Load()
	var spent time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		in := pprofile.NewProfiles()
		tmpl.CopyTo(in)
		b.StartTimer()
		begin := time.Now()
		if err := proc.ConsumeProfiles(b.Context(), in); err != nil {
			b.Fatal(err)
		}
		spent += time.Since(begin)
	}
	b.StopTimer()
	if h.Calls.Load() != calls {
		b.Fatal("a cached request called the symbolizer")
	}
	b.ReportMetric(float64(spent.Microseconds())/float64(b.N), "us/request")
}
