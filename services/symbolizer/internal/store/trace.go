package store

import (
	"context"
	"errors"
	"io"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/profsym/profsym/pkg/tracing"
)

var tracer = tracing.Tracer("github.com/profsym/profsym/services/symbolizer/internal/store")

// Trace returns s with a span for every call made under a traced request (store.put,
// store.open, store.size, ...), naming the backend, the object key and the bytes moved, so a
// slow Symbolize shows how much of its time the store took. Calls outside a trace (coverage
// writes, sweeps) make no span. A missing object is an answer, not a span error.
func Trace(s Store) Store {
	backend := "s3"
	if _, ok := s.(*Folder); ok {
		backend = "folder"
	}
	t := &traced{s: s, backend: attribute.String("profsym.store.backend", backend)}
	if l, ok := s.(Localer); ok {
		return &tracedLocal{traced: t, l: l}
	}
	return t
}

type traced struct {
	s       Store
	backend attribute.KeyValue
}

// tracedLocal keeps the folder's in-place reads (Localer) through the decorator.
type tracedLocal struct {
	*traced
	l Localer
}

func (t *tracedLocal) LocalPath(key string) (string, error) { return t.l.LocalPath(key) }

func (t *traced) start(ctx context.Context, op, key string) (context.Context, trace.Span) {
	return tracing.Start(ctx, tracer, "store."+op, t.backend, attribute.String("profsym.store.key", key))
}

// end ends span; ErrNotExist is recorded as found=false rather than as an error.
func end(span trace.Span, err error) {
	if errors.Is(err, ErrNotExist) {
		span.SetAttributes(attribute.Bool("profsym.store.found", false))
		err = nil
	}
	tracing.End(span, err)
}

func (t *traced) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	ctx, span := t.start(ctx, "put", key)
	span.SetAttributes(attribute.Int64("profsym.store.bytes", size))
	err := t.s.Put(ctx, key, r, size)
	end(span, err)
	return err
}

// Open's span covers the open only: the body is read by the caller, whose own span (an index
// load, a download) covers the transfer.
func (t *traced) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	ctx, span := t.start(ctx, "open", key)
	rc, size, err := t.s.Open(ctx, key)
	if err == nil {
		span.SetAttributes(attribute.Int64("profsym.store.bytes", size))
	}
	end(span, err)
	return rc, size, err
}

func (t *traced) Size(ctx context.Context, key string) (int64, error) {
	ctx, span := t.start(ctx, "size", key)
	n, err := t.s.Size(ctx, key)
	if err == nil {
		span.SetAttributes(attribute.Int64("profsym.store.bytes", n))
	}
	end(span, err)
	return n, err
}

func (t *traced) Delete(ctx context.Context, key string) error {
	ctx, span := t.start(ctx, "delete", key)
	err := t.s.Delete(ctx, key)
	end(span, err)
	return err
}

func (t *traced) Copy(ctx context.Context, src, dst string) error {
	ctx, span := t.start(ctx, "copy", src)
	span.SetAttributes(attribute.String("profsym.store.destination", dst))
	err := t.s.Copy(ctx, src, dst)
	end(span, err)
	return err
}

func (t *traced) List(ctx context.Context, prefix string) ([]string, error) {
	ctx, span := t.start(ctx, "list", prefix)
	keys, err := t.s.List(ctx, prefix)
	span.SetAttributes(attribute.Int("profsym.store.keys", len(keys)))
	end(span, err)
	return keys, err
}

func (t *traced) PresignPut(ctx context.Context, key string, expiry time.Duration) (string, map[string]string, bool, error) {
	ctx, span := t.start(ctx, "presign", key)
	url, headers, ok, err := t.s.PresignPut(ctx, key, expiry)
	end(span, err)
	return url, headers, ok, err
}

func (t *traced) Ping(ctx context.Context) error {
	ctx, span := tracing.Start(ctx, tracer, "store.ping", t.backend)
	err := t.s.Ping(ctx)
	end(span, err)
	return err
}

func (t *traced) String() string { return t.s.String() }
