package symbolizeprocessor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pprofile"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/testsupport"
)

// pendingUpload is an upload opened on a real symbolizer and not finished yet.
type pendingUpload struct {
	sym  *testsupport.Symbolizer
	c    debuginfov1connect.DebuginfoServiceClient
	data []byte
	id   string
	init *debuginfov1.InitiateUploadResponse
}

// bearer sets the symbolizer's upload token on every call.
func bearer(tok string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+tok)
			return next(ctx, req)
		}
	})
}

func openUpload(t *testing.T, sym *testsupport.Symbolizer, path string) *pendingUpload {
	t.Helper()
	ids, err := buildid.FromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, sym.URL(), connect.WithInterceptors(bearer(sym.Token)))
	sum := sha256.Sum256(data)
	init, err := c.InitiateUpload(t.Context(), connect.NewRequest(&debuginfov1.InitiateUploadRequest{BuildId: ids.GNU,
		BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE,
		Sha256: hex.EncodeToString(sum[:]), Size: uint64(len(data)), Source: debuginfov1.UploadSource_UPLOAD_SOURCE_NODE}))
	if err != nil {
		t.Fatal(err)
	}
	return &pendingUpload{sym: sym, c: c, data: data, id: ids.GNU, init: init.Msg}
}

// finish sends the bytes to the symbolizer's own upload endpoint and finishes the upload.
func (u *pendingUpload) finish(t *testing.T) {
	t.Helper()
	method := u.init.GetMethod()
	if method == "" {
		method = http.MethodPut
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u.init.GetUploadUrl(), bytes.NewReader(u.data))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range u.init.GetRequiredHeaders() {
		req.Header.Set(k, v)
	}
	req.Header.Set("Authorization", "Bearer "+u.sym.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT: HTTP %d", resp.StatusCode)
	}
	if _, err := u.c.FinishUpload(t.Context(), connect.NewRequest(&debuginfov1.FinishUploadRequest{BuildId: u.id, UploadId: u.init.GetUploadId()})); err != nil {
		t.Fatal(err)
	}
}

// export is one batch of two profiles: one of binaries the symbolizer holds, one of a binary
// whose upload is under way.
func export(t *testing.T, stored, arriving []otlptest.Binary) (pd pprofile.Profiles, storedCases, arrivingCases []otlptest.Case) {
	t.Helper()
	pd, storedCases = otlptest.BuildRequest(t, otlptest.ShapeEBPF, stored)
	other, arrivingCases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, arriving)
	if err := other.MergeTo(pd); err != nil {
		t.Fatal(err)
	}
	return pd, storedCases, arrivingCases
}

