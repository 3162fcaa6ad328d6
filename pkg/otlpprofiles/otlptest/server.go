package otlptest

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// ExportFunc answers one OTLP profiles export.
type ExportFunc func(context.Context, pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error)

// profilesService is the OTLP profiles service's gRPC name.
const profilesService = "opentelemetry.proto.collector.profiles.v1development.ProfilesService"

// NewProfilesServer returns a gRPC server whose OTLP profiles service (Export) is answered by
// export: the downstream or sink of a test. It is registered by hand over a raw-bytes codec:
// pdata's GRPCServer interface has an unexported method, so no type outside pdata can
// implement it without embedding one of pdata's. An undecodable request gets InvalidArgument.
func NewProfilesServer(export ExportFunc, opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(RawCodec{})}, opts...)...)
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: profilesService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Export",
			Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(rawMessage)
				if err := dec(in); err != nil {
					return nil, err
				}
				handle := func(ctx context.Context, req any) (any, error) {
					r := pprofileotlp.NewExportRequest()
					if err := r.UnmarshalProto(req.(*rawMessage).b); err != nil {
						return nil, status.Errorf(codes.InvalidArgument, "decode OTLP profiles request: %v", err)
					}
					resp, err := export(ctx, r)
					if err != nil {
						return nil, err
					}
					b, err := resp.MarshalProto()
					if err != nil {
						return nil, status.Errorf(codes.Internal, "encode OTLP profiles response: %v", err)
					}
					return &rawMessage{b: b}, nil
				}
				if interceptor == nil {
					return handle(ctx, in)
				}
				return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: ExportMethod}, handle)
			},
		}},
	}, nil)
	return s
}

// rawMessage is an encoded request or response; RawCodec passes it through as it is.
type rawMessage struct{ b []byte }

// ExportMethod is the full gRPC method name of the OTLP profiles Export.
const ExportMethod = "/" + profilesService + "/Export"

// RawCodec is a gRPC codec that passes bytes through as they are, for messages of type
// *[]byte: with grpc.ForceCodecV2(RawCodec{}) a test client sends what no marshaler would
// (cc.Invoke(ctx, ExportMethod, &body, &reply, ...)).
type RawCodec struct{}

// Marshal returns the bytes of a *[]byte.
func (RawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *rawMessage:
		return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
	case *[]byte:
		return mem.BufferSlice{mem.SliceBuffer(*m)}, nil
	}
	return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
}

// Unmarshal stores the bytes into a *[]byte.
func (RawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *rawMessage:
		m.b = data.Materialize()
	case *[]byte:
		*m = data.Materialize()
	default:
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	return nil
}

// Name is the content subtype: the bytes are protobuf.
func (RawCodec) Name() string { return "proto" }
