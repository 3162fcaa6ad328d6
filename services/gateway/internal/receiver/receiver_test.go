package receiver_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/services/gateway/internal/receiver"
)

// recorder is a Consumer that keeps what it is given and answers with err.
type recorder struct {
	mu  sync.Mutex
	got []pprofile.Profiles
	err error
}

func (r *recorder) Consume(_ context.Context, pd pprofile.Profiles, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, pd)
	return r.err
}

func sample() pprofile.Profiles {
	pd := pprofile.NewProfiles()
	pd.Dictionary().StringTable().Append("")
	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("host.name", "node-7")
	rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty().Samples().AppendEmpty().TimestampsUnixNano().Append(1, 2)
	return pd
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	// Writes to a bytes.Buffer cannot fail; a failure here is a broken test.
	if _, err := w.Write(b); err != nil {
		panic(err)
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

const jsonPlain = `{"resourceProfiles":[{"resource":{"attributes":[{"key":"host.name","value":{"stringValue":"node-7"}}]},"scopeProfiles":[{"profiles":[{"samples":[{"timestampsUnixNano":["1","2"]}]}]}]}],"dictionary":{"stringTable":[""]}}`

const jsonRefs = `{"resourceProfiles":[{"resource":{"attributes":[{"keyStrindex":1,"value":{"stringValueStrindex":2}}]},"scopeProfiles":[{"profiles":[{"samples":[{"timestampsUnixNano":["1","2"]}]}]}]}],"dictionary":{"stringTable":["","host.name","node-7"]}}`

func TestHTTP(t *testing.T) {
	pb, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(sample())
	if err != nil {
		t.Fatal(err)
	}
	bomb := gz(bytes.Repeat([]byte{0}, 2<<20))
	tests := []struct {
		name, method, ct, enc string
		body                  []byte
		headers               map[string]string
		consumerErr           error
		wantCode              int
		wantMsg               string
		wantHost              bool
	}{
		{name: "protobuf", ct: "application/x-protobuf", body: pb, wantCode: 200, wantHost: true},
		{name: "protobuf gzip", ct: "application/x-protobuf", enc: "gzip", body: gz(pb), wantCode: 200, wantHost: true},
		{name: "json plain attributes", ct: "application/json", body: []byte(jsonPlain), wantCode: 200, wantHost: true},
		{name: "json string-table attributes", ct: "application/json; charset=utf-8", body: []byte(jsonRefs), wantCode: 200, wantHost: true},
		{name: "json gzip", ct: "application/json", enc: "gzip", body: gz([]byte(jsonPlain)), wantCode: 200, wantHost: true},
		{name: "get", method: http.MethodGet, ct: "application/x-protobuf", wantCode: 405},
		{name: "content type", ct: "text/plain", body: pb, wantCode: 415},
		{name: "encoding", ct: "application/x-protobuf", enc: "br", body: pb, wantCode: 415},
		{name: "bad gzip", ct: "application/x-protobuf", enc: "gzip", body: []byte("nope"), wantCode: 400, wantMsg: "gzip"},
		{name: "too large", ct: "application/x-protobuf", body: make([]byte, 1<<20+1), wantCode: 413},
		{name: "gzip bomb", ct: "application/x-protobuf", enc: "gzip", body: bomb, wantCode: 413, wantMsg: "decompressed"},
		{name: "garbage", ct: "application/x-protobuf", body: []byte{0xff, 0xff, 0xff}, wantCode: 400, wantMsg: "decode"},
		{name: "bad reference", ct: "application/json", body: []byte(strings.Replace(jsonRefs, `"keyStrindex":1`, `"keyStrindex":9`, 1)), wantCode: 400, wantMsg: "key_strindex"},
		{name: "version", ct: "application/x-protobuf", body: pb, headers: map[string]string{otlpprofiles.DevelopmentVersionHeader: "99"}, wantCode: 400},
		{name: "invalid", ct: "application/x-protobuf", body: pb, consumerErr: fmt.Errorf("%w: dictionary.location_table[3].mapping_index: 9 outside", receiver.ErrInvalid), wantCode: 400, wantMsg: "location_table[3]"},
		{name: "full", ct: "application/x-protobuf", body: pb, consumerErr: fmt.Errorf("%w: queue full", receiver.ErrUnavailable), wantCode: 503, wantMsg: "queue full"},
		{name: "internal", ct: "application/x-protobuf", body: pb, consumerErr: errors.New("boom"), wantCode: 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{err: tc.consumerErr}
			srv := httptest.NewServer(receiver.HTTPHandler(rec, 1<<20))
			defer srv.Close()
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+receiver.Path, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", tc.ct)
			if tc.enc != "" {
				req.Header.Set("Content-Encoding", tc.enc)
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("status %d (%q), want %d", resp.StatusCode, body, tc.wantCode)
			}
			if tc.wantCode == 503 && resp.Header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
			if tc.wantMsg != "" {
				var st status.Status
				if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-protobuf") {
					if err := proto.Unmarshal(body, &st); err != nil {
						t.Fatalf("error body is not a google.rpc.Status: %v", err)
					}
				} else {
					st.Message = string(body)
				}
				if !strings.Contains(st.Message, tc.wantMsg) {
					t.Fatalf("message %q lacks %q", st.Message, tc.wantMsg)
				}
			}
			if tc.wantHost {
				if len(rec.got) != 1 {
					t.Fatalf("consumer got %d requests", len(rec.got))
				}
				v, ok := rec.got[0].ResourceProfiles().At(0).Resource().Attributes().Get("host.name")
				if !ok || v.Str() != "node-7" || rec.got[0].SampleCount() != 1 {
					t.Fatalf("resource attribute or sample lost: %v %v", v.AsString(), rec.got[0].SampleCount())
				}
			}
		})
	}
}

func TestGRPC(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode codes.Code
	}{
		{"ok", nil, codes.OK},
		{"invalid", fmt.Errorf("%w: samples[0].stack_index: 7 outside", receiver.ErrInvalid), codes.InvalidArgument},
		{"full", fmt.Errorf("%w: full", receiver.ErrUnavailable), codes.Unavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{err: tc.err}
			s := grpc.NewServer()
			receiver.RegisterGRPC(s, rec)
			var lc net.ListenConfig
			ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			serveErr := make(chan error, 1)
			go func() { serveErr <- s.Serve(ln) }()
			defer func() {
				s.Stop()
				if err := <-serveErr; err != nil {
					t.Errorf("grpc serve: %v", err)
				}
			}()
			cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			_, err = pprofileotlp.NewGRPCClient(cc).Export(context.Background(), pprofileotlp.NewExportRequestFromProfiles(sample()), grpc.UseCompressor(grpcgzip.Name))
			if got := grpcstatus.Code(err); got != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", got, err, tc.wantCode)
			}
			if len(rec.got) != 1 || rec.got[0].SampleCount() != 1 {
				t.Fatal("request not delivered to the consumer")
			}
			if v, _ := rec.got[0].ResourceProfiles().At(0).Resource().Attributes().Get("host.name"); v.Str() != "node-7" {
				t.Fatal("string-table resource attribute not resolved")
			}
		})
	}
}
