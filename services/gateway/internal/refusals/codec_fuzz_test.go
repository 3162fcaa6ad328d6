package refusals

import (
	"reflect"
	"testing"

	"google.golang.org/grpc/mem"
)

// FuzzCodec: whatever the bytes, the wrapper either decodes the OTLP request as pdata's codec
// does or reports success with the failure held for exactly that message, which take returns
// once; nothing is left behind.
func FuzzCodec(f *testing.F) {
	_, body := wellFormed(f)
	f.Add(body)
	f.Add(garbage)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x05, 0x0a})
	c := newCodec()
	f.Fuzz(func(t *testing.T, b []byte) {
		data := mem.BufferSlice{mem.SliceBuffer(b)}
		want := c.delegate.Unmarshal(data, reflect.New(requestType.Elem()).Interface())
		msg := reflect.New(requestType.Elem()).Interface()
		if err := c.Unmarshal(data, msg); err != nil {
			t.Fatalf("wrapper returned %v for an OTLP request", err)
		}
		got, failed := c.take(msg)
		if failed != (want != nil) || (failed && got.Error() != want.Error()) {
			t.Fatalf("held failure %v (%v), pdata's codec said %v", got, failed, want)
		}
		if _, again := c.take(msg); again || c.pending.Load() != 0 {
			t.Fatal("a failure was left behind")
		}
	})
}
