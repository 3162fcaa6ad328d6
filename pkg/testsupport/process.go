package testsupport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/freeport"
)

const (
	// startTimeout bounds one start attempt; MinIO on a busy shared CI
	// machine is the slowest server and is normally ready in about a second.
	startTimeout = 30 * time.Second
	// portAttempts is how many fresh ports are tried when another process
	// takes the chosen port between FreePort and the server's bind.
	portAttempts = 5
	// stopGrace is how long a server may take to exit after SIGTERM
	// before it is killed.
	stopGrace = 10 * time.Second
	// logTailLines is how much of a server log is printed for a failed test.
	logTailLines = 50
	// pollInterval is the readiness polling period.
	pollInterval = 20 * time.Millisecond
)

// launchSpec describes how to run one kind of server.
type launchSpec struct {
	name  string // shown in messages and used for the log file name
	bin   string // resolved executable path
	ports int    // how many TCP ports the server needs
	args  func(ports []int) []string
	env   []string // complete environment of the child
	dir   string   // working directory of the child
	// ready reports nil once the server answers requests on its ports.
	ready func(ctx context.Context, ports []int) error
}

// proc is one running child process.
type proc struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed when Wait returned
	waitErr error         // valid after done is closed
}

// server is the machinery shared by all server kinds: a log file that lives
// across restarts, the current process and its ports.
type server struct {
	t       testing.TB
	spec    launchSpec
	logPath string

	mu    sync.Mutex
	cur   *proc
	ports []int
}

// errAddrInUse marks a start attempt that lost the race for its port.
var errAddrInUse = errors.New("address already in use")

// newServer registers the log dump and the final stop with t. It must be
// called after the first t.TempDir() of the server so that the cleanups,
// which run last-in first-out, stop the process before its directory is
// removed.
func newServer(t testing.TB, spec launchSpec, logDir string) *server {
	t.Helper()
	s := &server{
		t:       t,
		spec:    spec,
		logPath: logDir + "/" + spec.name + ".log",
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last %d lines of %s log (%s):\n%s", logTailLines, spec.name, s.logPath, tailFile(s.logPath, logTailLines))
		}
	})
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("stop %s: %v", spec.name, err)
		}
	})
	return s
}

