package testsupport

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
)

// Toxiproxy is a toxiproxy server child process on 127.0.0.1: a TCP proxy whose links a test
// slows, cuts, resets or stalls through its API, to inject faults between real servers.
type Toxiproxy struct {
	t   testing.TB
	srv *server
}

// StartToxiproxy starts toxiproxy-server on a free loopback port and waits until its API
// answers. The binary is ${PROFSYM_TOOLS:-$HOME/.cache/profsym/bin}/toxiproxy-server, else
// toxiproxy-server in PATH.
func StartToxiproxy(t testing.TB) *Toxiproxy {
	t.Helper()
	bin := toxiproxyBinary(t)
	dir := t.TempDir()
	spec := launchSpec{
		name:  "toxiproxy-server",
		bin:   bin,
		ports: 1,
		args: func(ports []int) []string {
			return []string{"-host", "127.0.0.1", "-port", strconv.Itoa(ports[0])}
		},
		env: childEnv(nil),
		dir: dir,
		ready: func(ctx context.Context, ports []int) error {
			return httpStatus(ctx, "http://"+toxiproxyAddr(ports[0])+"/version", http.StatusOK)
		},
	}
	x := &Toxiproxy{t: t, srv: newServer(t, spec, dir)}
	took, err := x.srv.start()
	if err != nil {
		t.Fatalf("start toxiproxy-server: %v", err)
	}
	t.Logf("toxiproxy-server ready at %s in %v", x.Addr(), took.Round(1e6))
	return x
}

func toxiproxyAddr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// Addr returns host:port of the API.
func (x *Toxiproxy) Addr() string {
	x.srv.mu.Lock()
	defer x.srv.mu.Unlock()
	return toxiproxyAddr(x.srv.ports[0])
}

// Client returns an API client.
func (x *Toxiproxy) Client() *toxiproxy.Client { return toxiproxy.NewClient(x.Addr()) }

// Proxy creates a proxy named name from a free loopback port to upstream (host:port) and
// returns it; Listen holds the address clients dial instead of upstream.
func (x *Toxiproxy) Proxy(name, upstream string) *toxiproxy.Proxy {
	x.t.Helper()
	p, err := x.Client().CreateProxy(name, "127.0.0.1:0", upstream)
	if err != nil {
		x.t.Fatalf("toxiproxy: create proxy %s to %s: %v", name, upstream, err)
	}
	return p
}

func toxiproxyBinary(t testing.TB) string {
	t.Helper()
	const install = "install it with .ci/install-deps (go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0, renamed toxiproxy-server)"
	if dir := toolsDir(); dir != "" {
		path := filepath.Join(dir, "toxiproxy-server")
		if ok, err := isExecutable(path); err != nil {
			t.Fatalf("check %s: %v", path, err)
		} else if ok {
			return path
		}
	}
	return lookBinary(t, "toxiproxy-server", install)
}