// waitExports polls the sink until it holds n batches; the hold's own end bounds the wait.
func waitExports(t *testing.T, p *started, n int, within time.Duration) []pprofile.Profiles {
	t.Helper()
	deadline := time.Now().Add(within)
	for len(p.sink.AllProfiles()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d batches came out in %v, want %d", len(p.sink.AllProfiles()), within, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p.sink.AllProfiles()
}

// TestHoldArriving runs the processor against a real symbolizer while an upload races an
// export: the profile of the binary being uploaded is held, the other profile of the batch goes
// on at once, symbolized; once the upload finishes, the held profile comes out symbolized as
// llvm-symbolizer reads it. A binary whose upload never finishes goes out unsymbolized at the
// end of the hold, counted; a batch that arrives while the hold is full is refused with a
// retryable error. Samples in equal samples out throughout.
func TestHoldArriving(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a symbolizer and compiles test binaries")
	}
	bins := otlptest.Binaries(t)
	sym := testsupport.StartSymbolizer(t, "")
	sym.Upload(t, bins[1].Path, bins[2].Path)
	up := openUpload(t, sym, bins[0].Path)

	cfg := createDefaultConfig()
	cfg.Endpoint = sym.URL()
	cfg.CacheEntries = 0
	cfg.Hold.Timeout = 5 * time.Minute // only the upload ends this hold
	cfg.Hold.RetryInterval = 200 * time.Millisecond
	p := start(t, cfg)

	pd, storedCases, arrivingCases := export(t, bins[1:], bins[:1])
	in := pd.SampleCount()
	if err := p.proc.ConsumeProfiles(t.Context(), pd); err != nil {
		t.Fatal(err)
	}
	now := p.sink.AllProfiles()
	if len(now) != 1 || now[0].ProfileCount() != 1 {
		t.Fatalf("%d batches came out at once (%d profiles in the first), want the stored binaries' profile alone", len(now), now[0].ProfileCount())
	}
	if err := otlpprofiles.Validate(now[0]); err != nil {
		t.Fatalf("the part that went on is invalid: %v", err)
	}
	otlptest.CheckFrames(t, otlptest.Resolve(now[0]), storedCases)
	if n := p.counter(t, metricHeld, ""); n != 1 {
		t.Fatalf("%s = %d, want 1", metricHeld, n)
	}
	if n := p.counter(t, metricUnsymbolized, ""); n != 0 {
		t.Fatalf("%d frames counted unsymbolized while their debuginfo is arriving", n)
	}

	up.finish(t)
	all := waitExports(t, p, 2, 2*time.Minute)
	later := all[1]
	if err := otlpprofiles.Validate(later); err != nil {
		t.Fatalf("the held part is invalid: %v", err)
	}
	otlptest.CheckFrames(t, otlptest.Resolve(later), arrivingCases)
	if out := all[0].SampleCount() + later.SampleCount(); out != in {
		t.Fatalf("samples in %d, out %d", in, out)
	}
	if n := p.counter(t, metricHeldExpired, ""); n != 0 {
		t.Fatalf("%s = %d, want 0", metricHeldExpired, n)
	}
	if n := p.counter(t, metricResolved, ""); n != int64(len(storedCases)+len(arrivingCases)) {
		t.Fatalf("%s = %d, want %d", metricResolved, n, len(storedCases)+len(arrivingCases))
	}
	t.Logf("held profile came out symbolized after the upload finished: %d + %d samples", all[0].SampleCount(), later.SampleCount())

	// An upload that never finishes: held for the whole hold, then out as it is, counted.
	never := otlptest.Binary{Name: "never", Fn: "outer", Path: testsupport.CompileC(t, otlptest.CSource+otlptest.CMain+"int never_uploaded = 1;\n",
		"-O2", "-g", "-no-pie", "-fno-pie", "-Wl,--build-id")}
	openUpload(t, sym, never.Path)
	cfg = createDefaultConfig()
	cfg.Endpoint = sym.URL()
	cfg.CacheEntries = 0
	cfg.Hold.Timeout = 2 * time.Second
	cfg.Hold.RetryInterval = 200 * time.Millisecond
	cfg.Hold.MaxBytes = 1 // the first held batch fills it
	p = start(t, cfg)
	pd, _, neverCases := export(t, bins[1:], []otlptest.Binary{never})
	in = pd.SampleCount()
	if err := p.proc.ConsumeProfiles(t.Context(), pd); err != nil {
		t.Fatal(err)
	}
	more, _, _ := export(t, bins[1:], []otlptest.Binary{never})
	err := p.proc.ConsumeProfiles(t.Context(), more)
	if err == nil || consumererror.IsPermanent(err) {
		t.Fatalf("a batch while the hold is full: error %v, want a retryable one", err)
	}
	if n := p.counter(t, metricHoldRefused, ""); n != 1 {
		t.Fatalf("%s = %d, want 1", metricHoldRefused, n)
	}
	all = waitExports(t, p, 2, 2*time.Minute)
	if out := all[0].SampleCount() + all[1].SampleCount(); out != in {
		t.Fatalf("samples in %d, out %d", in, out)
	}
	for _, s := range otlptest.Resolve(all[1]) {
		if len(s.Stack[0].Lines) != 0 {
			t.Fatalf("a frame of a binary never uploaded came out with lines %+v", s.Stack[0].Lines)
		}
	}
	if n := p.counter(t, metricHeldExpired, ""); n != 1 {
		t.Fatalf("%s = %d, want 1", metricHeldExpired, n)
	}
	// Counted by the reason of the last pass before the hold's end: arriving, or deadline or
	// unavailable when that pass ran out of time on a loaded machine; never as the symbolizer
	// down.
	var retryable int64
	for _, r := range []string{symbolize.ReasonArriving, symbolize.ReasonDeadline, symbolize.ReasonUnavailable} {
		retryable += p.counter(t, metricUnsymbolized, r)
	}
	if retryable != int64(len(neverCases)) || retryable != p.counter(t, metricUnsymbolized, "") {
		t.Fatalf("%s: %d frames for a retryable reason, %d in all, want %d", metricUnsymbolized, retryable, p.counter(t, metricUnsymbolized, ""), len(neverCases))
	}
	// The hold is empty again: the next batch is taken.
	if err := p.proc.ConsumeProfiles(t.Context(), more); err != nil {
		t.Fatalf("after the hold emptied: %v", err)
	}
}
