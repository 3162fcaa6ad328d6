package server

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"slices"

	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/alecthomas/kong"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/uploadcli"
)

const token = "test-token-1"

const progSrc = `
#include <stdio.h>
#include <stdlib.h>
static int __attribute__((noinline)) leaf(int x) { return x * 3 + 1; }
static inline int mid(int x) { return leaf(x) + 2; }
static inline int outer(int x) { return mid(x) * 5; }
int __attribute__((noinline)) work(int n) { int s = 0; for (int i = 0; i < n; i++) s += outer(i); return s; }
int main(int argc, char **argv) { printf("%d\n", work(argc + atoi(argc > 1 ? argv[1] : "3"))); return 0; }
`

type running struct {
	url    string
	srv    *Server
	cancel context.CancelFunc
	done   chan error
}

// start parses args like the command line does and serves on a free loopback port.
func start(t *testing.T, args ...string) *running {
	t.Helper()
	return startWith(t, nil, args...)
}

// startWith lets a test wrap the server's handler before it serves.
func startWith(t *testing.T, hook func(*Server), args ...string) *running {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cli struct {
		Serve Config `cmd:""`
	}
	p, err := kong.New(&cli, kong.Exit(func(int) { t.Fatal("kong exit") }))
	if err != nil {
		t.Fatal(err)
	}
	full := append([]string{"serve", "--store-dir", t.TempDir(), "--upload-tokens-file", tokens, "--temp-dir", t.TempDir()}, args...)
	if _, err := p.Parse(full); err != nil {
		t.Fatalf("parse %v: %v", full, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, &cli.Serve, log)
	if err != nil {
		t.Fatal(err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		hook(s)
	}
	r := &running{url: "http://" + ln.Addr().String(), srv: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.ServeListener(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("serve: %v", err)
		}
		s.Close()
	})
	return r
}

func upload(t *testing.T, url string, paths ...string) []uploadcli.Result {
	t.Helper()
	return uploadWith(t, url, func(*uploadcli.UploadCmd) {}, paths...)
}

// uploadWith is upload with the command's flags changed by set.
func uploadWith(t *testing.T, url string, set func(*uploadcli.UploadCmd), paths ...string) []uploadcli.Result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := &uploadcli.UploadCmd{Conn: uploadcli.Conn{Server: url, Token: token, Timeout: time.Minute},
		Paths: paths, Parallel: 4, Source: "ci", Type: "auto", Retries: 3, Progress: "plain", Out: &out, Err: &errb}
	set(cmd)
	res, err := cmd.Upload(context.Background())
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	t.Logf("upload:\n%s", out.String())
	return res
}

type binary struct {
	path  string
	ids   buildid.IDs
	addrs []uint64 // ELF virtual addresses inside functions
}

func compile(t *testing.T, args ...string) binary {
	t.Helper()
	path := testsupport.CompileC(t, progSrc, args...)
	ids, err := buildid.FromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	b := binary{path: path, ids: ids}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && s.Value != 0 {
			for off := uint64(0); off < s.Size; off += 3 {
				b.addrs = append(b.addrs, s.Value+off)
			}
		}
	}
	b.addrs = append(b.addrs, 0x10, 1<<40) // resolve to nothing
	return b
}

// engineFrames is what the engine answers locally.
func engineFrames(t *testing.T, path string, addrs []uint64) [][]symbolizecodec.Frame {
	t.Helper()
	ix, _, err := debuginfo.OpenIndex(path, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]symbolizecodec.Frame, len(addrs))
	for i, a := range addrs {
		for _, f := range ix.Lookup(a) {
			pf := symbolizecodec.Frame{Function: f.Function, File: f.File, Line: f.Line, Column: f.Column, StartLine: f.StartLine}
			if f.LinkageName != f.Function {
				pf.LinkageName = f.LinkageName
			}
			out[i] = append(out[i], pf)
		}
	}
	return out
}

// sameLocations decodes a module's answer and compares it with the engine's frames.
func sameLocations(t *testing.T, what string, m *symbolizerv1.ModuleResult, want [][]symbolizecodec.Frame) {
	t.Helper()
	got, err := symbolizecodec.Decode(m, len(want))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	frames := 0
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("%s: location %d = %+v, want %+v", what, i, got[i], want[i])
		}
		frames += len(want[i])
	}
	if frames == 0 {
		t.Fatalf("%s: no frames at all", what)
	}
}

