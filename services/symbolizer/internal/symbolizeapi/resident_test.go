package symbolizeapi

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/indexcache"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// residentOnly returns req with every module marked resident_only.
func residentOnly(req *connect.Request[symbolizerv1.SymbolizeRequest]) *connect.Request[symbolizerv1.SymbolizeRequest] {
	out := &symbolizerv1.SymbolizeRequest{}
	for _, m := range req.Msg.GetModules() {
		c := proto.CloneOf(m)
		c.ResidentOnly = true
		out.Modules = append(out.Modules, c)
	}
	return connect.NewRequest(out)
}

// TestResidentOnly: a module sent with resident_only is answered from the replica's memory
// or from Redis when they hold every address, and NOT_RESIDENT otherwise, without loading
// the index.
func TestResidentOnly(t *testing.T) {
	rc := redisCache(t)
	owner, gnu, lo, hi := setup(t, rc)
	half := batch(gnu, lo, hi, 200)
	// The owner answers half of the addresses: Redis holds those results.
	first, err := owner.Symbolize(context.Background(), half)
	if err != nil {
		t.Fatal(err)
	}
	rc.Flush(context.Background())
	more := batch(gnu, lo, hi, 400) // the same 200 first (the same seed), then 200 more
	if !slices.Equal(more.Msg.Modules[0].Addresses[:200], half.Msg.Modules[0].Addresses) {
		t.Fatal("batch no longer repeats its addresses; the test needs a batch Redis answers only in part")
	}

	for _, tc := range []struct {
		name     string
		svc      func() *Service
		req      *connect.Request[symbolizerv1.SymbolizeRequest]
		want     symbolizerv1.ModuleStatus
		resident int // indexes in the replica's memory after the call
	}{
		{"every address in Redis", func() *Service { return New(owner.meta, indexcache.New(1<<30), rc, nil, nil, Options{}) },
			half, symbolizerv1.ModuleStatus_MODULE_STATUS_OK, 0},
		{"some addresses not in Redis", func() *Service { return New(owner.meta, indexcache.New(1<<30), rc, nil, nil, Options{}) },
			more, symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_RESIDENT, 0},
		{"no result cache", func() *Service { return New(owner.meta, indexcache.New(1<<30), nil, nil, nil, Options{}) },
			half, symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_RESIDENT, 0},
		{"index in memory", func() *Service { return owner }, more, symbolizerv1.ModuleStatus_MODULE_STATUS_OK, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := tc.svc()
			resp, err := svc.Symbolize(context.Background(), residentOnly(tc.req))
			if err != nil {
				t.Fatal(err)
			}
			m := resp.Msg.Modules[0]
			if m.Status != tc.want {
				t.Fatalf("status %v (%s), want %v", m.Status, m.Message, tc.want)
			}
			if _, n := svc.indexes.Used(); n != tc.resident {
				t.Fatalf("%d indexes in memory after the call, want %d", n, tc.resident)
			}
			if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
				if !strings.Contains(m.Message, "owner") {
					t.Fatalf("message %q does not say what to do", m.Message)
				}
				return
			}
			n := len(tc.req.Msg.Modules[0].Addresses)
			got, err := symbolizecodec.Decode(m, n)
			if err != nil {
				t.Fatal(err)
			}
			want, err := symbolizecodec.Decode(first.Msg.Modules[0], 200)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("address %d: %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
}

// slowIndexStore delays reads of index objects, as a large index read from a busy store.
type slowIndexStore struct {
	store.Store
	delay time.Duration
	reads atomic.Int32
}

func (s *slowIndexStore) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	if strings.HasSuffix(key, ".index") {
		s.reads.Add(1)
		time.Sleep(s.delay)
	}
	return s.Store.Open(ctx, key)
}

// TestSlowIndexLoadAnsweredInTime: a call whose index takes longer to load than the call's
// deadline is answered before the deadline, the module UNAVAILABLE, and the load goes on:
// the next call is answered from memory, and the index was read once.
func TestSlowIndexLoadAnsweredInTime(t *testing.T) {
	svc, gnu, lo, hi := setup(t, nil)
	slow := &slowIndexStore{Store: svc.meta.Store(), delay: 1500 * time.Millisecond}
	md := catalog.New(slow, catalog.Options{MaxSize: 1 << 30, TempDir: t.TempDir()})
	replica := New(md, indexcache.New(1<<30), nil, nil, nil, Options{})
	req := batch(gnu, lo, hi, 100)

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	resp, err := replica.Symbolize(ctx, req)
	if err != nil {
		t.Fatalf("the call failed (%v): a client routing by build ID would take the replica for dead", err)
	}
	if ctx.Err() != nil {
		t.Fatal("answered after the caller's deadline")
	}
	m := resp.Msg.Modules[0]
	if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_UNAVAILABLE || !strings.Contains(m.Message, "retry") {
		t.Fatalf("status %v %q, want UNAVAILABLE saying to retry", m.Status, m.Message)
	}
	// The load goes on; a later call finds the index in memory.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, n := replica.indexes.Used(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the index never landed in memory after the first call gave up on it")
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err = replica.Symbolize(context.Background(), req)
	if err != nil || resp.Msg.Modules[0].Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		t.Fatalf("second call: %v %v", resp, err)
	}
	if n := slow.reads.Load(); n != 1 {
		t.Fatalf("the index was read %d times, want once", n)
	}
}
