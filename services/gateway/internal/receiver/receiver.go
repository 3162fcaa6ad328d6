// Package receiver accepts OTLP profiles over gRPC (ProfilesService/Export, gzip) and HTTP
// (POST /v1development/profiles, protobuf or JSON, gzip) and hands each request to a
// Consumer. Malformed requests get InvalidArgument / 400 naming the problem; a gateway that
// cannot take more gets Unavailable / 503 with Retry-After.
package receiver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	// Also gRPC's "gzip" for requests: the gateway's own, faster than gRPC's.
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/services/gateway/internal/gzipcodec"
)

// Consumer processes one decoded request. It returns an error wrapping ErrInvalid for a
// request that must not be retried, ErrUnavailable for one the sender should retry later.
type Consumer interface {
	Consume(ctx context.Context, pd pprofile.Profiles, transport string) error
}

var (
	// ErrInvalid marks a malformed request.
	ErrInvalid = errors.New("invalid request")
	// ErrUnavailable marks a request refused for now (full queue, shutting down).
	ErrUnavailable = errors.New("unavailable")
)

// RetryAfter is the delay suggested to senders refused with Unavailable / 503.
const RetryAfter = 2 * time.Second

// Path is the OTLP/HTTP profiles path.
const Path = "/v1development/profiles"

func grpcError(err error) error {
	switch {
	case errors.Is(err, ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

type grpcServer struct {
	pprofileotlp.UnimplementedGRPCServer
	c Consumer
}

func (s *grpcServer) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if err := otlpprofiles.ValidateDevelopmentVersion(md.Get(otlpprofiles.DevelopmentVersionHeader)); err != nil {
		return pprofileotlp.NewExportResponse(), status.Error(codes.InvalidArgument, err.Error())
	}
	// pdata's gRPC server leaves string-table references in resource and scope attributes;
	// its unmarshalers, which the HTTP path uses, resolve them.
	pd := req.Profiles()
	if err := otlpprofiles.ResolveReferences(pd); err != nil {
		return pprofileotlp.NewExportResponse(), status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.c.Consume(ctx, pd, "grpc"); err != nil {
		if errors.Is(err, ErrUnavailable) {
			// Tell grpc-go clients when to come back, as the HTTP receiver does.
			_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", strconv.Itoa(int(RetryAfter/time.Second))))
		}
		return pprofileotlp.NewExportResponse(), grpcError(err)
	}
	return pprofileotlp.NewExportResponse(), nil
}

// RegisterGRPC registers the OTLP profiles service on s.
func RegisterGRPC(s *grpc.Server, c Consumer) {
	pprofileotlp.RegisterGRPCServer(s, &grpcServer{c: c})
}

// HTTPHandler serves POST /v1development/profiles. maxBytes bounds the body both as sent and
// after gzip decompression.
func HTTPHandler(c Consumer, maxBytes int64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		serveHTTP(w, r, c, maxBytes)
	})
	return mux
}

const (
	ctProto = "application/x-protobuf"
	ctJSON  = "application/json"
)

func serveHTTP(w http.ResponseWriter, r *http.Request, c Consumer, maxBytes int64) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeStatus(w, ctProto, http.StatusMethodNotAllowed, codes.Unimplemented, "method "+r.Method+" not allowed; use POST")
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != ctProto && ct != ctJSON {
		writeStatus(w, ctProto, http.StatusUnsupportedMediaType, codes.InvalidArgument, fmt.Sprintf("content type %q: want %s or %s", ct, ctProto, ctJSON))
		return
	}
	body, code, err := readBody(w, r, maxBytes)
	if err != nil {
		writeStatus(w, ct, code, codes.InvalidArgument, err.Error())
		return
	}
	if err := otlpprofiles.ValidateDevelopmentVersion(r.Header.Values(otlpprofiles.DevelopmentVersionHeader)); err != nil {
		writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, err.Error())
		return
	}
	var pd pprofile.Profiles
	if ct == ctJSON {
		pd, err = (&pprofile.JSONUnmarshaler{}).UnmarshalProfiles(body)
	} else {
		pd, err = (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(body)
	}
	if err != nil {
		writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, "decode request: "+err.Error())
		return
	}
	// The unmarshalers resolve references but leave one outside the string table as it was.
	if err := otlpprofiles.ResolveReferences(pd); err != nil {
		writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, err.Error())
		return
	}
	if err := c.Consume(r.Context(), pd, "http"); err != nil {
		switch {
		case errors.Is(err, ErrInvalid):
			writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, err.Error())
		case errors.Is(err, ErrUnavailable):
			w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
			writeStatus(w, ct, http.StatusServiceUnavailable, codes.Unavailable, err.Error())
		default:
			writeStatus(w, ct, http.StatusInternalServerError, codes.Internal, err.Error())
		}
		return
	}
	resp := pprofileotlp.NewExportResponse()
	var out []byte
	if ct == ctJSON {
		out, err = resp.MarshalJSON()
	} else {
		out, err = resp.MarshalProto()
	}
	if err != nil {
		writeStatus(w, ct, http.StatusInternalServerError, codes.Internal, "encode response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

func readBody(w http.ResponseWriter, r *http.Request, maxBytes int64) ([]byte, int, error) {
	var rd io.Reader = http.MaxBytesReader(w, r.Body, maxBytes)
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzipcodec.NewReader(rd)
		if err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("gzip body: %w", err)
		}
		rd = zr
	default:
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content encoding %q: want gzip or none", enc)
	}
	body, err := io.ReadAll(io.LimitReader(rd, maxBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", maxBytes)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("read body: %w", err)
	}
	if int64(len(body)) > maxBytes {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("decompressed request body over %d bytes", maxBytes)
	}
	return body, 0, nil
}

// writeStatus answers with a google.rpc.Status body, as OTLP/HTTP specifies for errors.
func writeStatus(w http.ResponseWriter, ct string, httpCode int, code codes.Code, msg string) {
	st := status.New(code, msg).Proto()
	var body []byte
	if ct == ctJSON {
		body, _ = protojson.Marshal(st)
	} else {
		ct = ctProto
		body, _ = proto.Marshal(st)
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(httpCode)
	_, _ = w.Write(body)
}
