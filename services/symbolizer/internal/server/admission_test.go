package server

import (
	"bytes"
	"context"
	encbin "encoding/binary"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
)

// gzipBomb is a gzip body of a few hundred KB that inflates to n bytes of an addresses
// field: decoded, it would be a slice of n/10 addresses.
func gzipBomb(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	// modules[0] { gnu_build_id: "ab", addresses: [packed varints...] }
	var inner []byte
	inner = append(inner, 0x0a, 2, 'a', 'b', 0x42)
	inner = encbin.AppendUvarint(inner, uint64(n))
	var outer []byte
	outer = append(outer, 0x0a)
	outer = encbin.AppendUvarint(outer, uint64(len(inner)+n))
	if _, err := zw.Write(append(outer, inner...)); err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 1<<12)
	for written := 0; written < n; written += len(chunk) {
		if _, err := zw.Write(chunk[:min(len(chunk), n-written)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const symbolizePath = "/" + symbolizerv1connect.SymbolizerServiceName + "/Symbolize"

func post(t *testing.T, url string, body io.Reader, length int64, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+symbolizePath, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", "application/proto")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestSymbolizeAdmission(t *testing.T) {
	r := start(t)
	// A body larger than any legal request is refused from its declared length, unread.
	maxBody := maxSymbolizeBytes(1024, 100000)
	code, body := post(t, r.url, io.LimitReader(zeros{}, maxBody+1), maxBody+1, nil)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "resource_exhausted") || !strings.Contains(body, "at most") {
		t.Errorf("over-size body: %d %s", code, body)
	}

	// Sixteen concurrent gzip bodies of a few hundred KB, each inflating to 64 MiB: each is cut
	// at the largest legal size, and the server's heap grows by a bounded amount (before the
	// cap and the budget: about 160 MB per request, 3 GB in all).
	bomb := gzipBomb(t, 64<<20)
	t.Logf("gzip body: %d bytes, inflating to %d", len(bomb), 64<<20)
	var peak atomic.Uint64
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	codes := make([]int, 16)
	bodies := make([]string, 16)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], bodies[i] = post(t, r.url, bytes.NewReader(bomb), int64(len(bomb)), map[string]string{"Content-Encoding": "gzip"})
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	for i := range codes {
		if codes[i] == http.StatusOK || !strings.Contains(bodies[i], "resource_exhausted") {
			t.Errorf("gzip bomb %d: %d %s", i, codes[i], bodies[i])
		}
	}
	growth := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("heap in use grew by %d MB under 16 concurrent gzip bombs", growth>>20)
	if growth > 400<<20 {
		t.Errorf("heap grew by %d MB under 16 gzip bombs; the budget (512 MiB of reservations, 8 MiB bodies) should keep it far lower", growth>>20)
	}
	if got := testutil.ToFloat64(r.srv.admission.refused.WithLabelValues("too_large")); got != 1 {
		t.Errorf("refused too_large = %v, want 1", got)
	}
}

// TestSymbolizeBudgetBusy: while one compressed request holds the whole budget, the next is
// answered resource_exhausted at once, in Connect's error format, and a client sees the code.
func TestSymbolizeBudgetBusy(t *testing.T) {
	// The budget is one compressed request's reservation.
	r := start(t, "--symbolize-memory-budget", "1000000")
	pr, pw := io.Pipe()
	first := make(chan int, 1)
	go func() {
		code, _ := post(t, r.url, pr, -1, map[string]string{"Content-Encoding": "gzip"})
		first <- code
	}()
	// Wait until the first request holds its reservation.
	deadline := time.Now().Add(20 * time.Second)
	for !r.srv.admission.busy() {
		if time.Now().After(deadline) {
			t.Fatal("the first request never reserved its budget")
		}
		time.Sleep(10 * time.Millisecond)
	}
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	_, err := client.Symbolize(context.Background(), connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: "ab", Addresses: []uint64{1}}}}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "busy") {
		t.Errorf("second request: %v, want resource_exhausted (busy)", err)
	}
	if got := testutil.ToFloat64(r.srv.admission.refused.WithLabelValues("busy")); got != 1 {
		t.Errorf("refused busy = %v, want 1", got)
	}
	pw.CloseWithError(errors.New("client gone"))
	<-first
	// The handler returns its reservation when it ends, which can be just after the client
	// has its answer.
	for r.srv.admission.busy() {
		if time.Now().After(deadline) {
			t.Fatal("the first request's reservation was never returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The reservation is returned: the same request now gets through admission.
	_, err = client.Symbolize(context.Background(), connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: "ab", Addresses: []uint64{1}}}}))
	if err != nil {
		t.Errorf("after the first request ended: %v", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
