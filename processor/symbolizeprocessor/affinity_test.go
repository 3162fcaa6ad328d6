package symbolizeprocessor

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/affinity"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// TestAffinity runs the processor against three real symbolizer replicas, each binary stored
// only on the replica that owns its build ID: every frame comes out symbolized, so every
// lookup went to its owner (any other replica answers NOT_FOUND). Then each binary is also
// stored on its next owner and one replica is killed: the frames still come out symbolized,
// from the next owners.
func TestAffinity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three symbolizers and compiles test binaries")
	}
	bins := otlptest.Binaries(t)
	reps := make([]*testsupport.Symbolizer, 3)
	addrs := make([]string, 3)
	byAddr := map[string]*testsupport.Symbolizer{}
	for i := range reps {
		reps[i] = testsupport.StartSymbolizer(t, "")
		addrs[i] = strings.TrimPrefix(reps[i].URL(), "http://")
		byAddr[addrs[i]] = reps[i]
	}
	owners := make([][]string, len(bins))
	owned := map[string]int{}
	for i, b := range bins {
		ids, err := buildid.FromFile(b.Path)
		if err != nil {
			t.Fatal(err)
		}
		key := affinity.Key(&symbolizerv1.Module{GnuBuildId: ids.GNU, GoBuildId: ids.Go, Htlhash: ids.HTLHash})
		owners[i] = affinity.Owners(key, addrs)
		owned[owners[i][0]]++
		byAddr[owners[i][0]].Upload(t, b.Path)
	}
	t.Logf("%d binaries over 3 replicas: %v", len(bins), owned)

	cfg := createDefaultConfig()
	cfg.Endpoint = reps[0].URL() // used only without affinity
	cfg.CacheEntries = 0         // every batch asks the replicas
	cfg.Affinity.Enabled = true
	cfg.Affinity.Endpoints = addrs
	cfg.Affinity.AttemptTimeout = 500 * time.Millisecond
	p := start(t, cfg)

	consume := func(what string) time.Duration {
		t.Helper()
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
		in := pprofile.NewProfiles()
		pd.CopyTo(in)
		begin := time.Now()
		if err := p.proc.ConsumeProfiles(t.Context(), pd); err != nil {
			t.Fatal(err)
		}
		took := time.Since(begin)
		got := p.sink.AllProfiles()
		out := got[len(got)-1]
		if err := otlpprofiles.Validate(out); err != nil {
			t.Fatalf("%s: output invalid: %v", what, err)
		}
		resolved := otlptest.Resolve(out)
		if err := otlptest.Compare(otlptest.Resolve(in), resolved); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		otlptest.CheckFrames(t, resolved, cases)
		return took
	}
	consume("owners only")
	if n := p.counter(t, metricUnsymbolized, ""); n != 0 {
		t.Fatalf("%d frames unsymbolized with every binary on its owner", n)
	}

	// Each binary on its next owner too; the replica owning the most binaries dies.
	victim := addrs[0]
	for a, n := range owned {
		if n > owned[victim] {
			victim = a
		}
	}
	for i, b := range bins {
		byAddr[owners[i][1]].Upload(t, b.Path)
	}
	byAddr[victim].Stop()
	took := consume("one replica killed")
	t.Logf("replica %s (owner of %d binaries) killed: the next batch was answered in %v", victim, owned[victim], took)
	if n := p.counter(t, metricUnsymbolized, ""); n != 0 {
		t.Fatalf("%d frames unsymbolized after the failover", n)
	}
}
