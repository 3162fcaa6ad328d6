package debugupload

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
)

// cutFirstPut breaks the body of the first PUT after a kilobyte, as a connection the store
// closed mid-upload does: the real symbolizer behind it sees the request cut short.
type cutFirstPut struct {
	next http.RoundTripper
	puts atomic.Int32
}

var errCut = errors.New("connection cut by the test after 1 KiB")

func (c *cutFirstPut) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && c.puts.Add(1) == 1 {
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(io.MultiReader(io.LimitReader(req.Body, 1024), errReader{}))
	}
	return c.next.RoundTrip(req)
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errCut }

// TestPutCutShortIsSentAgain: a PUT whose connection breaks is sent again at once, into the
// same upload. Left to a later sighting, the file would wait for the upload to expire, since
// until then the server tells every node, this one too, that its upload is in progress.
func TestPutCutShortIsSentAgain(t *testing.T) {
	url := startSymbolizer(t)
	p := program(t, 6, "-g")
	tr := &cutFirstPut{next: http.DefaultTransport}
	u, err := New(Options{SymbolizerURL: url, Token: testToken, HTTPClient: &http.Client{Transport: tr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u.Offer(p, p, "", ids(t, p))
	s := runUntil(t, u, func(s map[string]int64) bool { return total(s) >= 1 })
	if s[OutcomeUploaded] != 1 || total(s) != 1 {
		t.Fatalf("stats %v: want the file uploaded on its first offer", s)
	}
	if n := tr.puts.Load(); n != 2 {
		t.Fatalf("%d PUTs: want the cut one and one more", n)
	}
	rec, err := get(t, url, ids(t, p).GNU)
	if err != nil {
		t.Fatal(err)
	}
	if rec.GetState() != debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE {
		t.Fatalf("record state %v, want available", rec.GetState())
	}
}
