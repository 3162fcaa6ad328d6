package symbolizeapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/indexcache"
	"github.com/profsym/profsym/services/symbolizer/internal/resultcache"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

const src = `
#include <stdio.h>
static int __attribute__((noinline)) leaf(int x) { return x * 3 + 1; }
static inline int mid(int x) { return leaf(x) + 2; }
int main(int argc, char **argv) { printf("%d\n", mid(argc)); return 0; }
`

// setup stores a compiled binary and returns a service over it, its GNU build ID and the
// bounds of its executable segment.
func setup(tb testing.TB, rc *resultcache.Cache) (*Service, string, uint64, uint64) {
	// PROFSYM_BENCH_BINARY points the benchmark at a large binary instead of the tiny one.
	path := os.Getenv("PROFSYM_BENCH_BINARY")
	if path == "" {
		path = testsupport.CompileC(tb, src, "-g", "-O2")
	}
	data, _ := os.ReadFile(path)
	ids, _ := buildid.Compute(bytes.NewReader(data), int64(len(data)))
	s, _ := store.NewFolder(tb.TempDir())
	md := catalog.New(s, catalog.Options{MaxSize: 1 << 30, TempDir: tb.TempDir()})
	sum := sha256.Sum256(data)
	id := catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: ids.GNU}
	up, err := md.Initiate(context.Background(), catalog.Desc{BuildID: id, Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO,
		SHA256: hex.EncodeToString(sum[:]), Size: uint64(len(data)), Source: debuginfov1.UploadSource_UPLOAD_SOURCE_CI})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Put(context.Background(), up.Object(), bytes.NewReader(data), int64(len(data))); err != nil {
		tb.Fatal(err)
	}
	if _, err := md.Finish(context.Background(), id, up.ID); err != nil {
		tb.Fatal(err)
	}
	f, _ := elf.Open(path)
	defer f.Close()
	var lo, hi uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			lo, hi = p.Vaddr, p.Vaddr+p.Filesz
		}
	}
	return New(md, indexcache.New(1<<30), rc, nil, nil, Options{}), ids.GNU, lo, hi
}

func batch(gnu string, lo, hi uint64, n int) *connect.Request[symbolizerv1.SymbolizeRequest] {
	r := rand.New(rand.NewPCG(1, 2))
	addrs := make([]uint64, n)
	for i := range addrs {
		addrs[i] = lo + r.Uint64N(hi-lo)
	}
	return connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: gnu, Addresses: addrs}}})
}

func TestIndexBuiltOnceAndStoredIndexUsed(t *testing.T) {
	svc, gnu, lo, hi := setup(t, nil)
	// Drop the stored index: the first call builds it and stores it again.
	keys, _ := svc.meta.Store().List(context.Background(), "records/")
	for _, k := range keys {
		if bytes.HasSuffix([]byte(k), []byte(".index")) {
			if err := svc.meta.Store().Delete(context.Background(), k); err != nil {
				t.Fatal(err)
			}
		}
	}
	resp, err := svc.Symbolize(context.Background(), batch(gnu, lo, hi, 100))
	if err != nil || resp.Msg.Modules[0].Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		t.Fatalf("%v %v", resp, err)
	}
	keys, _ = svc.meta.Store().List(context.Background(), "records/")
	stored := false
	for _, k := range keys {
		stored = stored || bytes.HasSuffix([]byte(k), []byte(".index"))
	}
	if !stored {
		t.Fatal("the built index was not stored")
	}
	// A fresh service (a restart) loads the stored index.
	svc2 := New(svc.meta, indexcache.New(1<<30), nil, nil, nil, Options{})
	resp2, err := svc2.Symbolize(context.Background(), batch(gnu, lo, hi, 100))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(resp.Msg, resp2.Msg) {
		t.Fatal("results differ after reload")
	}
	locs, err := symbolizecodec.Decode(resp.Msg.Modules[0], 100)
	if err != nil {
		t.Fatal(err)
	}
	frames := 0
	for _, l := range locs {
		frames += len(l)
	}
	if frames == 0 {
		t.Fatal("no frames")
	}
}

