package symbolize_test

import (
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/affinity"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/testsupport"
)

// TestBusyIsNotDown runs the gateway's engine and affinity router against three real
// symbolizer replicas behind toxiproxy. Made slow (every answer 6 s late, past the router's
// attempt timeout and the engine's call timeout), a replica is busy, not down: no breaker
// opens, its binaries come back unsymbolized for a reason a hold waits out, the others' are
// symbolized. Killed (refusing), a replica is passed over by the router and its binaries fail
// over to their next owners. Every replica refusing: requests pass on at once, counted, and
// no breaker opens that would delay recovery once they are back. Without a router, one
// symbolizer that answers late never opens the breaker; one that has answered nothing for
// BreakerGiveUp does.
func TestBusyIsNotDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three symbolizers and toxiproxy")
	}
	bins := otlptest.Binaries(t)
	tox := testsupport.StartToxiproxy(t)
	reps := make([]*testsupport.Symbolizer, 3)
	for i := range reps {
		// Uploaded indexes are not kept: each replica holds what it was asked to load.
		reps[i] = testsupport.StartSymbolizer(t, "", "--no-hold-uploaded-indexes")
		for _, b := range bins {
			reps[i].Upload(t, b.Path)
		}
	}
	keys := make([]string, len(bins))
	for i, b := range bins {
		ids, err := buildid.FromFile(b.Path)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = affinity.Key(&symbolizerv1.Module{GnuBuildId: ids.GNU, GoBuildId: ids.Go, Htlhash: ids.HTLHash})
	}
	// Ownership follows the proxies' addresses, which the kernel picks: with three binaries
	// and three replicas, one time in nine a single replica owns them all and nothing would
	// be left for the others to answer. Such a draw is dealt again.
	var (
		proxies []*toxiproxy.Proxy
		addrs   []string
		owner   int
	)
	for attempt := 0; ; attempt++ {
		proxies, addrs = make([]*toxiproxy.Proxy, len(reps)), make([]string, len(reps))
		for i, r := range reps {
			proxies[i] = tox.Proxy("replica-"+strconv.Itoa(attempt)+"-"+strconv.Itoa(i), strings.TrimPrefix(r.URL(), "http://"))
			addrs[i] = proxies[i].Listen
		}
		owners := make([]string, len(keys))
		for i, k := range keys {
			owners[i] = affinity.Owners(k, addrs)[0]
		}
		if slices.ContainsFunc(owners, func(o string) bool { return o != owners[0] }) {
			// The slow replica is the owner of the first binary; another owns at least one.
			owner = slices.Index(addrs, owners[0])
			break
		}
		if attempt == 20 {
			t.Fatalf("20 draws of proxy addresses gave every binary one owner: %v", owners)
		}
		for _, p := range proxies {
			if err := p.Delete(); err != nil {
				t.Fatal(err)
			}
		}
	}
	slow := proxies[owner]
	other := (owner + 1) % len(reps)
	var logs testsupport.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	router, err := affinity.New(affinity.Config{Scheme: "http", Static: addrs, AttemptTimeout: time.Second,
		EjectFor: 2 * time.Second, BalanceFactor: 0, Logger: log,
		NewClient: func(b string) symbolizerv1connect.SymbolizerServiceClient {
			return symbolize.NewClient(http.DefaultClient, b, "")
		}})
	if err != nil {
		t.Fatal(err)
	}
	router.Start()
	t.Cleanup(router.Close)
	s := symbolize.New(symbolize.Config{Client: router, Timeout: 4 * time.Second, CallTimeout: 3 * time.Second,
		CacheEntries: -1, BreakerFailures: 2, BreakerOpen: time.Minute, Logger: log})

	// Every replica answers: all frames symbolized (each replica loads what it owns).
	pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
	if rep := s.Process(t.Context(), pd); rep.Symbolized != len(cases) {
		t.Fatalf("before any fault: report %+v, want all %d frames symbolized", rep, len(cases))
	}

	// Busy: every answer of the first binary's owner comes 6 s late.
	if _, err := slow.AddToxic("late", "latency", "downstream", 1, toxiproxy.Attributes{"latency": 6000}); err != nil {
		t.Fatal(err)
	}
	var symbolized, waiting int
	for i := range 5 {
		pd, _ := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
		rep := s.Process(t.Context(), pd)
		if s.BreakerOpen() || rep.Unresolved[symbolize.ReasonBreakerOpen] > 0 {
			t.Fatalf("busy replica, request %d: the breaker opened (report %+v)", i, rep)
		}
		for reason, n := range rep.Unresolved {
			if !symbolize.Retryable(reason) {
				t.Fatalf("busy replica, request %d: %d frames unsymbolized for %q, which no hold waits out (report %+v)", i, n, reason, rep)
			}
		}
		symbolized += rep.Symbolized
		waiting += len(rep.Retry)
	}
	if symbolized == 0 || waiting == 0 {
		t.Fatalf("busy replica: %d frames symbolized by the other replicas and %d waiting for the busy one; want both", symbolized, waiting)
	}
	t.Logf("one replica busy: %d frames symbolized, %d waiting for it, breaker closed", symbolized, waiting)
	if err := slow.RemoveToxic("late"); err != nil {
		t.Fatal(err)
	}

	// A replica killed: its binaries fail over to their next owners, which load them.
	reps[other].Stop()
	deadline := time.Now().Add(time.Minute)
	for {
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
		rep := s.Process(t.Context(), pd)
		if s.BreakerOpen() {
			t.Fatalf("one replica down, two answering: the breaker opened (report %+v)", rep)
		}
		if rep.Symbolized == len(cases) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("one replica down: report %+v, want every frame symbolized by the next owners", rep)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Every replica refusing: requests pass on at once, nothing waited for.
	for _, r := range reps {
		r.Stop()
	}
	for i := range 6 {
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
		rep := s.Process(t.Context(), pd)
		if rep.Unresolved[symbolize.ReasonSymbolizerError] != len(cases) || len(rep.Retry) != 0 {
			t.Fatalf("every replica refusing, request %d: report %+v, want every frame symbolizer_error and none waiting", i, rep)
		}
	}
	if s.BreakerOpen() {
		t.Fatal("every replica refusing: the breaker opened, which would delay recovery")
	}
	if !strings.Contains(logs.String(), "symbolizer replica failed") {
		t.Fatalf("the router did not pass over the refusing replicas:\n%s", logs.String())
	}

	// Without a router: one symbolizer, late then refusing.
	reps[owner].Start(t)
	direct := symbolize.New(symbolize.Config{Client: symbolize.NewClient(http.DefaultClient, "http://"+slow.Listen, ""),
		Timeout: time.Second, CallTimeout: 500 * time.Millisecond, CacheEntries: -1, BreakerFailures: 2, BreakerOpen: time.Minute, Logger: log})
	if _, err := slow.AddToxic("late", "latency", "downstream", 1, toxiproxy.Attributes{"latency": 2000}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
		if rep := direct.Process(t.Context(), pd); rep.Unresolved[symbolize.ReasonDeadline] != len(cases) || direct.BreakerOpen() {
			t.Fatalf("late symbolizer, request %d: report %+v, breaker open %v; want every frame past the deadline and the breaker closed",
				i, rep, direct.BreakerOpen())
		}
	}
	// Hung: it has answered nothing for BreakerGiveUp (a short one here).
	hung := symbolize.New(symbolize.Config{Client: symbolize.NewClient(http.DefaultClient, "http://"+slow.Listen, ""),
		Timeout: time.Second, CallTimeout: 500 * time.Millisecond, CacheEntries: -1, BreakerFailures: 2, BreakerOpen: time.Minute,
		BreakerGiveUp: 100 * time.Millisecond, Logger: log})
	time.Sleep(200 * time.Millisecond)
	for i := 0; i < 10 && !hung.BreakerOpen(); i++ {
		pd, _ := otlptest.BuildRequest(t, otlptest.ShapeEBPF, bins)
		hung.Process(t.Context(), pd)
	}
	if !hung.BreakerOpen() {
		t.Fatal("a symbolizer that answered nothing past BreakerGiveUp: the breaker stayed closed")
	}
}
