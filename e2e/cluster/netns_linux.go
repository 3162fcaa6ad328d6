package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` keeps the bind mounts that name network namespaces.
const netnsDir = "/run/netns"

// createNetns creates the named network namespace with `ip netns add`, brings its loopback up
// and gives it the node's interface: a bridge with no port (the kernel here has no dummy
// interfaces), carrying the node address and the default route. Every address the cluster
// uses (node, pods, Services) lives in the namespace only, and a packet to any other address
// goes to that bridge, which has nowhere to send it, so nothing leaves the machine. The route
// also lets a local client's packet to a Service address leave the routing stage, where
// kube-proxy's rules rewrite it to a pod's.
func createNetns(ctx context.Context, name, nodeCIDR string) error {
	steps := [][]string{
		{"netns", "add", name},
		{"-n", name, "link", "set", "lo", "up"},
		{"-n", name, "link", "add", nodeInterface, "type", "bridge"},
		{"-n", name, "addr", "add", nodeCIDR, "dev", nodeInterface},
		{"-n", name, "link", "set", nodeInterface, "up"},
		{"-n", name, "route", "add", "default", "dev", nodeInterface},
	}
	for _, args := range steps {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// deleteNetns deletes the named network namespace (and with it its interfaces, routes and
// iptables rules once no process and no mount holds it). A namespace that is not there is no
// error.
func deleteNetns(ctx context.Context, name string) error {
	if _, err := os.Stat(netnsPath(name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns delete %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func netnsPath(name string) string { return filepath.Join(netnsDir, name) }

// Dialer opens connections from inside a network namespace, for clients in this process
// (client-go, a DNS resolver, an HTTP client) that must reach the cluster's addresses.
//
// A socket belongs to the network namespace of the thread that created it, for its whole
// life. So each dial runs on a goroutine of its own that locks itself to its OS thread, moves
// that thread into the namespace with setns(2) and creates the socket there; the goroutine
// then returns without unlocking, which makes the Go runtime end the thread rather than reuse
// it, so no other goroutine ever runs in the cluster's namespace by accident and nothing has
// to be restored. net.Dialer creates the socket on the calling goroutine when it dials a
// literal IP address (no name lookup, no dual-stack race), which is what the cluster's
// clients dial.
type Dialer struct {
	path string
}

// NewDialer returns a Dialer into the network namespace at path (e.g. /run/netns/NAME).
func NewDialer(path string) (*Dialer, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	return &Dialer{path: path}, nil
}

// DialContext dials addr (a literal IP and port) inside the namespace.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s in %s: %w", addr, d.path, err)
	}
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("dial %s in %s: not an IP address (names are resolved with the cluster's DNS, not here)", addr, d.path)
	}
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: see the type's comment.
		runtime.LockOSThread()
		fd, err := unix.Open(d.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{err: fmt.Errorf("open %s: %w", d.path, err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		_ = unix.Close(fd)
		if err != nil {
			done <- result{err: fmt.Errorf("setns %s: %w", d.path, err)}
			return
		}
		var nd net.Dialer
		conn, err := nd.DialContext(ctx, network, addr)
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// Listen listens on addr (a literal IP of the namespace, e.g. NodeIP, and a port) inside the
// namespace, for a server in this process that the pods reach: the socket is created on a
// thread moved into the namespace, as DialContext's are.
func (d *Dialer) Listen(network, addr string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: see the type's comment.
		runtime.LockOSThread()
		fd, err := unix.Open(d.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{err: fmt.Errorf("open %s: %w", d.path, err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		_ = unix.Close(fd)
		if err != nil {
			done <- result{err: fmt.Errorf("setns %s: %w", d.path, err)}
			return
		}
		var lc net.ListenConfig
		l, err := lc.Listen(context.Background(), network, addr)
		if err != nil {
			err = fmt.Errorf("listen on %s in %s: %w", addr, d.path, err)
		}
		done <- result{l, err}
	}()
	r := <-done
	return r.l, r.err
}

// Resolver returns a resolver that asks the DNS server at server (ip:port) inside the
// namespace, whatever /etc/resolv.conf says.
func (d *Dialer) Resolver(server string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, server)
		},
	}
}
