package store

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/pkg/tracing/tracingtest"
)

func spanAttr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestTrace: the traced store behaves as the backend it wraps (the backend suite passes
// through it, the folder keeps its in-place reads), makes no span outside a traced request,
// and under one makes a span per call naming the backend, the key and the bytes, with a
// missing object recorded as found=false rather than as an error.
func TestTrace(t *testing.T) {
	for _, tc := range []struct {
		backend string
		open    func(t *testing.T) Store
	}{
		{"folder", func(t *testing.T) Store {
			s, err := NewFolder(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"s3", func(t *testing.T) Store {
			m := testsupport.StartMinIO(t)
			m.NewBucket(t, "traced")
			s, err := NewS3(S3Config{Endpoint: m.Endpoint(), Bucket: "traced", Region: m.Region(), AccessKey: m.AccessKey(), SecretKey: m.SecretKey(), Insecure: true})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			rec := tracingtest.Recorder()
			s := Trace(tc.open(t))
			if _, local := s.(Localer); local != (tc.backend == "folder") {
				t.Fatalf("traced %s store: Localer = %v", tc.backend, local)
			}
			seen := len(rec.Ended())
			suite(t, s)
			if n := len(rec.Ended()) - seen; n != 0 {
				t.Fatalf("%d spans from calls outside any trace", n)
			}

			ctx, parent := otel.Tracer("test").Start(context.Background(), "request")
			body := []byte("traced object")
			if err := s.Put(ctx, "t/obj", bytes.NewReader(body), int64(len(body))); err != nil {
				t.Fatal(err)
			}
			rc, _, err := s.Open(ctx, "t/obj")
			if err != nil {
				t.Fatal(err)
			}
			rc.Close()
			if _, _, err := s.Open(ctx, "t/missing"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("open of a missing object: %v", err)
			}
			parent.End()

			got := rec.Ended()[seen:]
			want := []struct {
				name, key string
				bytes     int64 // -1: none
				found     bool
			}{
				{"store.put", "t/obj", int64(len(body)), true},
				{"store.open", "t/obj", int64(len(body)), true},
				{"store.open", "t/missing", -1, false},
			}
			if len(got) != len(want)+1 {
				t.Fatalf("%d spans, want %d and the request's", len(got), len(want))
			}
			for i, w := range want {
				sp := got[i]
				if sp.Name() != w.name || sp.Parent().SpanID() != parent.SpanContext().SpanID() {
					t.Errorf("span %d: %s under %s, want %s under the request", i, sp.Name(), sp.Parent().SpanID(), w.name)
				}
				if v, _ := spanAttr(sp, "profsym.store.backend"); v.AsString() != tc.backend {
					t.Errorf("%s: backend %q", w.name, v.AsString())
				}
				if v, _ := spanAttr(sp, "profsym.store.key"); v.AsString() != w.key {
					t.Errorf("%s: key %q, want %q", w.name, v.AsString(), w.key)
				}
				v, ok := spanAttr(sp, "profsym.store.bytes")
				if w.bytes >= 0 && (!ok || v.AsInt64() != w.bytes) || w.bytes < 0 && ok {
					t.Errorf("%s %s: bytes %v (present %v), want %d", w.name, w.key, v.AsInt64(), ok, w.bytes)
				}
				found, ok := spanAttr(sp, "profsym.store.found")
				if w.found == ok || !w.found && found.AsBool() {
					t.Errorf("%s %s: found attribute %v (present %v)", w.name, w.key, found.AsBool(), ok)
				}
				if sp.Status().Code == codes.Error {
					t.Errorf("%s %s: error status %q", w.name, w.key, sp.Status().Description)
				}
			}
		})
	}
}
