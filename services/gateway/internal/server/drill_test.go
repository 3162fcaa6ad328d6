package server_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/gateway/internal/server"
)

// sendRetry sends until the gateway accepts, as an OTLP client does on UNAVAILABLE, and returns
// how many times it was pushed back.
func sendRetry(t *testing.T, g *gateway, pd pprofile.Profiles) int {
	pushedBack := 0
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := g.send(context.Background(), pd)
		if err == nil {
			return pushedBack
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Errorf("send: %v", err)
			return pushedBack
		}
		pushedBack++
		time.Sleep(20 * time.Millisecond)
	}
}

// symbolizedRequests counts received requests whose leaf frames have lines, and those without.
func symbolizedRequests(reqs []pprofile.Profiles) (yes, no int) {
	for _, r := range reqs {
		out := otlptest.Resolve(r)
		if len(out) > 0 && len(out[0].Stack[0].Lines) > 0 {
			yes++
		} else {
			no++
		}
	}
	return yes, no
}

func settle(t *testing.T, sk *sink, sent int64) {
	t.Helper()
	sk.waitSamples(t, sent, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	if got := sk.samples.Load(); got != sent {
		t.Fatalf("%d samples in, %d out", sent, got)
	}
}

func TestDrillSymbolizerStoppedMidStream(t *testing.T) {
	b := otlptest.Binaries(t)[:1]
	sym := testsupport.StartSymbolizer(t, "")
	sym.Upload(t, b[0].Path)
	sk := startSink(t)
	g := startGateway(t, server.Config{SymbolizerURL: sym.URL(), SymbolizeTimeout: 500 * time.Millisecond,
		SymbolCacheEntries: -1, OTLPGRPCEndpoint: sk.addr})
	var sent int64
	for i := range 30 {
		switch i {
		case 10:
			sym.Stop()
		case 20:
			sym.Start(t)
		}
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
		sendRetry(t, g, pd)
		sent += int64(len(cases))
	}
	settle(t, sk, sent)
	yes, no := symbolizedRequests(sk.received())
	if yes != 20 || no != 10 {
		t.Fatalf("%d requests symbolized, %d not; want 20 and the 10 sent while the symbolizer was down", yes, no)
	}
}

func TestDrillDownstreamStoppedThenBack(t *testing.T) {
	b := otlptest.Binaries(t)[:1]
	sk := startSink(t)
	pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
	size := int64((&pprofile.ProtoMarshaler{}).ProfilesSize(pd))
	g := startGateway(t, server.Config{OTLPGRPCEndpoint: sk.addr, QueueBytes: 3 * size, ExportTimeout: time.Second})
	sk.Stop()

	// Fill the queue until the gateway pushes back.
	var sent int64
	for {
		err := g.send(context.Background(), pd)
		if status.Code(err) == codes.Unavailable {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sent += int64(len(cases))
		if sent > 100*int64(len(cases)) {
			t.Fatal("queue never filled")
		}
	}
	// HTTP senders get 503 with Retry-After.
	body, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := post(t.Context(), http.DefaultClient, "http://"+g.httpAddr+"/v1development/profiles", body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("HTTP with a full queue: %s, Retry-After %q; want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}

	// Senders keep retrying while the downstream comes back.
	var wg sync.WaitGroup
	var pushedBack atomic.Int64
	var sentMu sync.Mutex
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				p, c := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
				pushedBack.Add(int64(sendRetry(t, g, p)))
				sentMu.Lock()
				sent += int64(len(c))
				sentMu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	sk.Start(t)
	wg.Wait()
	settle(t, sk, sent)
	if pushedBack.Load() == 0 {
		t.Fatal("no sender was pushed back while the downstream was down")
	}
}

func TestDrillRedisStopped(t *testing.T) {
	b := otlptest.Binaries(t)[:1]
	redis := testsupport.StartRedis(t)
	sym := testsupport.StartSymbolizer(t, redis.URL())
	sym.Upload(t, b[0].Path)
	sk := startSink(t)
	g := startGateway(t, server.Config{SymbolizerURL: sym.URL(), SymbolCacheEntries: -1, OTLPGRPCEndpoint: sk.addr})
	var sent int64
	for i := range 30 {
		switch i {
		case 10:
			redis.Stop()
		case 20:
			redis.Restart()
		}
		pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
		sendRetry(t, g, pd)
		sent += int64(len(cases))
	}
	settle(t, sk, sent)
	if yes, no := symbolizedRequests(sk.received()); yes != 30 || no != 0 {
		t.Fatalf("%d requests symbolized, %d not; Redis being down must not stop symbolization", yes, no)
	}
}
