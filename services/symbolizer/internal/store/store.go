// Package store is the object storage under the debuginfo store: a flat key space of
// immutable-once-written objects with two backends, a local folder (the default) and
// S3-compatible object storage. Keys are built by the symbolizer from validated and escaped
// IDs; both backends still refuse keys that could leave their root.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
)

// ErrNotExist is wrapped when an object does not exist.
var ErrNotExist = errors.New("object does not exist")

// ErrChanged is wrapped when an object was replaced while it was read (S3 reads the rest of
// an object only while its ETag is the one first seen): reading it again gives the new one.
var ErrChanged = errors.New("object replaced while it was read")

// Store is the storage interface the symbolizer consumes.
type Store interface {
	// Put writes an object of exactly size bytes from r. The object becomes visible only
	// once complete: a reader never sees a partial object.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Open returns a reader of the object and its size.
	Open(ctx context.Context, key string) (io.ReadCloser, int64, error)
	// Size returns the object's size, or an error wrapping ErrNotExist.
	Size(ctx context.Context, key string) (int64, error)
	// Delete removes an object; a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// Copy copies src to dst inside the store (server-side where the backend can).
	Copy(ctx context.Context, src, dst string) error
	// List returns every key with prefix, sorted byte-wise.
	List(ctx context.Context, prefix string) ([]string, error)
	// PresignPut returns a URL that accepts one HTTP PUT of the object's bytes until expiry,
	// with the headers it must carry; ok is false when the backend has no such URLs (the
	// symbolizer then offers its own upload endpoint).
	PresignPut(ctx context.Context, key string, expiry time.Duration) (url string, headers map[string]string, ok bool, err error)
	// Ping checks that the backend is reachable.
	Ping(ctx context.Context) error
	// String names the backend for logs.
	String() string
}

// Localer is implemented by backends whose objects are plain local files: readers can use the
// file in place instead of copying it.
type Localer interface {
	LocalPath(key string) (string, error)
}

// CheckKey rejects keys that are empty, absolute, contain "." or ".." segments, empty
// segments or bytes outside a conservative set.
func CheckKey(key string) error {
	if key == "" {
		return errors.New("empty object key")
	}
	if len(key) > 1024 {
		return fmt.Errorf("object key of %d bytes is too long", len(key))
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("object key %q: empty, . or .. segment", key)
		}
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; !keyByte(c) {
			return fmt.Errorf("object key %q: byte %#x not allowed", key, c)
		}
	}
	return nil
}

// keyByte reports whether c may appear in an object key: letters, digits and / - _ . only,
// which every backend stores as is.
func keyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '/' || c == '-' || c == '_' || c == '.'
}

// LocalCopy gives a local file holding the object: the object itself when the backend is a
// folder, else a download into dir. cleanup removes a download and does nothing otherwise.
func LocalCopy(ctx context.Context, s Store, key, dir string) (path string, cleanup func(), err error) {
	if l, ok := s.(Localer); ok {
		p, err := l.LocalPath(key)
		if err != nil {
			return "", nil, err
		}
		if _, err := os.Stat(p); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return "", nil, fmt.Errorf("%s: %w", key, ErrNotExist)
			}
			return "", nil, fmt.Errorf("stat %s: %w", key, err)
		}
		return p, func() {}, nil
	}
	rc, size, err := s.Open(ctx, key)
	if err != nil {
		return "", nil, err
	}
	defer rc.Close()
	f, err := os.CreateTemp(dir, "object-*")
	if err != nil {
		return "", nil, fmt.Errorf("download %s: %w", key, err)
	}
	cleanup = func() {
		if err := os.Remove(f.Name()); err != nil {
			slog.Warn("remove downloaded object copy", "path", f.Name(), "err", err)
		}
	}
	n, err := io.Copy(f, rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("got %d of %d bytes", n, size)
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("download %s: %w", key, err)
	}
	return f.Name(), cleanup, nil
}