// start runs the server on fresh ports, retrying with other ports when the
// chosen ones were taken meanwhile.
func (s *server) start() (time.Duration, error) {
	var lastErr error
	for attempt := 1; attempt <= portAttempts; attempt++ {
		ports, err := freeport.Ports(s.spec.ports)
		if err != nil {
			return 0, err
		}
		d, err := s.startOn(ports)
		if err == nil {
			return d, nil
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("start %s: gave up after %d port attempts: %w", s.spec.name, portAttempts, lastErr)
}

// restart starts the server again on the ports it had. A port that is busy
// right after the stop is retried briefly, because the old process may not
// have released it yet on a loaded machine.
func (s *server) restart() (time.Duration, error) {
	if err := s.stop(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	ports := append([]int(nil), s.ports...)
	s.mu.Unlock()
	if len(ports) == 0 {
		return 0, fmt.Errorf("restart %s: it was never started", s.spec.name)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := s.startOn(ports)
		if err == nil || !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			return d, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startOn makes one attempt on the given ports and waits for readiness.
func (s *server) startOn(ports []int) (time.Duration, error) {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("open %s log: %w", s.spec.name, err)
	}
	// The attempt's own output starts here; it decides whether a failed
	// attempt lost a port race.
	offset, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		logFile.Close()
		return 0, fmt.Errorf("seek %s log: %w", s.spec.name, err)
	}
	args := s.spec.args(ports)
	fmt.Fprintf(logFile, "=== %s\n", commandLine(s.spec.bin, args))

	// Not bound to a context: stop ends the server in order (SIGTERM to its
	// group, grace, SIGKILL), which a canceled context would cut short.
	cmd := exec.CommandContext(context.Background(), s.spec.bin, args...)
	cmd.Env = s.spec.env
	cmd.Dir = s.spec.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = childSysProcAttr()
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return 0, fmt.Errorf("start %s: %w", s.spec.name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	s.mu.Lock()
	s.cur = p
	s.ports = ports
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var readyErr error
	for {
		select {
		case <-p.done:
			out := readFrom(s.logPath, offset)
			exitErr := p.waitErr
			if exitErr == nil {
				exitErr = errors.New("exit status 0")
			}
			err := fmt.Errorf("%s exited before it was ready (%w); output:\n%s", s.spec.name, exitErr, lastLines(out, logTailLines))
			if bytes.Contains(bytes.ToLower(out), []byte("already in use")) {
				err = fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return 0, err
		default:
		}
		owned, err := ownsListener(cmd.Process.Pid, ports[0])
		switch {
		case err != nil:
			readyErr = err
		case !owned:
			readyErr = fmt.Errorf("%s (pid %d) does not listen on port %d yet", s.spec.name, cmd.Process.Pid, ports[0])
		default:
			checkCtx, checkCancel := context.WithTimeout(ctx, time.Second)
			readyErr = s.spec.ready(checkCtx, ports)
			checkCancel()
			if readyErr == nil {
				return time.Since(begin), nil
			}
		}
		select {
		case <-ctx.Done():
			stopErr := s.stop()
			return 0, errors.Join(fmt.Errorf("%s not ready after %v: %w", s.spec.name, startTimeout, readyErr), stopErr)
		case <-p.done:
		case <-time.After(pollInterval):
		}
	}
}

// kill ends the server with SIGKILL and waits for it.
func (s *server) kill() error {
	s.mu.Lock()
	p := s.cur
	s.cur = nil
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := signalGroup(p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL %s (pid %d): %w", s.spec.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopGrace):
		return fmt.Errorf("%s (pid %d) still running %v after SIGKILL", s.spec.name, p.cmd.Process.Pid, stopGrace)
	}
}

// stop ends the current process, if any: SIGTERM to its process group,
// SIGKILL after stopGrace. Calling it again is a no-op.
func (s *server) stop() error {
	s.mu.Lock()
	p := s.cur
	s.cur = nil
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	pid := p.cmd.Process.Pid
	if err := signalGroup(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGTERM %s (pid %d): %w", s.spec.name, pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopGrace):
	}
	if err := signalGroup(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL %s (pid %d): %w", s.spec.name, pid, err)
	}
	select {
	case <-p.done:
		// Only third-party servers run here (Redis, MinIO, debuginfod, toxiproxy): how they
		// shut down is not under test, and Debian's debuginfod has been seen to ignore SIGTERM
		// for longer than the grace on a loaded machine. The kill is logged, not failed.
		s.t.Logf("%s (pid %d) ignored SIGTERM for %v and was killed", s.spec.name, pid, stopGrace)
		return nil
	case <-time.After(stopGrace):
		return fmt.Errorf("%s (pid %d) still running %v after SIGKILL", s.spec.name, pid, stopGrace)
	}
}

// readFrom returns the log from offset on, bounded so that a runaway log
// cannot exhaust memory.
func readFrom(path string, offset int64) []byte {
	const limit = 1 << 20
	f, err := os.Open(path)
	if err != nil {
		return []byte(fmt.Sprintf("(cannot read log: %v)", err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return []byte(fmt.Sprintf("(cannot stat log: %v)", err))
	}
	if st.Size()-offset > limit {
		offset = st.Size() - limit
	}
	b, err := io.ReadAll(io.NewSectionReader(f, offset, limit))
	if err != nil {
		return []byte(fmt.Sprintf("(cannot read log: %v)", err))
	}
	return b
}

// tailFile returns the last n lines of a log file.
func tailFile(path string, n int) string {
	const window = 64 << 10
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	offset := max(st.Size()-window, 0)
	return lastLines(readFrom(path, offset), n)
}

func lastLines(b []byte, n int) string {
	s := strings.TrimRight(string(b), "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// childEnv returns the test's environment without the variables for which
// drop reports true, plus extra.
func childEnv(drop func(key string) bool, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		key, _, _ := strings.Cut(kv, "=")
		if drop != nil && drop(key) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// commandLine renders a command so that it can be pasted into a shell to
// reproduce a failing start.
func commandLine(bin string, args []string) string {
	parts := []string{shellQuote(bin)}
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
