//go:build linux

package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MaxGuests is how many guests Boot runs at once on a machine, over all test processes
// (go test runs packages in parallel): each emulates 2 CPUs, and the machines the suite runs
// on have 2 cores.
const MaxGuests = 2

// slotDir holds the lock files of the guest slots: the machine's temporary directory, which
// every test process shares.
var slotDir = os.TempDir()

// acquireSlot waits for one of MaxGuests lock files in slotDir; release frees it (so does the
// process's end).
func acquireSlot(ctx context.Context) (release func(), err error) {
	for {
		for i := range MaxGuests {
			path := filepath.Join(slotDir, fmt.Sprintf("profsym-qemu-guest-%d.lock", i))
			f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
			if err != nil {
				return nil, fmt.Errorf("guest slot: %w", err)
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
				return func() { f.Close() }, nil
			}
			f.Close()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a guest slot: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Run is one boot of a guest under qemu.
type Run struct {
	Guest   *Guest // what the guest reported; nil when its console did not parse
	Console string // the whole serial console
	Took    time.Duration
	// Timeline says when each tag first appeared on the console, from qemu's start (boot,
	// collector ready, output written).
	Timeline string
}

// ErrDeadline is returned by Boot when the guest did not power off in time.
var ErrDeadline = errors.New("the guest did not power off in time")

// Boot runs qemu (the program and its arguments) until the guest powers off or deadline
// passes, and parses what the guest reported; it first waits until fewer than MaxGuests
// guests run on the machine (the deadline starts after). The Run comes back on error too, with the
// console for the failure's report.
func Boot(ctx context.Context, deadline time.Duration, qemu string, args ...string) (*Run, error) {
	release, err := acquireSlot(ctx)
	if err != nil {
		return &Run{}, err
	}
	defer release()
	qctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	cmd := exec.CommandContext(qctx, qemu, args...)
	console := newStampedConsole()
	cmd.Stdout, cmd.Stderr = console, console
	// qemu's -nographic console reads stdin: give it none.
	cmd.Stdin = nil
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	console.start = start
	err = cmd.Run()
	r := &Run{Console: console.String(), Took: time.Since(start), Timeline: console.timeline()}
	if qctx.Err() != nil {
		return r, fmt.Errorf("%w: not within %v", ErrDeadline, deadline)
	}
	if err != nil {
		return r, fmt.Errorf("qemu: %w", err)
	}
	g, err := ParseConsole(strings.NewReader(r.Console))
	if err != nil {
		return r, fmt.Errorf("guest console: %w", err)
	}
	r.Guest = g
	if !g.Done {
		return r, errors.New("the guest's /init did not reach its end")
	}
	return r, nil
}

// WithoutBase64 drops the output file's lines from a console for a log.
func WithoutBase64(console string) string {
	var b strings.Builder
	skipped := 0
	for line := range strings.Lines(console) {
		if strings.Contains(line, LinePrefix+"b64 ") {
			skipped++
			continue
		}
		b.WriteString(line)
	}
	if skipped > 0 {
		fmt.Fprintf(&b, "(%d lines of the base64 output file left out)\n", skipped)
	}
	return b.String()
}

// stampedConsole keeps the console and when each tag first appeared on it.
type stampedConsole struct {
	mu      sync.Mutex
	start   time.Time
	buf     strings.Builder
	partial []byte
	stamps  map[string]time.Duration
	order   []string
}

func newStampedConsole() *stampedConsole {
	return &stampedConsole{start: time.Now(), stamps: map[string]time.Duration{}}
}

func (c *stampedConsole) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		line := string(c.partial[:i])
		c.partial = c.partial[i+1:]
		if j := strings.Index(line, LinePrefix); j >= 0 {
			tag, _, _ := strings.Cut(strings.TrimRight(line[j+len(LinePrefix):], "\r"), " ")
			if _, ok := c.stamps[tag]; !ok {
				c.stamps[tag] = time.Since(c.start)
				c.order = append(c.order, tag)
			}
		}
	}
	return len(p), nil
}

func (c *stampedConsole) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func (c *stampedConsole) timeline() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, tag := range c.order {
		parts = append(parts, fmt.Sprintf("%s %v", tag, c.stamps[tag].Round(100*time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}
