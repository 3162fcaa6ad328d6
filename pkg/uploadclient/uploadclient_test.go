package uploadclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
)

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err        error
		now, later bool
	}{
		{connect.NewError(connect.CodeUnavailable, errors.New("x")), true, true},
		{connect.NewError(connect.CodeDeadlineExceeded, errors.New("x")), true, true},
		{connect.NewError(connect.CodeInvalidArgument, errors.New("x")), false, false},
		{connect.NewError(connect.CodeAlreadyExists, errors.New("x")), false, false},
		// A token is fixed by rotating a Secret, a quota by waiting: not within seconds.
		{connect.NewError(connect.CodePermissionDenied, errors.New("x")), false, true},
		{connect.NewError(connect.CodeUnauthenticated, errors.New("x")), false, true},
		{connect.NewError(connect.CodeResourceExhausted, errors.New("x")), false, true},
		{&StatusError{Status: 503}, true, true},
		{&StatusError{Status: 429}, true, true},
		{fmt.Errorf("wrapped: %w", &StatusError{Status: 400}), false, false},
		{errors.New("connection reset"), true, true},
		{fmt.Errorf("PUT: %w", context.Canceled), false, true},
	} {
		if got := Retryable(tc.err); got != tc.now {
			t.Errorf("Retryable(%v) = %v", tc.err, got)
		}
		if got := RetryableLater(tc.err); got != tc.later {
			t.Errorf("RetryableLater(%v) = %v", tc.err, got)
		}
	}
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	calls := 0
	v, err := Retry(ctx, 5, func() (int, error) {
		calls++
		if calls < 3 {
			return 0, &StatusError{Status: 503}
		}
		return 7, nil
	})
	if v != 7 || err != nil || calls != 3 {
		t.Fatalf("retryable failures: %d, %v after %d calls; want 7 after 3", v, err, calls)
	}
	calls = 0
	_, err = Retry(ctx, 5, func() (int, error) {
		calls++
		return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("bad"))
	})
	if calls != 1 || connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a refused request: %d calls, %v; want 1 call and the refusal", calls, err)
	}
	calls = 0
	_, err = Retry(ctx, 2, func() (int, error) {
		calls++
		return 0, &StatusError{Status: 500}
	})
	var se *StatusError
	if calls != 2 || !errors.As(err, &se) {
		t.Fatalf("attempts spent: %d calls, %v; want 2 calls and the last error", calls, err)
	}
	calls = 0
	_, err = Retry(ctx, 0, func() (int, error) {
		calls++
		return 0, backoff.Permanent(errors.New("no file"))
	})
	if calls != 1 || err == nil || err.Error() != "no file" {
		t.Fatalf("a permanent error: %d calls, %v; want 1 call and the error itself", calls, err)
	}
}

// server records what reaches the symbolizer's RPCs and upload endpoint, and a second host
// stands for a presigned object-store URL.
type server struct {
	mu      sync.Mutex
	auth    []string // Authorization of each request, "path auth"
	putBody string
	status  int // of the PUT
}

func (s *server) record(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth = append(s.auth, r.URL.Path+" "+r.Header.Get("Authorization"))
}

func (s *server) ShouldUpload(_ context.Context, req *connect.Request[debuginfov1.ShouldUploadRequest]) (*connect.Response[debuginfov1.ShouldUploadResponse], error) {
	m := req.Msg
	if m.GetBuildId() != "ab" || m.GetSha256() != "00ff" || m.GetSize() != 4 || m.GetSource() != debuginfov1.UploadSource_UPLOAD_SOURCE_NODE {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unexpected request %v", m))
	}
	return connect.NewResponse(&debuginfov1.ShouldUploadResponse{ShouldUpload: true}), nil
}

func (s *server) InitiateUpload(context.Context, *connect.Request[debuginfov1.InitiateUploadRequest]) (*connect.Response[debuginfov1.InitiateUploadResponse], error) {
	return nil, connect.NewError(connect.CodeAlreadyExists, errors.New("stored"))
}

func (s *server) FinishUpload(_ context.Context, req *connect.Request[debuginfov1.FinishUploadRequest]) (*connect.Response[debuginfov1.FinishUploadResponse], error) {
	return connect.NewResponse(&debuginfov1.FinishUploadResponse{Debuginfo: &debuginfov1.Debuginfo{BuildId: req.Msg.GetBuildId()}}), nil
}

func (s *server) Get(context.Context, *connect.Request[debuginfov1.GetRequest]) (*connect.Response[debuginfov1.GetResponse], error) {
	return nil, connect.NewError(connect.CodeNotFound, errors.New("none"))
}

func (s *server) List(context.Context, *connect.Request[debuginfov1.ListRequest]) (*connect.Response[debuginfov1.ListResponse], error) {
	return connect.NewResponse(&debuginfov1.ListResponse{}), nil
}

