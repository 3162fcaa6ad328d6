package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/alecthomas/kong"
	"google.golang.org/protobuf/encoding/protojson"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/testsupport"
)

// A symbolizer started with no address listens on loopback only, and says nothing about open
// reads there; every other default is covered by the tests that start one.
func TestListenDefaultsToLoopback(t *testing.T) {
	var cli struct {
		Serve Config `cmd:""`
	}
	p, err := kong.New(&cli, kong.Exit(func(int) { t.Fatal("kong exit") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse([]string{"serve"}); err != nil {
		t.Fatal(err)
	}
	if cli.Serve.Listen != "127.0.0.1:7070" || !loopbackOnly(cli.Serve.Listen) {
		t.Fatalf("default --listen = %q", cli.Serve.Listen)
	}
	if cli.Serve.MetricsListen != "" {
		t.Fatalf("default --metrics-listen = %q", cli.Serve.MetricsListen)
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "[::1]:7070": true, "localhost:7070": true,
		":7070": false, "0.0.0.0:7070": false, "10.0.0.1:7070": false, "[::]:7070": false, "bad": false,
	} {
		if got := loopbackOnly(addr); got != want {
			t.Errorf("loopbackOnly(%q) = %v", addr, got)
		}
	}
}

// authGet is a GET with an optional bearer token.
func authGet(t *testing.T, url, tok string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
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
	resp.Body.Close()
	return resp.StatusCode
}

// With a read token configured every read needs a read or an upload token, a read token does
// not write, and /metrics on the API port is a read.
func TestReadTokens(t *testing.T) {
	const reader = "test-read-token"
	r := start(t, "--read-token", reader)
	ctx := context.Background()
	sym := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	di := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	with := func(req interface{ Header() http.Header }, tok string) {
		if tok != "" {
			req.Header().Set("Authorization", "Bearer "+tok)
		}
	}
	for _, tc := range []struct {
		tok  string
		want connect.Code // 0: accepted
	}{
		{"", connect.CodeUnauthenticated},
		{"wrong", connect.CodePermissionDenied},
		{reader, 0},
		{token, 0},
	} {
		req := connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: "ab"}}})
		with(req, tc.tok)
		_, err := sym.Symbolize(ctx, req)
		if codeOf(err) != tc.want {
			t.Errorf("Symbolize with %q = %v, want %v", tc.tok, err, tc.want)
		}
		list := connect.NewRequest(&debuginfov1.ListRequest{})
		with(list, tc.tok)
		_, err = di.List(ctx, list)
		if codeOf(err) != tc.want {
			t.Errorf("List with %q = %v, want %v", tc.tok, err, tc.want)
		}
		get := connect.NewRequest(&debuginfov1.GetRequest{BuildId: "abcd"})
		with(get, tc.tok)
		_, err = di.Get(ctx, get)
		if want := tc.want; want == 0 && codeOf(err) != connect.CodeNotFound || want != 0 && codeOf(err) != want {
			t.Errorf("Get with %q = %v, want %v (0: not found)", tc.tok, err, tc.want)
		}
	}
	// A read token is no write token.
	su := connect.NewRequest(&debuginfov1.ShouldUploadRequest{BuildId: "abcd"})
	with(su, reader)
	if _, err := di.ShouldUpload(ctx, su); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("ShouldUpload with the read token = %v", err)
	}
	for path, open := range map[string]int{"/buildid/abcd/debuginfo": 404, "/buildid/abcd/executable": 404, "/metrics": 200, "/ui/": 200} {
		if code := authGet(t, r.url+path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token = %d", path, code)
		}
		if code := authGet(t, r.url+path, "wrong"); code != http.StatusForbidden {
			t.Errorf("GET %s with a wrong token = %d", path, code)
		}
		for _, tok := range []string{reader, token} {
			if code := authGet(t, r.url+path, tok); code != open {
				t.Errorf("GET %s with %q = %d, want %d", path, tok, code, open)
			}
		}
	}
	// Probes stay open: the kubelet carries no token.
	for _, path := range []string{"/healthz", "/readyz"} {
		if code := authGet(t, r.url+path, ""); code != 200 {
			t.Errorf("GET %s = %d", path, code)
		}
	}
}

// --metrics-listen moves /metrics to a port of its own, open there and gone from the API port.
func TestMetricsListen(t *testing.T) {
	port := testsupport.FreePort(t)
	r := start(t, "--read-token", "r", "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", port))
	if code := authGet(t, r.url+"/metrics", "r"); code != http.StatusNotFound {
		t.Errorf("/metrics on the API port = %d", code)
	}
	code, body := testsupport.Get(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if code != 200 || len(body) == 0 {
		t.Fatalf("/metrics on its own port = %d (%d bytes)", code, len(body))
	}
	// Only metrics there: nothing of the store.
	if code, _ := testsupport.Get(t, fmt.Sprintf("http://127.0.0.1:%d/buildid/abcd/debuginfo", port)); code != http.StatusNotFound {
		t.Errorf("debuginfod path on the metrics port = %d", code)
	}
}

// codeOf is connect.CodeOf with 0 for no error.
func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

// A writer cannot make List show a text of its choosing as a Go build ID: a Go program linked
// with -buildid=<any text> uploads (under its other IDs) but that string is no ID of it.
func TestPlantedGoBuildIDIsNotListed(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module planted\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { println(1) }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const planted = "Planted_by-a-writer/visit-example-com"
	bin := filepath.Join(dir, "prog")
	cmd := exec.CommandContext(t.Context(), goCmd, "build", "-o", bin, "-ldflags=-buildid="+planted, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	r := start(t)
	res := upload(t, r.url, bin)
	if res[0].Err != nil {
		t.Fatalf("upload: %v", res[0].Err)
	}
	client := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	l, err := client.List(t.Context(), connect.NewRequest(&debuginfov1.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Msg.Debuginfos) == 0 {
		t.Fatal("nothing listed after the upload")
	}
	text, err := protojson.Marshal(l.Msg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(text), "Planted") {
		t.Fatalf("List shows the planted Go build ID: %s", text)
	}
	for _, d := range l.Msg.Debuginfos {
		for _, id := range d.Ids {
			if id.Type == debuginfov1.BuildIDType_BUILD_ID_TYPE_GO {
				t.Errorf("a Go build ID was recorded: %v", id)
			}
		}
	}
}
