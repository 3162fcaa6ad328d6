package refusals

import (
	"reflect"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// otlpRequest is what pdata's OTLP export request messages implement (pdata registers gRPC's
// "proto" codec over them). Only their decode failures are deferred: every OTLP Export method
// is unary, so the unary interceptor is certain to see the message before any handler does.
type otlpRequest interface {
	UnmarshalProto([]byte) error
}

// codec wraps the registered "proto" codec so that an OTLP request that does not decode is
// answered InvalidArgument instead of Internal.
//
// grpc-go decodes a unary request inside the generated handler, before any interceptor, and
// turns any Unmarshal error into codes.Internal ("grpc: failed to unmarshal the received
// message"); nothing configurable changes that code. So Unmarshal reports success for an OTLP
// request that failed, remembering the failure under the message's pointer; the stats
// handler, which gRPC calls with that pointer right after Unmarshal (stats.InPayload), moves
// the failure into the RPC's state, and the unary interceptor, handed the same pointer,
// answers InvalidArgument without calling the receiver. A failure left behind (a client that
// sends a second message on a unary RPC, so gRPC decodes again without an InPayload) is
// dropped at the end of the RPC (stats.End). The map holds the message alive, so its
// address cannot be reused by another RPC while the entry exists.
type codec struct {
	delegate encoding.CodecV2
	// pending counts entries in failed, so the path of a well-formed request skips the map.
	pending atomic.Int64
	failed  sync.Map // message pointer -> error
}

func newCodec() *codec {
	// pdata's otelgrpc package registers "proto" at init (its pooled, allocation-aware codec
	// for OTLP messages over grpc-go's own): wrapping whatever is registered keeps it.
	return &codec{delegate: encoding.GetCodecV2("proto")}
}

func (c *codec) Name() string { return c.delegate.Name() }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) { return c.delegate.Marshal(v) }

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.delegate.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	if _, ok := v.(otlpRequest); !ok || reflect.TypeOf(v).Kind() != reflect.Pointer {
		// Not an OTLP request (or not a pointer, which could not key the map): gRPC's
		// own answer stands.
		return err
	}
	c.failed.Store(v, err)
	c.pending.Add(1)
	return nil
}

// take returns and forgets the decode failure of message v, if it had one.
func (c *codec) take(v any) (error, bool) {
	if c.pending.Load() == 0 {
		return nil, false
	}
	e, ok := c.failed.LoadAndDelete(v)
	if !ok {
		return nil, false
	}
	c.pending.Add(-1)
	err, _ := e.(error)
	return err, true
}

// forget drops a failure left for message v.
func (c *codec) forget(v any) {
	if c.pending.Load() == 0 || v == nil {
		return
	}
	if _, ok := c.failed.LoadAndDelete(v); ok {
		c.pending.Add(-1)
	}
}
