package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus/testutil"
	goredis "github.com/redis/go-redis/v9"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/testsupport"
)

// fleet is several symbolizer replicas on one MinIO bucket, with or without Redis, as a
// deployment runs them.
type fleet struct {
	minio    *testsupport.MinIO
	mc       *minio.Client
	redis    *testsupport.Redis
	rcl      *goredis.Client
	replicas []*running
}

const fleetBucket = "fleet"

func startFleet(t *testing.T, n int, withRedis bool, extra ...string) *fleet {
	t.Helper()
	f := &fleet{minio: testsupport.StartMinIO(t)}
	f.mc = f.minio.NewBucket(t, fleetBucket)
	if withRedis {
		f.redis = testsupport.StartRedis(t)
		f.rcl = goredis.NewClient(&goredis.Options{Addr: f.redis.Addr()})
		t.Cleanup(func() { _ = f.rcl.Close() })
		extra = append([]string{"--redis-url", f.redis.URL()}, extra...)
	}
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(f.minio.SecretKey()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range n {
		args := append([]string{"--s3-endpoint", f.minio.Endpoint(), "--s3-bucket", fleetBucket, "--s3-region", f.minio.Region(),
			"--s3-access-key", f.minio.AccessKey(), "--s3-secret-key-file", secretFile, "--s3-insecure"}, extra...)
		f.replicas = append(f.replicas, start(t, args...))
	}
	return f
}

// builds sums index builds over the replicas.
func (f *fleet) builds() (ok, waits float64) {
	for _, r := range f.replicas {
		ok += testutil.ToFloat64(r.srv.Metrics.IndexBuilds.WithLabelValues("ok"))
		waits += testutil.ToFloat64(r.srv.Metrics.IndexBuildWaits)
	}
	return ok, waits
}

// dropIndexes deletes every stored index and string table, as in a store written before
// indexes were stored or after they were deleted: the next reader must build them.
func (f *fleet) dropIndexes(t *testing.T) (shas []string) {
	t.Helper()
	ctx := context.Background()
	for obj := range f.mc.ListObjects(ctx, fleetBucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		if strings.HasSuffix(obj.Key, ".index") || strings.HasSuffix(obj.Key, ".strings") {
			if strings.HasSuffix(obj.Key, ".index") {
				sha, _, _ := strings.Cut(filepath.Base(obj.Key), ".") // <sha256>[variant].v<format>.index
				shas = append(shas, sha)
			}
			if err := f.mc.RemoveObject(ctx, fleetBucket, obj.Key, minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return shas
}

// symbolizeEverywhere sends n requests for bin at once, spread over the replicas from index
// from on, and checks every answer against the engine's.
func (f *fleet) symbolizeEverywhere(t *testing.T, bin binary, from, n int) {
	t.Helper()
	want := engineFrames(t, bin.path, bin.addrs)
	var wg sync.WaitGroup
	for i := range n {
		r := f.replicas[from+i%(len(f.replicas)-from)]
		wg.Go(func() {
			client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			resp, err := client.Symbolize(ctx, connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{
				{GnuBuildId: bin.ids.GNU, Addresses: bin.addrs}}}))
			if err != nil {
				t.Errorf("symbolize on %s: %v", r.url, err)
				return
			}
			m := resp.Msg.Modules[0]
			if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
				t.Errorf("symbolize on %s: %v %s", r.url, m.Status, m.Message)
				return
			}
			sameLocations(t, "fleet", m, want)
		})
	}
	wg.Wait()
}

// deadBuilder leaves the lease of building sha's index as a replica that died holding it
// would, expiring in 2 s: a Redis key, or without Redis an object in the bucket.
func (f *fleet) deadBuilder(t *testing.T, sha string) {
	t.Helper()
	key := fmt.Sprintf("index/v%d/%s", index.FormatVersion, sha) // the build lease of this index format
	if f.rcl != nil {
		if err := f.rcl.Set(context.Background(), "profsym:lease:"+key, "a dead replica", 2*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		return
	}
	body := "a-dead-replica " + strconv.FormatInt(time.Now().Add(2*time.Second).UnixMilli(), 10)
	if _, err := f.mc.PutObject(context.Background(), fleetBucket, "leases/"+key, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestFleetBuildsAnIndexOnce: many requests at once, on three replicas, for a binary whose
// index the store lacks: one replica builds it, the others wait and load it. A builder that
// died holding the lease is taken over after the lease expires. With Redis the leases are
// Redis keys; without, objects in the bucket.
func TestFleetBuildsAnIndexOnce(t *testing.T) {
	for _, withRedis := range []bool{true, false} {
		t.Run(map[bool]string{true: "redis leases", false: "bucket leases"}[withRedis], func(t *testing.T) {
			testFleetBuildsAnIndexOnce(t, withRedis)
		})
	}
}

func testFleetBuildsAnIndexOnce(t *testing.T, withRedis bool) {
	// A TTL that a loaded machine renews in time also through S3 (a read and a conditional write
	// every third of it); the dead builder's lease below expires on its own clock.
	f := startFleet(t, 4, withRedis, "--lease-ttl", "3s")
	bin := compile(t, "-g", "-O2")
	// Replica 0 takes the upload (and holds the index built then); the others have nothing.
	if res := upload(t, f.replicas[0].url, bin.path); res[0].Outcome != "uploaded" {
		t.Fatalf("upload = %+v", res[0])
	}
	shas := f.dropIndexes(t)
	if len(shas) != 1 {
		t.Fatalf("stored indexes %v, want one", shas)
	}
	before, _ := f.builds() // the upload's verification builds through the catalog, not here
	f.symbolizeEverywhere(t, bin, 1, 24)
	built, waits := f.builds()
	t.Logf("release: %v builds, %v replicas waited", built-before, waits)
	if built-before != 1 {
		t.Fatalf("%v index builds across the replicas, want 1", built-before)
	}
	if got := f.storedIndexes(t); got != 1 {
		t.Fatalf("%d stored indexes after the build, want 1", got)
	}

	// A builder died holding the lease: nobody builds until it expires, then one does.
	bin2 := compile(t, "-g", "-O1")
	if res := upload(t, f.replicas[0].url, bin2.path); res[0].Outcome != "uploaded" {
		t.Fatalf("upload = %+v", res[0])
	}
	for _, sha := range f.dropIndexes(t) {
		f.deadBuilder(t, sha)
	}
	before, waitsBefore := f.builds()
	f.symbolizeEverywhere(t, bin2, 1, 12)
	built, waits = f.builds()
	t.Logf("takeover: %v builds, %v replicas waited", built-before, waits-waitsBefore)
	if built-before != 1 {
		t.Fatalf("%v index builds after the dead builder's lease expired, want 1", built-before)
	}
	if waits-waitsBefore != 3 {
		t.Fatalf("%v replicas waited for the dead builder's lease, want every one of the 3", waits-waitsBefore)
	}
}

func (f *fleet) storedIndexes(t *testing.T) int {
	t.Helper()
	n := 0
	for obj := range f.mc.ListObjects(context.Background(), fleetBucket, minio.ListObjectsOptions{Recursive: true}) {
		if strings.HasSuffix(obj.Key, ".index") {
			n++
		}
	}
	return n
}

// TestFleetUploadsOnce: uploads of one build ID started at once through different replicas:
// one is reserved, the others are told an upload is in progress. The same file started at
// once gets one upload, handed to every caller (so a client that lost its answer resumes).
func TestFleetUploadsOnce(t *testing.T) {
	for _, withRedis := range []bool{true, false} {
		t.Run(map[bool]string{true: "redis leases", false: "bucket leases"}[withRedis], func(t *testing.T) {
			testFleetUploadsOnce(t, withRedis)
		})
	}
}

func testFleetUploadsOnce(t *testing.T, withRedis bool) {
	f := startFleet(t, 3, withRedis)
	bin := compile(t, "-g", "-O2")
	initiate := func(r *running, sha string) (string, error) {
		dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
		req := connect.NewRequest(&debuginfov1.InitiateUploadRequest{BuildId: bin.ids.GNU, BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU,
			Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO, Sha256: sha, Size: 10, Source: debuginfov1.UploadSource_UPLOAD_SOURCE_NODE})
		bearer(req)
		resp, err := dc.InitiateUpload(context.Background(), req)
		if err != nil {
			return "", err
		}
		return resp.Msg.UploadId, nil
	}
	const n = 30
	var (
		mu       sync.Mutex
		accepted []string
		refused  int
		wg       sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			// Every node's file differs (as builds of one build ID from different sources do).
			id, err := initiate(f.replicas[i%3], fmt.Sprintf("%064x", i+1))
			mu.Lock()
			defer mu.Unlock()
			var ce *connect.Error
			switch {
			case err == nil:
				accepted = append(accepted, id)
			case errors.As(err, &ce) && ce.Code() == connect.CodeAborted &&
				strings.Contains(ce.Message(), debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_UPLOAD_IN_PROGRESS.String()):
				refused++
			default:
				t.Errorf("initiate: %v", err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d initiates of one build ID over 3 replicas: %d accepted, %d told in progress", n, len(accepted), refused)
	if len(accepted) != 1 || refused != n-1 {
		t.Fatalf("%d accepted (%v), %d told in progress; want 1 and %d", len(accepted), accepted, refused, n-1)
	}

	// The same file from every node: one upload, every caller handed the same one.
	bin2 := compile(t, "-g", "-O1")
	bin = bin2
	ids := map[string]int{}
	for i := range n {
		wg.Go(func() {
			id, err := initiate(f.replicas[i%3], strings.Repeat("ab", 32))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("initiate of the same file: %v", err)
				return
			}
			ids[id]++
		})
	}
	wg.Wait()
	if len(ids) != 1 {
		t.Fatalf("the same file initiated at once over 3 replicas got %d uploads (%v), want 1", len(ids), ids)
	}
}
