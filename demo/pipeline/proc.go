package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/profsym/profsym/pkg/freeport"
	"github.com/profsym/profsym/pkg/procstat"
)

// Proc is a child process in its own process group, with stdout and stderr in a log file.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // valid once done is closed

	stopOnce sync.Once
}

// Start starts bin with args; its output goes to logPath (created or truncated).
func Start(name, logPath, bin string, args ...string) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	// Not bound to a context: Stop ends the child in order (SIGTERM, grace, SIGKILL), which a
	// canceled context would cut short with an immediate SIGKILL.
	cmd := exec.CommandContext(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own group: the terminal's Ctrl-C goes to the parent only, which stops children in
	// order; Pdeathsig ends a child whose parent was killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the child's process ID (and its process group ID).
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed when the child has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the child's exit error; call it after Done.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Exited reports whether the child has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends sig to the child's process group and waits up to grace for it to exit, then
// kills the group. It returns the exit error unless the child ended because of sig or the
// kill. Calling it again only waits.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) error {
	killed := false
	p.stopOnce.Do(func() {
		if p.Exited() {
			return
		}
		_ = syscall.Kill(-p.PID(), sig)
		select {
		case <-p.done:
		case <-time.After(grace):
			killed = true
			_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
			<-p.done
		}
	})
	<-p.done
	// Whatever else is still in the group (a child's own children) goes too.
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	if killed {
		return fmt.Errorf("%s did not stop within %v after %v; killed", p.Name, grace, sig)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && (ws.Signal() == sig || ws.Signal() == syscall.SIGKILL) {
			return nil
		}
	}
	return p.err
}

// Tail returns the last n lines of the child's log.
func (p *Proc) Tail(n int) string { return TailFile(p.LogPath, n) }

// TailFile returns the last n lines of a file, or a note why it cannot be read.
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	const maxTail = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	off := max(st.Size()-maxTail, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, maxTail))
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitReady polls url until it answers 200, p exits, or ctx ends.
func WaitReady(ctx context.Context, p *Proc, url string) error {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("%s readiness: %w", p.Name, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		select {
		case <-p.Done():
			exitErr := p.Err()
			if exitErr == nil {
				exitErr = errors.New("exit status 0")
			}
			return fmt.Errorf("%s exited before it was ready (%w); last log lines:\n%s", p.Name, exitErr, p.Tail(15))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s (%s): %w", p.Name, url, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// StartService starts a service on fresh loopback ports and waits until readyURL answers.
// args gets the ports it asked for; when the service exits before it is ready (another
// process took a port in between), it is started again on new ports, up to three times.
func StartService(ctx context.Context, name, logPath, bin string, nports int, timeout time.Duration,
	args func(ports []int) (argv []string, readyURL string)) (*Proc, []int, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := freeport.Ports(nports)
		if err != nil {
			return nil, nil, err
		}
		argv, ready := args(ports)
		p, err := Start(name, logPath, bin, argv...)
		if err != nil {
			return nil, nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		err = WaitReady(rctx, p, ready)
		cancel()
		if err == nil {
			return p, ports, nil
		}
		_ = p.Stop(syscall.SIGTERM, 3*time.Second)
		lastErr = err
		if ctx.Err() != nil || !strings.Contains(p.Tail(30), "address already in use") {
			break
		}
	}
	return nil, nil, lastErr
}

// ModuleRoot returns the directory of profsym's go.mod, searched upwards from the working
// directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/profsym/profsym\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the profsym checkout: run this from the repository (go.mod of github.com/profsym/profsym not found above the working directory)")
		}
		dir = parent
	}
}

// GoTool finds the go command: PATH first, then GOROOT (sudo often resets PATH to a list
// without the Go toolchain).
func GoTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	var candidates []string
	if r := os.Getenv("GOROOT"); r != "" {
		candidates = append(candidates, filepath.Join(r, "bin", "go"))
	}
	// The GOROOT this program was built with is the best remaining guess.
	if r := runtime.GOROOT(); r != "" { //nolint:staticcheck // deprecated for finding the running toolchain, which is what is wanted here
		candidates = append(candidates, filepath.Join(r, "bin", "go"))
	}
	candidates = append(candidates, "/usr/local/go/bin/go")
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
			return c, nil
		}
	}
	return "", errors.New("the go command is not in PATH nor in GOROOT; install Go or run with PATH set (sudo env PATH=\"$PATH\" make demo)")
}

// Binaries are the paths of the three service executables.
type Binaries struct {
	Symbolizer, Gateway, Collector string
}

// BuildServices builds the three services of the repository at root into dir: the symbolizer
// and the collector from the root module, the gateway (a Go module of its own, an
// OpenTelemetry Collector distribution) from its directory. The go commands run in their own
// process group and are killed when ctx ends.
func BuildServices(ctx context.Context, root, dir string) (Binaries, error) {
	gotool, err := GoTool()
	if err != nil {
		return Binaries{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("binaries dir: %w", err)
	}
	builds := []struct{ dir, what string }{
		{root, "./services/symbolizer ./services/collector"},
		{filepath.Join(root, "services", "gateway"), "."},
	}
	for _, b := range builds {
		args := append([]string{"build", "-o", dir + string(filepath.Separator)}, strings.Fields(b.what)...)
		cmd := exec.CommandContext(ctx, gotool, args...)
		cmd.Dir = b.dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return Binaries{}, fmt.Errorf("go build: %w", ctx.Err())
			}
			return Binaries{}, fmt.Errorf("go build %s in %s: %w\n%s", b.what, b.dir, err, out.String())
		}
	}
	return Binaries{
		Symbolizer: filepath.Join(dir, "symbolizer"),
		Gateway:    filepath.Join(dir, "gateway"),
		Collector:  filepath.Join(dir, "collector"),
	}, nil
}

// RSS returns the resident set size of process pid in bytes (VmRSS), or 0 when it cannot be
// read (the process is gone).
func RSS(pid int) int64 { return procstat.Memory(pid, "VmRSS") }
