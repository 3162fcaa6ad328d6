package testsupport

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
)

// Redis is a redis-server child process listening on 127.0.0.1. It keeps
// nothing on disk, so Restart gives an empty database on the same address.
type Redis struct {
	t   testing.TB
	srv *server
}

// StartRedis starts redis-server on a free loopback port and waits until it
// answers PING. The server is stopped when the test ends.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	return startRedis(t, "")
}

// StartRedisWithPassword starts redis-server like StartRedis, requiring password from every
// client (requirepass), as a managed production Redis does.
func StartRedisWithPassword(t testing.TB, password string) *Redis {
	t.Helper()
	return startRedis(t, password)
}

func startRedis(t testing.TB, password string) *Redis {
	t.Helper()
	bin := lookBinary(t, "redis-server", aptHint("redis-server"))
	dir := t.TempDir()
	spec := launchSpec{
		name:  "redis-server",
		bin:   bin,
		ports: 1,
		args: func(ports []int) []string {
			args := []string{
				"--bind", "127.0.0.1",
				"--port", strconv.Itoa(ports[0]),
				"--save", "",
				"--appendonly", "no",
				"--dir", dir,
			}
			if password != "" {
				args = append(args, "--requirepass", password)
			}
			return args
		},
		env:   childEnv(nil),
		dir:   dir,
		ready: func(ctx context.Context, ports []int) error { return redisPing(ctx, redisAddr(ports[0]), password) },
	}
	r := &Redis{t: t, srv: newServer(t, spec, dir)}
	took, err := r.srv.start()
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Logf("redis-server ready at %s in %v", r.Addr(), took.Round(1e6))
	return r
}

// Addr returns host:port of the server.
func (r *Redis) Addr() string {
	r.srv.mu.Lock()
	defer r.srv.mu.Unlock()
	return redisAddr(r.srv.ports[0])
}

// URL returns the redis:// URL of database 0, as go-redis ParseURL takes it.
func (r *Redis) URL() string {
	return "redis://" + r.Addr() + "/0"
}

// Stop stops the server; clients see connection errors until Restart.
func (r *Redis) Stop() {
	r.t.Helper()
	if err := r.srv.stop(); err != nil {
		r.t.Fatalf("stop redis-server: %v", err)
	}
}

// Restart stops the server if it runs and starts it again on the same port,
// which is what a client sees when Redis restarts in production.
func (r *Redis) Restart() {
	r.t.Helper()
	took, err := r.srv.restart()
	if err != nil {
		r.t.Fatalf("restart redis-server: %v", err)
	}
	r.t.Logf("redis-server restarted at %s in %v", r.Addr(), took.Round(1e6))
}

func redisAddr(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// redisPing speaks just enough RESP to know the server accepts commands;
// a listening socket alone is not enough while Redis loads.
func redisPing(ctx context.Context, addr, password string) (err error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := conn.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close PING connection: %w", cerr)
		}
	}()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return err
		}
	}
	rd := bufio.NewReaderSize(conn, 256)
	if password != "" {
		// The inline protocol splits on spaces: a password with one would need RESP arrays,
		// which tests do not use.
		if _, err := conn.Write([]byte("AUTH " + password + "\r\n")); err != nil {
			return fmt.Errorf("send AUTH: %w", err)
		}
		line, err := rd.ReadString('\n')
		if err != nil {
			return fmt.Errorf("read AUTH reply: %w", err)
		}
		if reply := strings.TrimSpace(line); reply != "+OK" {
			return fmt.Errorf("AUTH answered %q", reply)
		}
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return fmt.Errorf("send PING: %w", err)
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read PING reply: %w", err)
	}
	if reply := strings.TrimSpace(line); reply != "+PONG" {
		return fmt.Errorf("PING answered %q", reply)
	}
	return nil
}
