package symbolize

import (
	"context"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/symbolizecodec"
)

// maxAnswerBytes bounds one Symbolize answer: a full batch of deep inline chains is large, a
// runaway answer is refused.
const maxAnswerBytes = 256 << 20

// NewClient returns a Symbolize client of the symbolizer at baseURL over hc. A non-empty
// token is sent as a bearer token, for symbolizers whose reads are protected. extra options
// come after the client's own (the Collector processor adds its tracing interceptor).
func NewClient(hc *http.Client, baseURL, token string, extra ...connect.ClientOption) symbolizerv1connect.SymbolizerServiceClient {
	// Answers are large: the symbolizer's codec decodes them without an allocation per
	// string (pkg/symbolizecodec).
	opts := []connect.ClientOption{connect.WithReadMaxBytes(maxAnswerBytes), connect.WithCodec(symbolizecodec.Codec{})}
	if token != "" {
		opts = append(opts, connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+token)
				return next(ctx, req)
			}
		})))
	}
	return symbolizerv1connect.NewSymbolizerServiceClient(hc, strings.TrimRight(baseURL, "/"), append(opts, extra...)...)
}
