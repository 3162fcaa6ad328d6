package symbolizeapi

import (
	"context"
	"slices"
	"testing"

	"connectrpc.com/connect"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/services/symbolizer/internal/indexcache"
)

// TestStringTableNotKeptBesideItsIndex: a replica reading Redis with a file's string table
// alone drops that table from its cache once it loads the file's index, does not load it
// again while the index is in memory, and answers as a replica that never read Redis.
func TestStringTableNotKeptBesideItsIndex(t *testing.T) {
	rc := redisCache(t)
	owner, gnu, lo, hi := setup(t, rc)
	ctx := context.Background()
	half := batch(gnu, lo, hi, 200) // in Redis
	more := batch(gnu, lo, hi, 400) // the same 200, then 200 Redis lacks
	if _, err := owner.Symbolize(ctx, half); err != nil {
		t.Fatal(err)
	}
	rc.Flush(ctx)
	// What every answer must be: a replica without Redis, from the index alone.
	plain, err := New(owner.meta, indexcache.New(1<<30), nil, nil, nil, Options{}).Symbolize(ctx, more)
	if err != nil {
		t.Fatal(err)
	}
	want, err := symbolizecodec.Decode(plain.Msg.Modules[0], 400)
	if err != nil {
		t.Fatal(err)
	}

	replica := New(owner.meta, indexcache.New(1<<30), rc, nil, nil, Options{})
	for _, step := range []struct {
		name              string
		req               *connect.Request[symbolizerv1.SymbolizeRequest]
		indexes, stringsN int // entries in each cache after the call
	}{
		{"every address in Redis: the string table alone", half, 0, 1},
		{"addresses Redis lacks: the index loaded, its table dropped", more, 1, 0},
		{"in Redis again, index in memory: no table loaded", half, 1, 0},
	} {
		resp, err := replica.Symbolize(ctx, step.req)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		m := resp.Msg.Modules[0]
		if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
			t.Fatalf("%s: status %v (%s)", step.name, m.Status, m.Message)
		}
		n := len(step.req.Msg.Modules[0].Addresses)
		got, err := symbolizecodec.Decode(m, n)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("%s: address %d: %+v, want %+v", step.name, i, got[i], want[i])
			}
		}
		_, ix := replica.indexes.Used()
		strsBytes, st := replica.strs.Used()
		if ix != step.indexes || st != step.stringsN {
			t.Errorf("%s: %d indexes and %d string tables (%d bytes) in memory, want %d and %d",
				step.name, ix, st, strsBytes, step.indexes, step.stringsN)
		}
	}
}