func BenchmarkSymbolize10k(b *testing.B) {
	for _, mode := range []string{"index", "redis"} {
		b.Run(mode, func(b *testing.B) {
			var rc *resultcache.Cache
			if mode == "redis" {
				rc = redisCache(b)
			}
			svc, gnu, lo, hi := setup(b, rc)
			req := batch(gnu, lo, hi, 10000)
			if _, err := svc.Symbolize(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			if rc != nil {
				rc.Flush(context.Background())
				// A replica without the index in memory: every address is a Redis hit.
				svc = New(svc.meta, indexcache.New(1<<30), rc, nil, nil, Options{})
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			defer func() { b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op") }()
			for i := 0; i < b.N; i++ {
				resp, err := svc.Symbolize(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				// What the server sends: the response is part of a batch's cost.
				out, err := proto.Marshal(resp.Msg)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(out)), "resp-bytes")
			}
		})
	}
}

// redisCache is a result cache on a real redis-server of the test's own, closed after it.
func redisCache(tb testing.TB) *resultcache.Cache {
	tb.Helper()
	r := testsupport.StartRedis(tb)
	client, err := resultcache.NewRedisClient(r.URL())
	if err != nil {
		tb.Fatal(err)
	}
	rc := resultcache.New(resultcache.Options{Redis: client})
	tb.Cleanup(func() {
		rc.Close()
		if err := client.Close(); err != nil {
			tb.Errorf("close redis client: %v", err)
		}
	})
	return rc
}

// TestRedisAnswersLikeTheIndex: a replica without the index answers a batch larger than one
// result cache read from Redis alone, with the frames the index gave.
func TestRedisAnswersLikeTheIndex(t *testing.T) {
	rc := redisCache(t)
	svc, gnu, lo, hi := setup(t, rc)
	req := batch(gnu, lo, hi, 3*fetchChunk+17)
	first, err := svc.Symbolize(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	rc.Flush(context.Background())
	n := len(req.Msg.Modules[0].Addresses)
	want, err := symbolizecodec.Decode(first.Msg.Modules[0], n)
	if err != nil {
		t.Fatal(err)
	}

	// A replica without the index, and a store without the file or its index, only their
	// string table: anything not answered by Redis would come back UNAVAILABLE.
	objs, err := svc.meta.Store().List(context.Background(), "records/")
	if err != nil {
		t.Fatal(err)
	}
	removed, kept := 0, 0
	for _, k := range objs {
		switch {
		case strings.HasSuffix(k, "/record.json"):
		case strings.HasSuffix(k, ".strings"):
			kept++
		default:
			if err := svc.meta.Store().Delete(context.Background(), k); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed != 2 || kept != 1 {
		t.Fatalf("removed %d objects (want the file and its index) and kept %d string tables of %q", removed, kept, objs)
	}
	replica := New(svc.meta, indexcache.New(1<<30), rc, nil, nil, Options{})
	second, err := replica.Symbolize(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if st := second.Msg.Modules[0].Status; st != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		t.Fatalf("replica: %v %s", st, second.Msg.Modules[0].Message)
	}
	got, err := symbolizecodec.Decode(second.Msg.Modules[0], n)
	if err != nil {
		t.Fatal(err)
	}
	resolved := 0
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("address %d: %+v from Redis, %+v from the index", i, got[i], want[i])
		}
		if len(want[i]) > 0 {
			resolved++
		}
	}
	if resolved == 0 {
		t.Fatal("nothing resolved")
	}
}

// cpuTime is the process's user and system CPU time: on a shared machine it says what a
// batch costs better than wall time does (Redis's own work is not counted).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestStringTableRepaired: a store without the string table object (written before it
// existed), or with one that is not the index's, still gives right answers from a replica
// without the index, which stores the index's table for the next.
func TestStringTableRepaired(t *testing.T) {
	rc := redisCache(t)
	svc, gnu, lo, hi := setup(t, rc)
	req := batch(gnu, lo, hi, 300)
	first, err := svc.Symbolize(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	rc.Flush(context.Background())
	want, err := symbolizecodec.Decode(first.Msg.Modules[0], 300)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := svc.meta.Store()
	objs, err := st.List(ctx, "records/")
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for _, k := range objs {
		if strings.HasSuffix(k, ".strings") {
			key = k
		}
	}
	if key == "" {
		t.Fatalf("no string table stored among %q", objs)
	}
	good := readObject(t, st, key)

	b := index.NewBuilder()
	b.String("a string table of another index")
	other, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	foreign := other.MarshalStrings()
	for _, tc := range []struct {
		name  string
		setup func()
	}{
		{"missing", func() {
			if err := st.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
		}},
		{"another index's", func() {
			if err := st.Put(ctx, key, bytes.NewReader(foreign), int64(len(foreign))); err != nil {
				t.Fatal(err)
			}
		}},
		{"corrupt", func() {
			if err := st.Put(ctx, key, strings.NewReader("not a string table"), 18); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			replica := New(svc.meta, indexcache.New(1<<30), rc, nil, nil, Options{})
			resp, err := replica.Symbolize(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			m := resp.Msg.Modules[0]
			if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
				t.Fatalf("%v %s", m.Status, m.Message)
			}
			got, err := symbolizecodec.Decode(m, 300)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("address %d: %+v, want %+v", i, got[i], want[i])
				}
			}
			if !bytes.Equal(readObject(t, st, key), good) {
				t.Fatal("the index's string table was not stored again")
			}
		})
	}
}

func readObject(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	rc, _, err := st.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
