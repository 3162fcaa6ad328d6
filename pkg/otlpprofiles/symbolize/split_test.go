package symbolize

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

// TestSplitProfiles: over generated requests and random sets of waiting locations, the two
// parts are valid, together hold every sample as it was (same stack, frames, values,
// attributes), and a profile is held exactly when one of its samples reaches a waiting
// location.
func TestSplitProfiles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	split := 0
	for iter := range 300 {
		pd := otlptest.Generate(r)
		in := pprofile.NewProfiles()
		pd.CopyTo(in)
		var locs []int32
		for i := 1; i < pd.Dictionary().LocationTable().Len(); i++ {
			if r.IntN(8) == 0 {
				locs = append(locs, int32(i))
			}
		}
		wantHeld := waitingProfiles(in, locs)
		now, later := splitProfiles(pd, locs)
		for _, part := range []pprofile.Profiles{now, later} {
			if err := otlpprofiles.Validate(part); err != nil {
				t.Fatalf("iter %d: a part is invalid: %v", iter, err)
			}
		}
		if now.ProfileCount()+later.ProfileCount() != in.ProfileCount() || later.ProfileCount() != wantHeld {
			t.Fatalf("iter %d: %d + %d profiles from %d, want %d held", iter, now.ProfileCount(), later.ProfileCount(), in.ProfileCount(), wantHeld)
		}
		if now.ProfileCount() > 0 && later.ProfileCount() > 0 {
			split++
		}
		got := append(samples(now), samples(later)...)
		want := samples(in)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("iter %d: samples differ after the split:\n got %v\nwant %v", iter, got, want)
		}
	}
	if split == 0 {
		t.Fatal("no request was split in two: the test checked nothing of the copy")
	}
	t.Logf("%d of 300 requests split in two", split)
}

// waitingProfiles counts the profiles with a sample whose stack holds one of locs.
func waitingProfiles(pd pprofile.Profiles, locs []int32) int {
	n := 0
	st := pd.Dictionary().StackTable()
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				waits := false
				for _, s := range p.Samples().All() {
					for _, l := range st.At(int(s.StackIndex())).LocationIndices().All() {
						waits = waits || slices.Contains(locs, l)
					}
				}
				if waits {
					n++
				}
			}
		}
	}
	return n
}

func samples(pd pprofile.Profiles) []string {
	var out []string
	for _, s := range otlptest.Resolve(pd) {
		out = append(out, fmt.Sprintf("%+v", s))
	}
	return out
}
