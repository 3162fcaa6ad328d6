package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/testsupport"
)

// suite is what every backend must do.
func suite(t *testing.T, s Store) {
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	body := []byte("hello debuginfo")
	if err := s.Put(ctx, "a/b/c", bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatalf("put: %v", err)
	}
	rc, n, err := s.Open(ctx, "a/b/c")
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := rc.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n != int64(len(body)) || !bytes.Equal(got, body) {
		t.Fatalf("open = %q (%d), want %q", got, n, body)
	}
	if sz, err := s.Size(ctx, "a/b/c"); err != nil || sz != int64(len(body)) {
		t.Fatalf("size = %d, %v", sz, err)
	}
	if _, err := s.Size(ctx, "a/b/missing"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("size of missing = %v, want ErrNotExist", err)
	}
	if _, _, err := s.Open(ctx, "nope"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("open of missing = %v, want ErrNotExist", err)
	}
	// A body shorter than declared must not leave an object.
	if err := s.Put(ctx, "a/short", strings.NewReader("abc"), 10); err == nil {
		t.Fatalf("short put succeeded")
	}
	if _, err := s.Size(ctx, "a/short"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("short put left an object: %v", err)
	}
	if err := s.Copy(ctx, "a/b/c", "x/y"); err != nil {
		t.Fatalf("copy: %v", err)
	}
	if err := s.Put(ctx, "a/z", strings.NewReader("z"), 1); err != nil {
		t.Fatalf("put: %v", err)
	}
	keys, err := s.List(ctx, "a/")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if want := []string{"a/b/c", "a/z"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("list a/ = %v, want %v", keys, want)
	}
	for _, bad := range []string{"", "/abs", "a/../b", "a//b", "a/./b", "a b", "a\x00b", ".."} {
		if err := s.Put(ctx, bad, strings.NewReader("x"), 1); err == nil {
			t.Errorf("put %q accepted", bad)
		}
	}
	if err := s.Delete(ctx, "a/b/c"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := s.Delete(ctx, "a/b/c"); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	keys, err = s.List(ctx, "")
	if err != nil {
		t.Fatalf("list all: %v", err)
	}
	if want := []string{"a/z", "x/y"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("list = %v, want %v", keys, want)
	}
	// LocalCopy works on every backend.
	p, cleanup, err := LocalCopy(ctx, s, "x/y", t.TempDir())
	if err != nil {
		t.Fatalf("local copy: %v", err)
	}
	defer cleanup()
	if b, _ := os.ReadFile(p); !bytes.Equal(b, body) {
		t.Fatalf("local copy = %q", b)
	}
}

// TestFolderPutRacesPrune: Delete prunes directories that become empty, and a Put into the same
// directory must survive that happening between its MkdirAll and its Rename (uploads/ empties
// whenever the last pending upload finishes). Before the fix some of these Puts failed with
// "rename ...: no such file or directory".
func TestFolderPutRacesPrune(t *testing.T) {
	f, err := NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, 4000)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 250 {
				key := fmt.Sprintf("uploads/%d-%d", w, i)
				if err := f.Put(ctx, key, strings.NewReader("x"), 1); err != nil {
					errs <- err
					return
				}
				if err := f.Delete(ctx, key); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestFolder(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	suite(t, s)
	if _, _, ok, _ := s.PresignPut(context.Background(), "k", time.Minute); ok {
		t.Fatal("folder claims presigned URLs")
	}
	if _, err := s.LocalPath(".tmp/x"); err == nil {
		t.Fatal("reserved key accepted")
	}
	// Nothing outside the root was written.
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "b")); err == nil {
		t.Fatal("wrote outside the root")
	}
}

// TestS3EnsureBucket: a missing bucket is created once, and an existing one is left alone.
func TestS3EnsureBucket(t *testing.T) {
	m := testsupport.StartMinIO(t)
	s, err := NewS3(S3Config{Endpoint: m.Endpoint(), Bucket: "fresh", Region: m.Region(), AccessKey: m.AccessKey(), SecretKey: m.SecretKey(), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping succeeded before the bucket exists")
	}
	for range 2 {
		if err := s.EnsureBucket(ctx, m.Region()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after EnsureBucket: %v", err)
	}
}

func TestS3(t *testing.T) {
	m := testsupport.StartMinIO(t)
	m.NewBucket(t, "psym")
	s, err := NewS3(S3Config{Endpoint: m.Endpoint(), Bucket: "psym", Region: m.Region(), AccessKey: m.AccessKey(), SecretKey: m.SecretKey(), Insecure: true, Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	suite(t, s)

	// Presigned PUT: a plain HTTP client with no credentials writes the object.
	ctx := context.Background()
	u, hdr, ok, err := s.PresignPut(ctx, "up/1", time.Minute)
	if err != nil || !ok {
		t.Fatalf("presign: %v %v", ok, err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, u, strings.NewReader("presigned body"))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("presigned PUT: %s", resp.Status)
	}
	if n, err := s.Size(ctx, "up/1"); err != nil || n != int64(len("presigned body")) {
		t.Fatalf("presigned object: %d %v", n, err)
	}

	bad, err := NewS3(S3Config{Endpoint: m.Endpoint(), Bucket: "missing", Region: m.Region(), AccessKey: m.AccessKey(), SecretKey: m.SecretKey(), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Ping(ctx); err == nil {
		t.Fatal("ping of a missing bucket succeeded")
	}
}

// TestS3ObjectReplacedWhileRead: an object another replica replaces between the open and the
// read is reported as ErrChanged (read it again), not as a failing store.
func TestS3ObjectReplacedWhileRead(t *testing.T) {
	m := testsupport.StartMinIO(t)
	m.NewBucket(t, "psym")
	s, err := NewS3(S3Config{Endpoint: m.Endpoint(), Bucket: "psym", Region: m.Region(), AccessKey: m.AccessKey(), SecretKey: m.SecretKey(), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	old, next := strings.Repeat("a", 1<<20), strings.Repeat("b", 1<<20)
	if err := s.Put(ctx, "records/x/record.json", strings.NewReader(old), int64(len(old))); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.Open(ctx, "records/x/record.json")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := s.Put(ctx, "records/x/record.json", strings.NewReader(next), int64(len(next))); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(rc); !errors.Is(err, ErrChanged) {
		t.Fatalf("read of a replaced object: %d bytes, %v; want ErrChanged", len(got), err)
	}
}

// TestS3ObjectDeletedWhileRead deletes an object between Open (its size) and the first Read
// (its bytes): the read says the object does not exist, as Open would have.
func TestS3ObjectDeletedWhileRead(t *testing.T) {
	m := testsupport.StartMinIO(t)
	m.NewBucket(t, "psym")
	s, err := NewS3(S3Config{Endpoint: m.Endpoint(), Bucket: "psym", Region: m.Region(), AccessKey: m.AccessKey(), SecretKey: m.SecretKey(), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := s.Put(ctx, "records/x/f", strings.NewReader("bytes"), 5); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.Open(ctx, "records/x/f")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := s.Delete(ctx, "records/x/f"); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(rc); !errors.Is(err, ErrNotExist) {
		t.Fatalf("read of a deleted object: %d bytes, %v; want ErrNotExist", len(got), err)
	}
}