func (s *server) Delete(context.Context, *connect.Request[debuginfov1.DeleteRequest]) (*connect.Response[debuginfov1.DeleteResponse], error) {
	return connect.NewResponse(&debuginfov1.DeleteResponse{}), nil
}

func (s *server) ListCoverage(context.Context, *connect.Request[debuginfov1.ListCoverageRequest]) (*connect.Response[debuginfov1.ListCoverageResponse], error) {
	return connect.NewResponse(&debuginfov1.ListCoverageResponse{}), nil
}

func (s *server) put(w http.ResponseWriter, r *http.Request) {
	s.record(r)
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.putBody = string(b)
	status := s.status
	s.mu.Unlock()
	if status != 0 {
		http.Error(w, "  upload is closed  ", status)
	}
}

func start(t *testing.T) (*server, string, string) {
	s := &server{}
	mux := http.NewServeMux()
	path, h := debuginfov1connect.NewDebuginfoServiceHandler(s)
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		h.ServeHTTP(w, r)
	}))
	mux.HandleFunc("/upload/", s.put)
	sym := httptest.NewServer(mux)
	t.Cleanup(sym.Close)
	store := httptest.NewServer(http.HandlerFunc(s.put))
	t.Cleanup(store.Close)
	return s, sym.URL, store.URL
}

func TestProtocol(t *testing.T) {
	s, symURL, storeURL := start(t)
	rotated := "first"
	c, err := New(Options{Server: symURL + "/", Token: func() (string, error) { return rotated, nil }, RPCTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f := File{BuildID: "ab", SHA256: "00ff", Size: 4, Source: debuginfov1.UploadSource_UPLOAD_SOURCE_NODE}
	should, err := c.ShouldUpload(ctx, f)
	if err != nil || !should.GetShouldUpload() {
		t.Fatalf("ShouldUpload: %v, %v", should, err)
	}
	if _, err := c.InitiateUpload(ctx, f); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("InitiateUpload: %v, want the server's already_exists", err)
	}
	rotated = "second" // asked for every call
	fin, err := c.FinishUpload(ctx, "ab", "u1")
	if err != nil || fin.GetDebuginfo().GetBuildId() != "ab" {
		t.Fatalf("FinishUpload: %v, %v", fin, err)
	}
	if err := c.Put(ctx, &debuginfov1.InitiateUploadResponse{UploadUrl: symURL + "/upload/u1"}, strings.NewReader("ELF!"), 4); err != nil {
		t.Fatalf("PUT to the symbolizer: %v", err)
	}
	if err := c.Put(ctx, &debuginfov1.InitiateUploadResponse{UploadUrl: storeURL + "/bucket/ab?sig=x", Method: http.MethodPost}, strings.NewReader("ELF!"), 4); err != nil {
		t.Fatalf("PUT to the store: %v", err)
	}
	want := []string{
		"/profsym.debuginfo.v1.DebuginfoService/ShouldUpload Bearer first",
		"/profsym.debuginfo.v1.DebuginfoService/InitiateUpload Bearer first",
		"/profsym.debuginfo.v1.DebuginfoService/FinishUpload Bearer second",
		"/upload/u1 Bearer second",
		"/bucket/ab ", // never the token to a presigned URL
	}
	if strings.Join(s.auth, "\n") != strings.Join(want, "\n") || s.putBody != "ELF!" {
		t.Fatalf("requests:\n%s\nwant:\n%s\n(last body %q)", strings.Join(s.auth, "\n"), strings.Join(want, "\n"), s.putBody)
	}

	s.status = http.StatusNotFound
	err = c.Put(ctx, &debuginfov1.InitiateUploadResponse{UploadUrl: symURL + "/upload/u1"}, strings.NewReader("ELF!"), 4)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound || se.Message != "upload is closed" {
		t.Fatalf("refused PUT: %v, want a StatusError 404 with the body's start", err)
	}
	err = c.Put(ctx, &debuginfov1.InitiateUploadResponse{UploadUrl: "http://bad host/"}, strings.NewReader(""), 0)
	var pe *backoff.PermanentError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "upload URL") {
		t.Fatalf("unusable URL: %v, want a permanent error", err)
	}
}

func TestTokenErrorStopsTheCall(t *testing.T) {
	s, symURL, _ := start(t)
	c, err := New(Options{Server: symURL, Token: func() (string, error) { return "", errors.New("token file unreadable") }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ShouldUpload(context.Background(), File{BuildID: "ab"}); err == nil || !strings.Contains(err.Error(), "token file unreadable") {
		t.Fatalf("ShouldUpload: %v, want the token's error", err)
	}
	if len(s.auth) != 0 {
		t.Fatalf("requests sent without a token: %v", s.auth)
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, url := range []string{"", "symbolizer:7070", "ftp://x"} {
		if _, err := New(Options{Server: url}); err == nil {
			t.Errorf("New(%q) succeeded, want an error", url)
		}
	}
}