// redisEntries counts the cached results in Redis: the fields of every result bucket.
func redisEntries(t *testing.T, rcl *goredis.Client) int64 {
	t.Helper()
	ctx := context.Background()
	var n int64
	iter := rcl.Scan(ctx, 0, "psym:*", 1000).Iterator()
	for iter.Next(ctx) {
		n += rcl.HLen(ctx, iter.Val()).Val()
	}
	return n
}

func bearer(r connect.AnyRequest) { r.Header().Set("Authorization", "Bearer "+token) }

func TestEndToEnd(t *testing.T) {
	redis := testsupport.StartRedis(t)
	rcl := goredis.NewClient(&goredis.Options{Addr: redis.Addr()})
	defer rcl.Close()
	// A resident index answers without Redis; an index cache too small to keep any index makes
	// every call go through Redis, as on a replica that has not loaded the index.
	r := start(t, "--redis-url", redis.URL(), "--redis-timeout", "100ms", "--result-cache-entries", "0", "--index-cache-bytes", "1")
	bin := compile(t, "-g", "-O2")

	res := upload(t, r.url, bin.path)
	if len(res) != 1 || res[0].Outcome != "uploaded" || res[0].Err != nil {
		t.Fatalf("upload = %+v", res)
	}
	// A second run uploads nothing.
	if res := upload(t, r.url, filepath.Dir(bin.path)); res[0].Outcome != "skipped" {
		t.Fatalf("second upload = %+v", res)
	}

	want := engineFrames(t, bin.path, bin.addrs)
	req := &symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{
		{GnuBuildId: bin.ids.GNU, Addresses: bin.addrs, Filename: "/usr/bin/prog"},
		{GnuBuildId: strings.Repeat("ab", 20), Addresses: []uint64{1, 2}},
		{Htlhash: bin.ids.HTLHash, Addresses: bin.addrs[:3]},
	}}
	check := func(what string, resp *symbolizerv1.SymbolizeResponse) {
		t.Helper()
		m := resp.GetModules()
		if len(m) != 3 {
			t.Fatalf("%s: %d modules", what, len(m))
		}
		if m[0].Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK || m[0].Fidelity != symbolizerv1.Fidelity_FIDELITY_FULL || m[0].ResolvedBuildId != bin.ids.GNU {
			t.Fatalf("%s: module 0 = %v %v %q %s", what, m[0].Status, m[0].Fidelity, m[0].ResolvedBuildId, m[0].Message)
		}
		sameLocations(t, what, m[0], want)
		if m[1].Status != symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND || len(m[1].FrameCounts) != 2 {
			t.Fatalf("%s: module 1 = %v", what, m[1])
		}
		if m[2].Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK || m[2].ResolvedBuildIdType != debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH {
			t.Fatalf("%s: module 2 (by htlhash) = %v", what, m[2].Status)
		}
		sameLocations(t, what+" by htlhash", m[2], want[:3])
	}

	// Connect (binary protobuf), twice: cold, then from Redis.
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	waitForRedis := func() {
		t.Helper()
		// Results reach Redis in the background.
		deadline := time.Now().Add(10 * time.Second)
		for redisEntries(t, rcl) < int64(len(bin.addrs))/2 {
			if time.Now().After(deadline) {
				t.Fatal("results were not written to Redis")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, round := range []string{"connect cold", "connect cached"} {
		resp, err := client.Symbolize(context.Background(), connect.NewRequest(req))
		if err != nil {
			t.Fatalf("%s: %v", round, err)
		}
		check(round, resp.Msg)
		waitForRedis()
	}

	// gRPC-Web, and Connect's GET (the request in the URL) with binary protobuf: the
	// symbolizer's own codec encodes the answer for both.
	for _, tc := range []struct {
		name, method string
		opts         []connect.ClientOption
	}{
		{"grpc-web", http.MethodPost, []connect.ClientOption{connect.WithGRPCWeb()}},
		{"connect get", http.MethodGet, []connect.ClientOption{connect.WithHTTPGet(), connect.WithHTTPGetMaxURLSize(1<<20, false)}},
	} {
		var methods []string
		hc := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			methods = append(methods, req.Method)
			return http.DefaultTransport.RoundTrip(req)
		})}
		c := symbolizerv1connect.NewSymbolizerServiceClient(hc, r.url, tc.opts...)
		resp, err := c.Symbolize(context.Background(), connect.NewRequest(req))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(methods, []string{tc.method}) {
			t.Fatalf("%s: requests %v, want one %s", tc.name, methods, tc.method)
		}
		check(tc.name, resp.Msg)
	}

	// gRPC with grpc-go over prior-knowledge h2c.
	conn, err := grpc.NewClient(strings.TrimPrefix(r.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var gresp symbolizerv1.SymbolizeResponse
	if err := conn.Invoke(context.Background(), symbolizerv1connect.SymbolizerServiceSymbolizeProcedure, req, &gresp); err != nil {
		t.Fatalf("grpc: %v", err)
	}
	check("grpc", &gresp)
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: symbolizerv1connect.SymbolizerServiceName})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v", hc, err)
	}
	// Errors carry gRPC codes.
	err = conn.Invoke(context.Background(), symbolizerv1connect.SymbolizerServiceSymbolizeProcedure, &symbolizerv1.SymbolizeRequest{}, &gresp)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("grpc empty request = %v", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer wrong")
	err = conn.Invoke(ctx, debuginfov1connect.DebuginfoServiceDeleteProcedure, &debuginfov1.DeleteRequest{BuildId: bin.ids.GNU}, &debuginfov1.DeleteResponse{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("grpc delete with a wrong token = %v", err)
	}

	// curl with JSON (Connect protocol); uint64 addresses are JSON strings.
	body, _ := json.Marshal(map[string]any{"modules": []map[string]any{{"gnuBuildId": bin.ids.GNU, "addresses": u64Strings(bin.addrs)}}})
	out, err := exec.CommandContext(t.Context(), "curl", "-sS", "--fail-with-body", "-H", "Content-Type: application/json", "--data-binary", string(body),
		r.url+symbolizerv1connect.SymbolizerServiceSymbolizeProcedure).CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	var jresp symbolizerv1.SymbolizeResponse
	if err := protojsonUnmarshal(out, &jresp); err != nil {
		t.Fatalf("curl response %s: %v", out, err)
	}
	sameLocations(t, "curl json", jresp.Modules[0], want)

	// Redis stops in the middle of the run: calls keep succeeding; it comes back.
	redis.Stop()
	for i := 0; i < 3; i++ {
		resp, err := client.Symbolize(context.Background(), connect.NewRequest(req))
		if err != nil {
			t.Fatalf("with Redis down: %v", err)
		}
		check("redis down", resp.Msg)
	}
	redis.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for rcl.DBSize(context.Background()).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the Redis cache did not come back")
		}
		time.Sleep(200 * time.Millisecond)
		resp, err := client.Symbolize(context.Background(), connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		check("redis back", resp.Msg)
	}

	// Metrics name every layer.
	_, metricsText := testsupport.Get(t, r.url+"/metrics")
	for _, want := range []string{
		`symbolizer_rpc_requests_total{code="ok",procedure="/profsym.symbolizer.v1.SymbolizerService/Symbolize"}`,
		`symbolizer_cache_lookups_total{layer="redis",result="hit"}`,
		`symbolizer_redis_errors_total{op="get"}`,
		`symbolizer_stored_bytes_total`,
		`symbolizer_uploads_total{result="ok"} 1`,
	} {
		if !bytes.Contains(metricsText, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for path, code := range map[string]int{"/healthz": 200, "/readyz": 200, "/upload/xyz": 405} {
		if got, _ := testsupport.Get(t, r.url+path); got != code {
			t.Errorf("GET %s = %d, want %d", path, got, code)
		}
	}
}

func u64Strings(v []uint64) []string {
	out := make([]string, len(v))
	for i, a := range v {
		out[i] = strconv.FormatUint(a, 10)
	}
	return out
}

func TestSymbolizeErrors(t *testing.T) {
	r := start(t, "--max-modules", "2", "--max-addresses", "5")
	bin := compile(t, "-g")
	upload(t, r.url, bin.path)
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	f, _ := elf.Open(bin.path)
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	f.Close()
	main := bin.addrs[0]
	tests := []struct {
		name   string
		mods   []*symbolizerv1.Module
		code   connect.Code
		status symbolizerv1.ModuleStatus
		msg    string
	}{
		{"no modules", nil, connect.CodeInvalidArgument, 0, "modules"},
		{"no IDs", []*symbolizerv1.Module{{Addresses: []uint64{1}}}, connect.CodeInvalidArgument, 0, "modules[0]: none of"},
		{"upper-case hex", []*symbolizerv1.Module{{GnuBuildId: "AB"}}, connect.CodeInvalidArgument, 0, "modules[0].gnu_build_id: not lower-case hex"},
		{"path trick", []*symbolizerv1.Module{{GnuBuildId: bin.ids.GNU}, {GnuBuildId: "../../etc"}}, connect.CodeInvalidArgument, 0, "modules[1].gnu_build_id"},
		{"go id with space", []*symbolizerv1.Module{{GoBuildId: "a b"}}, connect.CodeInvalidArgument, 0, "modules[0].go_build_id"},
		{"long filename", []*symbolizerv1.Module{{GnuBuildId: "ab", Filename: strings.Repeat("x", 4097)}}, connect.CodeInvalidArgument, 0, "modules[0].filename"},
		{"too many modules", []*symbolizerv1.Module{{GnuBuildId: "ab"}, {GnuBuildId: "ab"}, {GnuBuildId: "ab"}}, connect.CodeResourceExhausted, 0, "modules"},
		{"too many addresses", []*symbolizerv1.Module{{GnuBuildId: "ab", Addresses: make([]uint64, 6)}}, connect.CodeResourceExhausted, 0, "addresses"},
		{"limit below start", []*symbolizerv1.Module{{GnuBuildId: bin.ids.GNU, MemoryStart: 0x2000, MemoryLimit: 0x1000, Addresses: []uint64{0x1500}}}, 0, symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_MAPPING, "memory_limit"},
		{"offset without range", []*symbolizerv1.Module{{GnuBuildId: bin.ids.GNU, FileOffset: 0x1000, Addresses: []uint64{1}}}, 0, symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_MAPPING, "file_offset"},
		{"no address in a segment", []*symbolizerv1.Module{{GnuBuildId: bin.ids.GNU, MemoryStart: 0x7f0000000000, MemoryLimit: 0x7f0000100000, FileOffset: 0x10000000, Addresses: []uint64{0x7f0000000010}}}, 0, symbolizerv1.ModuleStatus_MODULE_STATUS_INVALID_MAPPING, "PT_LOAD"},
		{"runtime mapping", []*symbolizerv1.Module{{GnuBuildId: bin.ids.GNU, MemoryStart: 0x555555554000 + text.Off, MemoryLimit: 0x555555554000 + text.Off + text.Filesz, FileOffset: text.Off,
			Addresses: []uint64{0x555555554000 + text.Off + (main - text.Vaddr)}}}, 0, symbolizerv1.ModuleStatus_MODULE_STATUS_OK, ""},
		{"missing", []*symbolizerv1.Module{{GnuBuildId: "abcd", Addresses: []uint64{1}}}, 0, symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND, "no debuginfo"},
	}
	want := engineFrames(t, bin.path, []uint64{main})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := client.Symbolize(context.Background(), connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: tc.mods}))
			if tc.code != 0 {
				if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("err = %v, want %v with %q", err, tc.code, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := resp.Msg.Modules[0]
			if m.Status != tc.status || !strings.Contains(m.Message, tc.msg) || len(m.FrameCounts) != len(tc.mods[0].Addresses) {
				t.Fatalf("module = %v %q (%d frame counts)", m.Status, m.Message, len(m.FrameCounts))
			}
			if tc.status == symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
				sameLocations(t, "runtime mapping", m, want)
			}
		})
	}
}

