package otlpprofiles_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/symbolizecodec"
)

func TestAddSymbolsInternsAndOrders(t *testing.T) {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	// Empty tables: AddSymbols must seed index 0 before appending.
	d.MappingTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	for range 3 {
		d.LocationTable().AppendEmpty().SetMappingIndex(1)
	}
	// One sample per location: compaction keeps what samples reach.
	d.StackTable().AppendEmpty()
	p := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	for li := range int32(3) {
		d.StackTable().AppendEmpty().LocationIndices().Append(li + 1)
		s := p.Samples().AppendEmpty()
		s.SetStackIndex(li + 1)
		s.Values().Append(1)
	}
	chain := []symbolizecodec.Frame{
		{Function: "inner", File: "a.c", Line: 10, Column: 2, StartLine: 8},
		{Function: "outer", LinkageName: "_Z5outerv", File: "a.c", Line: 20, StartLine: 18},
	}
	st := otlpprofiles.AddSymbols(pd, [][]symbolizecodec.Frame{1: chain, 2: chain, 3: chain[1:]},
		map[int32]symbolizerv1.Fidelity{1: symbolizerv1.Fidelity_FIDELITY_LINES})
	if st.Functions != 2 || st.Locations != 3 || st.Lines != 5 || st.MappingAttributes != 3 {
		t.Fatalf("stats %+v", st)
	}
	if d.StringTable().At(0) != "" || d.FunctionTable().At(0).NameStrindex() != 0 {
		t.Fatal("index 0 not the zero value")
	}
	l := d.LocationTable().At(1).Lines()
	if l.Len() != 2 || d.StringTable().At(int(d.FunctionTable().At(int(l.At(0).FunctionIndex())).NameStrindex())) != "inner" {
		t.Fatal("lines not innermost first")
	}
	fo := d.FunctionTable().At(int(l.At(1).FunctionIndex()))
	if d.StringTable().At(int(fo.SystemNameStrindex())) != "_Z5outerv" || fo.StartLine() != 18 {
		t.Fatal("linkage name or start line lost")
	}
	if d.LocationTable().At(3).Lines().At(0).FunctionIndex() != l.At(1).FunctionIndex() {
		t.Fatal("same function interned twice")
	}
	var keys []string
	for _, ai := range d.MappingTable().At(1).AttributeIndices().AsRaw() {
		keys = append(keys, d.StringTable().At(int(d.AttributeTable().At(int(ai)).KeyStrindex())))
	}
	want := fmt.Sprint([]string{otlpattr.MappingHasFunctions, otlpattr.MappingHasFilenames, otlpattr.MappingHasLineNumbers})
	if fmt.Sprint(keys) != want {
		t.Fatalf("mapping attributes %v, want %s", keys, want)
	}
	if err := otlpprofiles.Validate(pd); err != nil {
		t.Fatal(err)
	}
	if err := otlpprofiles.Orphans(pd); err != nil {
		t.Fatal(err)
	}
}

// FuzzRewrite: for any request that passes validation (malformed dictionaries included:
// duplicate strings, non-zero index 0 entries, missing tables), adding lines to every location
// keeps the request valid and changes nothing but lines, functions, strings and has_*.
func FuzzRewrite(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 8 {
		b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(otlptest.Generate(r))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, nframes uint8) {
		pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(data)
		if err != nil || otlpprofiles.Validate(pd) != nil {
			return
		}
		in := pprofile.NewProfiles()
		pd.CopyTo(in)
		before := otlptest.Resolve(in)
		// One entry more than the table has: an index outside it is left alone.
		locs := make([][]symbolizecodec.Frame, pd.Dictionary().LocationTable().Len()+1)
		for i := range locs {
			for k := range int(nframes % 5) {
				locs[i] = append(locs[i], symbolizecodec.Frame{Function: fmt.Sprintf("f%d", (i+k)%3), File: "x.c", Line: uint32(k)})
			}
		}
		maps := map[int32]symbolizerv1.Fidelity{}
		for i := -1; i <= pd.Dictionary().MappingTable().Len(); i++ {
			maps[int32(i)] = symbolizerv1.Fidelity(int(nframes) % 4)
		}
		otlpprofiles.AddSymbols(pd, locs, maps)
		if err := otlpprofiles.Validate(pd); err != nil {
			t.Fatalf("rewrite made a valid request invalid: %v", err)
		}
		if err := otlptest.Compare(before, otlptest.Resolve(pd)); err != nil {
			t.Fatal(err)
		}
		if err := otlpprofiles.Orphans(pd); err != nil {
			t.Fatalf("rewrite left orphans: %v", err)
		}
	})
}

// TestAddSymbolsRandom: over random valid requests, with frames for every location, the output is
// valid, means what the input meant plus lines, and holds no orphan.
func TestAddSymbolsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 300 {
		pd := otlptest.Generate(r)
		in := pprofile.NewProfiles()
		pd.CopyTo(in)
		locs := make([][]symbolizecodec.Frame, pd.Dictionary().LocationTable().Len())
		for li := range locs {
			for k := range i % 4 {
				locs[li] = append(locs[li], symbolizecodec.Frame{Function: fmt.Sprintf("f%d", (li+k)%5), File: "y.c", Line: uint32(k + 1)})
			}
		}
		maps := map[int32]symbolizerv1.Fidelity{}
		for mi := 1; mi < pd.Dictionary().MappingTable().Len(); mi++ {
			maps[int32(mi)] = symbolizerv1.Fidelity_FIDELITY_FULL
		}
		st := otlpprofiles.AddSymbols(pd, locs, maps)
		if err := otlpprofiles.Validate(pd); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if err := otlptest.Compare(otlptest.Resolve(in), otlptest.Resolve(pd)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if err := otlpprofiles.Orphans(pd); err != nil {
			t.Fatalf("request %d (stats %+v): %v", i, st, err)
		}
	}
}
