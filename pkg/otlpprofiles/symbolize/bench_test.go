package symbolize_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize/symbolizetest"
)

// BenchmarkProcessCached is the gateway's own work on a 500-location request whose symbols are
// all in the cache: validation, collection, cache lookups and the dictionary rewrite.
func BenchmarkProcessCached(b *testing.B) {
	h := &symbolizetest.Synthetic{}
	s := symbolize.New(symbolize.Config{Client: symbolizetest.Client(b, h)})
	tmpl := otlptest.Realistic(500, 20)
	s.Process(context.Background(), copyOf(tmpl))
	reqs := make([]pprofile.Profiles, b.N)
	for i := range reqs {
		reqs[i] = copyOf(tmpl)
	}
	calls := h.Calls.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := otlpprofiles.Validate(reqs[i]); err != nil {
			b.Fatal(err)
		}
		rep := s.Process(context.Background(), reqs[i])
		if rep.Symbolized == 0 {
			b.Fatal("nothing symbolized")
		}
	}
	b.StopTimer()
	if h.Calls.Load() != calls {
		b.Fatal("cached request called the symbolizer")
	}
}
