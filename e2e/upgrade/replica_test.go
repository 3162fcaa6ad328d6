package upgrade

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/testsupport"
)

// replica is one `symbolizer serve` process of a release.
type replica struct {
	name    string
	release string // the release's name in the drill: "earlier" or "current"
	url     string
	logPath string

	cmd    *exec.Cmd
	exited chan struct{}
	// inflight counts calls sent to it: a replica leaves the rotation, then its calls finish,
	// then it stops, as a Kubernetes rollout does with readiness and a grace period.
	inflight sync.WaitGroup
}

// startReplica runs bin serve with args on a free loopback port, logging JSON at info level
// into a file of dir, and waits for /readyz.
func startReplica(t *testing.T, bin, release, name, dir string, args ...string) *replica {
	t.Helper()
	r := &replica{name: name, release: release, logPath: filepath.Join(dir, name+".log")}
	logs, err := os.Create(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logs.Close() })
	for attempt := 0; ; attempt++ {
		port := testsupport.FreePort(t)
		r.url = fmt.Sprintf("http://127.0.0.1:%d", port)
		full := append([]string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--log-format", "json", "--log-level", "info",
			"--temp-dir", t.TempDir()}, args...)
		r.cmd = exec.CommandContext(t.Context(), bin, full...)
		r.cmd.Stdout, r.cmd.Stderr = logs, logs
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.exited = make(chan struct{})
		go func(cmd *exec.Cmd, exited chan struct{}) { _ = cmd.Wait(); close(exited) }(r.cmd, r.exited)
		if r.waitReady(t) {
			break
		}
		if attempt == 3 {
			t.Fatalf("%s (%s) did not start; its log:\n%s", name, release, tail(r.logPath))
		}
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

// waitReady waits for /readyz; false when the process exited (a port taken meanwhile).
func (r *replica) waitReady(t *testing.T) bool {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-r.exited:
			return false
		default:
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, r.url+"/readyz", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("%s not ready after 60 s; its log:\n%s", r.name, tail(r.logPath))
	return false
}

// stop sends SIGTERM and waits for the graceful exit.
func (r *replica) stop(t *testing.T) {
	if r.cmd == nil {
		return
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("terminate %s: %v", r.name, err)
	}
	select {
	case <-r.exited:
	case <-time.After(60 * time.Second):
		t.Errorf("%s still running 60 s after SIGTERM", r.name)
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
	r.cmd = nil
}

// indexBuilds counts the "index built" lines of the replica's log by build ID: the indexes it
// built because the store had none of its format (an upload's own index is built while the
// upload is verified, and not counted here).
func (r *replica) indexBuilds(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg     string `json:"msg"`
			BuildID string `json:"build_id"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "index built" {
			n[line.BuildID]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b[max(0, len(b)-6000):])
}
