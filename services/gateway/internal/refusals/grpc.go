package refusals

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// rpcState is what the stats handler, the codec and the interceptors learn about one RPC.
// gRPC calls the stats handler, the interceptors and the handler of one RPC in sequence on
// one goroutine, so the fields need no lock.
type rpcState struct {
	// msg is the last message received, which the codec may hold a failure for.
	msg any
	// undecodable is the decode failure of msg.
	undecodable error
	// unknownMethod: no service of the server has the method.
	unknownMethod bool
}

type stateKey struct{}

// stateContext carries an RPC's state: one allocation per RPC where context.WithValue and a
// separate state would be two.
type stateContext struct {
	context.Context
	st rpcState
}

func (c *stateContext) Value(key any) any {
	if _, ok := key.(stateKey); ok {
		return &c.st
	}
	return c.Context.Value(key)
}

func stateFrom(ctx context.Context) *rpcState {
	st, _ := ctx.Value(stateKey{}).(*rpcState)
	return st
}

// grpcServerOptions are the options of one gRPC server: the codec, the interceptors that
// answer a deferred decode failure, the stats handler that counts refusals and the handler
// of unknown methods (so that they pass through the stats handler too).
func (e *Extension) grpcServerOptions() []grpc.ServerOption {
	h := &statsHandler{codec: e.codec, tracker: e.tracker}
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(e.codec),
		grpc.StatsHandler(h),
		grpc.ChainUnaryInterceptor(h.unary),
		grpc.ChainStreamInterceptor(h.stream),
		grpc.UnknownServiceHandler(unknownMethod),
	}
}

// undecodableError is the client's answer for a request that does not decode.
func undecodableError(method string, err error) error {
	return status.Errorf(codes.InvalidArgument, "request to %s is not a valid protobuf message of that method: %v", method, err)
}

type statsHandler struct {
	codec   *codec
	tracker *tracker
}

func (h *statsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return &stateContext{Context: ctx}
}

func (h *statsHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.InPayload:
		if st := stateFrom(ctx); st != nil {
			st.msg = s.Payload
			st.undecodable, _ = h.codec.take(s.Payload)
		}
	case *stats.End:
		st := stateFrom(ctx)
		if st != nil {
			h.codec.forget(st.msg)
		}
		if s.Error == nil {
			return
		}
		r, ok := classifyGRPC(st, status.Convert(s.Error))
		if !ok {
			return
		}
		addr := ""
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		h.tracker.refused(GRPC, r, addr, status.Convert(s.Error).Message())
	}
}

func (h *statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (h *statsHandler) HandleConn(context.Context, stats.ConnStats) {}

// unary answers a request whose body did not decode, before the receiver sees it.
func (h *statsHandler) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if st := stateFrom(ctx); st != nil && st.undecodable != nil && st.msg == req {
		return nil, undecodableError(info.FullMethod, st.undecodable)
	}
	return handler(ctx, req)
}

// stream does the same for every message of a stream. The OTLP receiver has no streaming
// method; this keeps a deferred failure from reaching a handler if one ever does.
func (h *statsHandler) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &checkedStream{ServerStream: ss, method: info.FullMethod})
}

type checkedStream struct {
	grpc.ServerStream
	method string
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if st := stateFrom(s.Context()); st != nil && st.undecodable != nil && st.msg == m {
		return undecodableError(s.method, st.undecodable)
	}
	return nil
}

// unknownMethod answers what gRPC answers for a method no service has (Unimplemented); as a
// handler it runs inside the RPC's stats, so the refusal is counted with the sender's address.
func unknownMethod(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	if st := stateFrom(ss.Context()); st != nil {
		st.unknownMethod = true
	}
	return status.Errorf(codes.Unimplemented, "unknown service or method %s", method)
}

// classifyGRPC names the reason of a refused RPC; false for an RPC the client canceled
// (nothing was refused). The messages matched are grpc-go's own (v1.85), which the tests
// check.
func classifyGRPC(st *rpcState, s *status.Status) (Reason, bool) {
	if st != nil && st.undecodable != nil && s.Code() == codes.InvalidArgument {
		return Undecodable, true
	}
	if st != nil && st.unknownMethod {
		return BadMethodOrPath, true
	}
	msg := s.Message()
	switch s.Code() {
	case codes.Canceled:
		return 0, false
	case codes.ResourceExhausted:
		if strings.Contains(msg, "larger than max") || strings.Contains(msg, "message too large") {
			return TooLarge, true
		}
		return Pushback, true
	case codes.Unimplemented:
		if strings.Contains(msg, "Decompressor is not installed") {
			return BadEncoding, true
		}
		return BadMethodOrPath, true
	case codes.Internal:
		switch {
		case strings.Contains(msg, "decompress") || strings.Contains(msg, "compressed flag"):
			return BadEncoding, true
		case strings.Contains(msg, "failed to unmarshal"):
			return Undecodable, true
		}
		return Other, true
	case codes.Unauthenticated, codes.PermissionDenied:
		return Unauthenticated, true
	case codes.Unavailable:
		return Pushback, true
	}
	return Other, true
}
