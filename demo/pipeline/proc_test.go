package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/freeport"
)

func TestProcStopKillsTheGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	// A shell that ignores SIGTERM and has a child of its own: Stop must kill both.
	p, err := Start("stubborn", filepath.Join(dir, "log"), "/bin/sh", "-c",
		`trap "" TERM; sleep 300 & echo $! > `+pidFile+`; echo started; wait`)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(pidFile); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("child never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	err = p.Stop(syscall.SIGTERM, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Stop = %v, want a note that it had to kill", err)
	}
	b, _ := os.ReadFile(pidFile)
	pid := strings.TrimSpace(string(b))
	// The grandchild is reaped by init shortly after the kill.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if st, err := os.ReadFile("/proc/" + pid + "/stat"); err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
	}
	t.Fatalf("grandchild %s survived Stop", pid)
}

func TestProcStopCleanExit(t *testing.T) {
	p, err := Start("sleeper", filepath.Join(t.TempDir(), "log"), "/bin/sleep", "300")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(syscall.SIGTERM, 5*time.Second); err != nil {
		t.Fatalf("Stop of a process that ends on SIGTERM = %v, want nil", err)
	}
	if !p.Exited() {
		t.Fatal("not exited after Stop")
	}
}

func TestWaitReadyReportsEarlyExit(t *testing.T) {
	dir := t.TempDir()
	p, err := Start("failing", filepath.Join(dir, "log"), "/bin/sh", "-c", "echo bind: address already in use; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = WaitReady(ctx, p, "http://127.0.0.1:"+strconv.Itoa(port)+"/readyz")
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("WaitReady = %v, want the early exit with the log's last lines", err)
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\nd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		n    int
		want string
	}{{2, "c\nd"}, {10, "a\nb\nc\nd"}}
	for _, tc := range tests {
		if got := TailFile(path, tc.n); got != tc.want {
			t.Errorf("TailFile(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := TailFile(filepath.Join(t.TempDir(), "missing"), 3); !strings.HasPrefix(got, "(") {
		t.Errorf("missing file: %q, want a note in parentheses", got)
	}
}
