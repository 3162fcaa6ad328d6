package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

type tally struct {
	fails    map[string]int
	oks      int
	unstated int // successes reported without their call's start
}

func (t *tally) Fail(op string, _ error) { t.fails[op]++ }
func (t *tally) OK(start time.Time) {
	t.oks++
	if start.IsZero() || start.After(time.Now()) {
		t.unstated++
	}
}

// failingReader is an upload body whose client went away.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("client reset the connection") }

// Only the store's own failures count: a missing object, the caller's cancellation and a broken
// upload body are not the store's, and in-place reads of a folder survive the wrapper.
func TestObserveCountsTheStoresFailuresOnly(t *testing.T) {
	dir := t.TempDir()
	f, err := NewFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := &tally{fails: map[string]int{}}
	s := Observe(f, h)
	if _, ok := s.(Localer); !ok {
		t.Fatal("the folder's in-place reads are hidden by the wrapper")
	}
	ctx := context.Background()
	if err := s.Put(ctx, "a/b", bytes.NewReader([]byte("xyz")), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Size(ctx, "a/missing"); !errors.Is(err, ErrNotExist) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("size of a missing object: %v", err)
	}
	if err := s.Put(ctx, "a/c", failingReader{}, 3); err == nil {
		t.Fatal("a broken body was stored")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = s.List(cctx, "a/") // whatever the folder answers, the caller gave up
	rc, _, err := s.Open(ctx, "a/b")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(rc); err != nil || string(b) != "xyz" {
		t.Fatalf("read back %q, %v", b, err)
	}
	rc.Close()
	if len(h.fails) != 0 {
		t.Fatalf("failures counted for the caller's or the client's faults: %v", h.fails)
	}
	if h.oks < 3 || h.unstated > 0 {
		t.Fatalf("%d successes seen, %d without the time their call began", h.oks, h.unstated)
	}
	// The store itself gone: its calls fail and are counted by operation.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("ping of a removed folder succeeded")
	}
	err = s.Put(ctx, "a/d", bytes.NewReader([]byte("xyz")), 3)
	var be *BackendError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &be) || be.Op != "put" {
		t.Fatalf("put into a removed folder: %v, want the backend's failure of put", err)
	}
	if h.fails["ping"] != 1 || h.fails["put"] != 1 {
		t.Fatalf("failures = %v, want one ping and one put", h.fails)
	}
}
