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
// export: the downstream or sink of a test. It is registered by hand over a raw-bytes codec,
// since pdata's GRPCServer interface has an unexported method and can only be implemented by
// embedding its unimplemented server; an undecodable request gets InvalidArgument.
func NewProfilesServer(export ExportFunc, opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(rawCodec{})}, opts...)...)
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
				return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/" + profilesService + "/Export"}, handle)
			},
		}},
	}, nil)
	return s
}

// rawMessage is an encoded request or response; rawCodec passes it through as it is.
type rawMessage struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	m.b = data.Materialize()
	return nil
}

// Name is the content subtype: the bytes are protobuf.
func (rawCodec) Name() string { return "proto" }
