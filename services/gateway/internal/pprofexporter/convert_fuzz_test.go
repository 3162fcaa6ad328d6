package pprofexporter_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/services/gateway/internal/pprofexporter"
)

// FuzzConvert: whatever bytes arrive, decoding plus validation never panics, and a request
// that passes validation goes through symbolization, rewriting, pprof conversion and
// re-encoding without a panic.
func FuzzConvert(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(otlptest.Generate(r))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x12, 0x02, 0x0a, 0x00})
	sym := symbolize.New(symbolize.Config{})
	f.Fuzz(func(t *testing.T, data []byte) {
		pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(data)
		if err != nil {
			return
		}
		if err := otlpprofiles.Validate(pd); err != nil {
			return
		}
		sym.Process(context.Background(), pd)
		locs := make([][]symbolizecodec.Frame, pd.Dictionary().LocationTable().Len())
		for i := range locs {
			locs[i] = []symbolizecodec.Frame{{Function: "f", File: "x.c", Line: 3}, {Function: "g"}}
		}
		maps := map[int32]symbolizerv1.Fidelity{}
		for i := 0; i < pd.Dictionary().MappingTable().Len(); i++ {
			maps[int32(i)] = symbolizerv1.Fidelity_FIDELITY_FULL
		}
		otlpprofiles.AddSymbols(pd, locs, maps)
		if err := otlpprofiles.Validate(pd); err != nil {
			t.Fatalf("rewrite made a valid request invalid: %v", err)
		}
		otlptest.Resolve(pd)
		rps := pd.ResourceProfiles()
		for i := 0; i < rps.Len(); i++ {
			for j := 0; j < rps.At(i).ScopeProfiles().Len(); j++ {
				ps := rps.At(i).ScopeProfiles().At(j).Profiles()
				for k := 0; k < ps.Len(); k++ {
					_, _ = pprofexporter.ToPprof(pd.Dictionary(), rps.At(i).Resource(), ps.At(k))
				}
			}
		}
		if _, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
	})
}
