package testsupport

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Debuginfod is an elfutils debuginfod child process serving the ELF files
// under some directories. It binds every address; use URL, which names the
// IPv4 loopback.
type Debuginfod struct {
	t   testing.TB
	srv *server
}

// StartDebuginfod starts debuginfod scanning dirs for ELF/DWARF files and
// waits until its HTTP server answers. Scanning is asynchronous: use
// WaitForBuildID before expecting a file to be served. The directories are
// rescanned every second, so files written after the start are found too.
func StartDebuginfod(t testing.TB, dirs ...string) *Debuginfod {
	t.Helper()
	bin := lookBinary(t, "debuginfod", aptHint("debuginfod"))
	dir := t.TempDir()
	abs := make([]string, len(dirs))
	for i, d := range dirs {
		a, err := filepath.Abs(d)
		if err != nil {
			t.Fatalf("debuginfod directory %s: %v", d, err)
		}
		abs[i] = a
	}
	spec := launchSpec{
		name:  "debuginfod",
		bin:   bin,
		ports: 1,
		args: func(ports []int) []string {
			// -t 1: rescan every second so fixtures written after the
			// start are found; -g 0: no grooming, the database dies with
			// the test.
			return append([]string{
				"-F",
				"-p", strconv.Itoa(ports[0]),
				"-d", filepath.Join(dir, "db.sqlite"),
				"-t", "1",
				"-g", "0",
			}, abs...)
		},
		// A debuginfod server forwards misses to DEBUGINFOD_URLS (Debian
		// sets it system-wide); a test server must answer only from dirs.
		env: childEnv(func(key string) bool { return strings.HasPrefix(key, "DEBUGINFOD_") }),
		dir: dir,
		ready: func(ctx context.Context, ports []int) error {
			return httpStatus(ctx, debuginfodURL(ports[0])+"/metrics", http.StatusOK)
		},
	}
	d := &Debuginfod{t: t, srv: newServer(t, spec, dir)}
	took, err := d.srv.start()
	if err != nil {
		t.Fatalf("start debuginfod: %v", err)
	}
	t.Logf("debuginfod ready at %s in %v", d.URL(), took.Round(1e6))
	return d
}

// URL returns the server's base URL (http://127.0.0.1:PORT), as
// DEBUGINFOD_URLS takes it.
func (d *Debuginfod) URL() string {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	return debuginfodURL(d.srv.ports[0])
}

// Stop stops the server.
func (d *Debuginfod) Stop() {
	d.t.Helper()
	if err := d.srv.stop(); err != nil {
		d.t.Fatalf("stop debuginfod: %v", err)
	}
}

// WaitForBuildID polls GET /buildid/<id>/debuginfo until the server has
// indexed the build ID, failing the test after timeout. id is hex; it is
// lower-cased because debuginfod answers upper-case IDs with 503. GET is used
// because debuginfod answers HEAD with 400.
func (d *Debuginfod) WaitForBuildID(t testing.TB, id string, timeout time.Duration) {
	t.Helper()
	id = strings.ToLower(id)
	if err := checkBuildID(id); err != nil {
		t.Fatalf("wait for build ID: %v", err)
	}
	url := d.URL() + "/buildid/" + id + "/debuginfo"
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	begin := time.Now()
	var last error
	for {
		last = fetchStatus(ctx, url)
		if last == nil {
			t.Logf("debuginfod serves %s after %v", id, time.Since(begin).Round(time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("debuginfod did not serve build ID %s within %v: %v", id, timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func debuginfodURL(port int) string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func checkBuildID(id string) error {
	if id == "" || len(id)%2 != 0 {
		return fmt.Errorf("build ID %q: want an even number of hex digits", id)
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("build ID %q: %q is not a hex digit", id, c)
		}
	}
	return nil
}

// fetchStatus does one GET, draining the body so the connection is reused,
// and wants 200.
func fetchStatus(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("GET %s: read body: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return nil
}
