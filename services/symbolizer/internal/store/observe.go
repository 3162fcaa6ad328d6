package store

import (
	"context"
	"errors"
	"io"
	"time"
)

// Health receives the outcome of every call that reached the backend: Fail with the operation
// (put, open, read, size, delete, copy, list, presign, ping) and its error, OK on success with
// the time the call began (a call begun before the store went away says nothing about it now:
// see degraded.Tracker.OKStarted). A degraded.Tracker plus a counter is the usual pair.
type Health interface {
	Fail(op string, err error)
	OK(start time.Time)
}

// Observe returns s with every call's outcome reported to h, so that a store going away (MinIO
// down, a folder's disk unmounted) is said in the logs and metrics however it is reached:
// Symbolize loading an index, an upload, a probe. What is not the store's fault is not
// reported: a missing object (ErrNotExist), the caller's own cancelled context, and an upload
// body that failed on the client's side.
func Observe(s Store, h Health) Store {
	o := &observed{s: s, h: h}
	if l, ok := s.(Localer); ok {
		return &observedLocal{observed: o, l: l}
	}
	return o
}

type observed struct {
	s Store
	h Health
}

// observedLocal keeps the folder's in-place reads (Localer) through the decorator.
type observedLocal struct {
	*observed
	l Localer
}

func (o *observedLocal) LocalPath(key string) (string, error) { return o.l.LocalPath(key) }

// ErrUnavailable matches (errors.Is) every failure of the backend itself, as opposed to a
// missing object or a caller that gave up, so that answers to clients can say "the store is
// unavailable" without the backend's own words (S3 endpoints, object keys, folder paths), which
// stay in the server's log.
var ErrUnavailable = errors.New("debuginfo store unavailable")

// BackendError is a failure of the store's backend during Op.
type BackendError struct {
	Op  string
	Err error
}

func (e *BackendError) Error() string { return "store " + e.Op + ": " + e.Err.Error() }
func (e *BackendError) Unwrap() error { return e.Err }

// Is makes every BackendError match ErrUnavailable.
func (e *BackendError) Is(target error) bool { return target == ErrUnavailable }

// report hands the outcome of a call begun at start to the health tracker and returns err, as
// a *BackendError when it is the backend's failure.
func (o *observed) report(ctx context.Context, op string, start time.Time, err error) error {
	switch {
	case err == nil:
		o.h.OK(start)
	case errors.Is(err, ErrNotExist), errors.Is(err, ErrChanged):
		// The backend answered: it is up.
		o.h.OK(start)
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller gave up; the store said nothing about itself. A deadline that ran out
		// is the store's slowness and counts.
	default:
		o.h.Fail(op, err)
		return &BackendError{Op: op, Err: err}
	}
	return err
}

// clientReader remembers whether the upload body itself failed.
type clientReader struct {
	r   io.Reader
	err error
}

func (c *clientReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

func (o *observed) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	cr := &clientReader{r: r}
	start := time.Now()
	err := o.s.Put(ctx, key, cr, size)
	if err != nil && cr.err != nil {
		return err
	}
	return o.report(ctx, "put", start, err)
}

func (o *observed) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	start := time.Now()
	rc, size, err := o.s.Open(ctx, key)
	if err = o.report(ctx, "open", start, err); err != nil {
		return nil, 0, err
	}
	return &observedBody{rc: rc, o: o, ctx: ctx}, size, nil
}

// observedBody reports a body that breaks off: S3 streams objects, so a store that dies
// mid-download fails a read, not the open.
type observedBody struct {
	rc  io.ReadCloser
	o   *observed
	ctx context.Context
}

func (b *observedBody) Read(p []byte) (int, error) {
	start := time.Now()
	n, err := b.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = b.o.report(b.ctx, "read", start, err)
	}
	return n, err
}

func (b *observedBody) Close() error { return b.rc.Close() }

func (o *observed) Size(ctx context.Context, key string) (int64, error) {
	start := time.Now()
	n, err := o.s.Size(ctx, key)
	return n, o.report(ctx, "size", start, err)
}

func (o *observed) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := o.s.Delete(ctx, key)
	return o.report(ctx, "delete", start, err)
}

func (o *observed) Copy(ctx context.Context, src, dst string) error {
	start := time.Now()
	err := o.s.Copy(ctx, src, dst)
	return o.report(ctx, "copy", start, err)
}

func (o *observed) List(ctx context.Context, prefix string) ([]string, error) {
	start := time.Now()
	keys, err := o.s.List(ctx, prefix)
	return keys, o.report(ctx, "list", start, err)
}

func (o *observed) PresignPut(ctx context.Context, key string, expiry time.Duration) (string, map[string]string, bool, error) {
	start := time.Now()
	url, headers, ok, err := o.s.PresignPut(ctx, key, expiry)
	return url, headers, ok, o.report(ctx, "presign", start, err)
}

func (o *observed) Ping(ctx context.Context) error {
	start := time.Now()
	err := o.s.Ping(ctx)
	return o.report(ctx, "ping", start, err)
}

func (o *observed) String() string { return o.s.String() }