func TestUploadAPIEdgeCases(t *testing.T) {
	r := start(t, "--max-upload-bytes", "1000000")
	bin := compile(t, "-g")
	data, _ := os.ReadFile(bin.path)
	client := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	ctx := context.Background()
	sum := sha256Hex(data)
	initReq := func(size uint64) *connect.Request[debuginfov1.InitiateUploadRequest] {
		req := connect.NewRequest(&debuginfov1.InitiateUploadRequest{BuildId: bin.ids.GNU, BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU,
			Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO, Sha256: sum, Size: size, Source: debuginfov1.UploadSource_UPLOAD_SOURCE_CI})
		bearer(req)
		return req
	}

	// Tokens.
	noTok := connect.NewRequest(&debuginfov1.ShouldUploadRequest{})
	if _, err := client.ShouldUpload(ctx, noTok); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("no token = %v", err)
	}
	badTok := connect.NewRequest(&debuginfov1.ShouldUploadRequest{})
	badTok.Header().Set("Authorization", "Bearer nope")
	if _, err := client.ShouldUpload(ctx, badTok); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("wrong token = %v", err)
	}
	// Malformed fields.
	for _, m := range []*debuginfov1.InitiateUploadRequest{
		{BuildId: "XY", BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU},
		{BuildId: bin.ids.GNU, BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, Type: 1, Source: 1, Sha256: "zz", Size: 1},
		{BuildId: bin.ids.GNU, BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, Type: 1, Source: 0, Sha256: sum, Size: 1},
	} {
		req := connect.NewRequest(m)
		bearer(req)
		if _, err := client.InitiateUpload(ctx, req); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("malformed %v = %v", m, err)
		}
	}
	// Over the cap.
	if _, err := client.InitiateUpload(ctx, initReq(2000000)); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("over the cap = %v", err)
	}

	init, err := client.InitiateUpload(ctx, initReq(uint64(len(data))))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(init.Msg.UploadUrl, r.url+"/upload/") || init.Msg.MaxSize != 1000000 {
		t.Fatalf("initiate = %v", init.Msg)
	}
	put := func(body []byte, tok string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, init.Msg.UploadUrl, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	if c := put(data, ""); c != 401 {
		t.Fatalf("PUT without token = %d", c)
	}
	if c := put(data, "nope"); c != 403 {
		t.Fatalf("PUT with a wrong token = %d", c)
	}
	if c := put(append(data, 0), token); c != 400 {
		t.Fatalf("PUT of a longer body = %d", c)
	}
	// A retry of InitiateUpload hands back the same upload.
	again, err := client.InitiateUpload(ctx, initReq(uint64(len(data))))
	if err != nil || again.Msg.UploadId != init.Msg.UploadId {
		t.Fatalf("repeated initiate = %v, %v", again, err)
	}
	fin := connect.NewRequest(&debuginfov1.FinishUploadRequest{BuildId: bin.ids.GNU, UploadId: init.Msg.UploadId})
	bearer(fin)
	if _, err := client.FinishUpload(ctx, fin); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("finish before PUT = %v", err)
	}
	if c := put(data, token); c != 200 {
		t.Fatalf("PUT = %d", c)
	}
	done, err := client.FinishUpload(ctx, fin)
	if err != nil {
		t.Fatal(err)
	}
	if d := done.Msg.Debuginfo; d.State != debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE || !d.Quality.HasDwarf || len(d.Ids) != 2 {
		t.Fatalf("record = %v", d)
	}
	// A repeated finish returns the same record.
	if again, err := client.FinishUpload(ctx, fin); err != nil || !proto.Equal(again.Msg.Debuginfo, done.Msg.Debuginfo) {
		t.Fatalf("repeated finish = %v", err)
	}
	if _, err := client.InitiateUpload(ctx, initReq(uint64(len(data)))); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("initiate of a stored file = %v", err)
	}
	unknown := connect.NewRequest(&debuginfov1.FinishUploadRequest{BuildId: bin.ids.GNU, UploadId: strings.Repeat("0", 32)})
	bearer(unknown)
	if _, err := client.FinishUpload(ctx, unknown); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("finish of an unknown upload = %v", err)
	}

	// Get by any ID, List, Delete.
	for _, id := range []string{bin.ids.GNU, bin.ids.HTLHash} {
		g, err := client.Get(ctx, connect.NewRequest(&debuginfov1.GetRequest{BuildId: id}))
		if err != nil || g.Msg.Debuginfo.Sha256 != sum {
			t.Fatalf("get %s = %v", id, err)
		}
	}
	if _, err := client.Get(ctx, connect.NewRequest(&debuginfov1.GetRequest{BuildId: "a b"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("get 'a b' = %v", err)
	}
	// A Go build ID holds '/': it is escaped, never a path, and finds nothing. "../x" is no
	// Go build ID the go command writes, so it is refused before anything is looked up.
	if _, err := client.Get(ctx, connect.NewRequest(&debuginfov1.GetRequest{BuildId: "Wr8o8Tui11nJFtYVqaau/tPe8Sv5R8f5F7l3LcDzy"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("get a Go build ID = %v", err)
	}
	// Printable text shaped loosely like a Go build ID is not one (binaryid.ValidGo).
	if _, err := client.Get(ctx, connect.NewRequest(&debuginfov1.GetRequest{BuildId: "x/y", BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GO})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("get x/y as Go = %v", err)
	}
	if _, err := client.Get(ctx, connect.NewRequest(&debuginfov1.GetRequest{BuildId: "../x"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("get ../x = %v", err)
	}
	if _, err := client.Get(ctx, connect.NewRequest(&debuginfov1.GetRequest{BuildId: "../x", BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("get ../x as GNU = %v", err)
	}
	l, err := client.List(ctx, connect.NewRequest(&debuginfov1.ListRequest{}))
	if err != nil || len(l.Msg.Debuginfos) != 1 {
		t.Fatalf("list = %v %v", l, err)
	}
	if _, err := client.List(ctx, connect.NewRequest(&debuginfov1.ListRequest{PageToken: "forged"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("forged page token = %v", err)
	}
	del := connect.NewRequest(&debuginfov1.DeleteRequest{BuildId: bin.ids.GNU})
	bearer(del)
	if _, err := client.Delete(ctx, del); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Delete(ctx, del); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("second delete = %v", err)
	}

	// Non-ELF and truncated files through the CLI: clear failures, nothing stored.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notelf"), bytes.Repeat([]byte("text"), 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "truncated"), data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	res := upload(t, r.url, filepath.Join(dir, "notelf"), filepath.Join(dir, "truncated"))
	for _, x := range res {
		if x.Err == nil {
			t.Errorf("%s uploaded: %+v", x.Path, x)
		}
	}
	if l, _ := client.List(ctx, connect.NewRequest(&debuginfov1.ListRequest{})); len(l.Msg.Debuginfos) != 0 {
		t.Fatalf("rejected files are listed: %v", l.Msg.Debuginfos)
	}
}

func TestConcurrentCLIUploads(t *testing.T) {
	r := start(t)
	bin := compile(t, "-g")
	var wg sync.WaitGroup
	outcomes := make([]string, 6)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			cmd := &uploadcli.UploadCmd{Conn: uploadcli.Conn{Server: r.url, Token: token, Timeout: time.Minute},
				Paths: []string{bin.path}, Parallel: 1, Source: "ci", Type: "auto", Retries: 3, Progress: "plain", Out: &out, Err: io.Discard}
			res, err := cmd.Upload(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			outcomes[i] = res[0].Outcome
			if res[0].Err != nil {
				outcomes[i] += ": " + res[0].Err.Error()
			}
		}()
	}
	wg.Wait()
	uploaded := 0
	for _, o := range outcomes {
		switch o {
		case "uploaded":
			uploaded++
		case "skipped":
		default:
			t.Errorf("outcome %q", o)
		}
	}
	if uploaded < 1 {
		t.Fatalf("outcomes %v", outcomes)
	}
	client := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	l, err := client.List(context.Background(), connect.NewRequest(&debuginfov1.ListRequest{}))
	if err != nil || len(l.Msg.Debuginfos) != 1 || l.Msg.Debuginfos[0].State != debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE {
		t.Fatalf("after concurrent uploads: %v %v", l, err)
	}
}

func TestRequireReadToken(t *testing.T) {
	r := start(t, "--require-read-token")
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	req := connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: "ab"}}})
	if _, err := client.Symbolize(context.Background(), req); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("read without token = %v", err)
	}
	bearer(req)
	if _, err := client.Symbolize(context.Background(), req); err != nil {
		t.Fatalf("read with token = %v", err)
	}
	if code, _ := testsupport.Get(t, r.url+"/buildid/abcd/debuginfo"); code != 401 {
		t.Fatalf("debuginfod path without token = %d", code)
	}
}

func sha256Hex(b []byte) string {
	return fmt.Sprintf("%x", sha256Sum(b))
}

// A client that reserved an upload and crashed before its PUT completed runs again: the CLI
// gets the same live upload back and finishes it. --dry-run changes nothing.
func TestCLIResumesAfterCrashAndDryRun(t *testing.T) {
	r := start(t)
	bin := compile(t, "-g")
	data, _ := os.ReadFile(bin.path)

	var out bytes.Buffer
	dry := &uploadcli.UploadCmd{Conn: uploadcli.Conn{Server: r.url, Token: token, Timeout: time.Minute},
		Paths: []string{bin.path}, Parallel: 1, Source: "ci", Type: "auto", Retries: 1, Progress: "plain", DryRun: true, Out: &out, Err: io.Discard}
	res, err := dry.Upload(context.Background())
	if err != nil || res[0].Outcome != "would-upload" {
		t.Fatalf("dry run = %+v, %v", res, err)
	}

	client := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	req := connect.NewRequest(&debuginfov1.InitiateUploadRequest{BuildId: bin.ids.GNU, BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU,
		Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO, Sha256: sha256Hex(data), Size: uint64(len(data)), Source: debuginfov1.UploadSource_UPLOAD_SOURCE_CI})
	bearer(req)
	first, err := client.InitiateUpload(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// The crashed PUT: half the body, then the connection drops.
	pr, pw := io.Pipe()
	go func() {
		_, err := pw.Write(data[:len(data)/2])
		// The connection drops after half the body, also when the transport gave up earlier.
		pw.CloseWithError(errors.Join(errors.New("client crashed"), err))
	}()
	put, err := http.NewRequestWithContext(t.Context(), http.MethodPut, first.Msg.UploadUrl, pr)
	if err != nil {
		t.Fatal(err)
	}
	put.ContentLength = int64(len(data))
	put.Header.Set("Authorization", "Bearer "+token)
	if resp, err := http.DefaultClient.Do(put); err == nil {
		defer resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("a truncated PUT was accepted")
		}
	}
	if _, err := client.Get(context.Background(), connect.NewRequest(&debuginfov1.GetRequest{BuildId: bin.ids.GNU})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a half upload is visible: %v", err)
	}

	res = upload(t, r.url, bin.path)
	if res[0].Outcome != "uploaded" {
		t.Fatalf("resumed upload = %+v", res[0])
	}
	l, err := client.List(context.Background(), connect.NewRequest(&debuginfov1.ListRequest{}))
	if err != nil || len(l.Msg.Debuginfos) != 1 || l.Msg.Debuginfos[0].Sha256 != sha256Hex(data) {
		t.Fatalf("after resume: %v %v", l, err)
	}
}

func TestReadinessFollowsTheStore(t *testing.T) {
	store := t.TempDir()
	r := start(t, "--store-dir", store)
	conn, err := grpc.NewClient(strings.TrimPrefix(r.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := func(wantHTTP int, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		if code, _ := testsupport.Get(t, r.url+"/readyz"); code != wantHTTP {
			t.Fatalf("/readyz = %d, want %d", code, wantHTTP)
		}
		hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil || hc.Status != want {
			t.Fatalf("grpc health = %v %v, want %v", hc, err, want)
		}
	}
	check(200, healthpb.HealthCheckResponse_SERVING)
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	check(503, healthpb.HealthCheckResponse_NOT_SERVING)
	if code, _ := testsupport.Get(t, r.url+"/healthz"); code != 200 {
		t.Fatalf("/healthz with the store gone: %d", code)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
