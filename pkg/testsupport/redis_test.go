package testsupport

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestRedisSetGetAndRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := StartRedis(t)

	opts, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatalf("parse %s: %v", r.URL(), err)
	}
	if opts.Addr != r.Addr() || opts.DB != 0 {
		t.Fatalf("URL %s parses to addr %s db %d, want %s db 0", r.URL(), opts.Addr, opts.DB, r.Addr())
	}
	opts.MaxRetries = -1 // the test wants to see the outage, not hide it
	c := redis.NewClient(opts)
	defer c.Close()

	if err := c.Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v1" {
		t.Fatalf("GET = %q, %v; want v1", got, err)
	}

	addr := r.Addr()
	pid := r.srv.cur.cmd.Process.Pid
	r.Stop()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("redis-server pid %d still exists after Stop (kill 0: %v)", pid, err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatalf("PING succeeded while redis-server was stopped")
	}

	r.Restart()
	if r.Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, r.Addr())
	}
	// Nothing is persisted: the restarted server is empty.
	if _, err := c.Get(ctx, "k").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after restart: %v, want redis.Nil", err)
	}
	if err := c.Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatalf("SET after restart: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v2" {
		t.Fatalf("GET after restart = %q, %v; want v2", got, err)
	}

	// Restart of a running server works too.
	r.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		// The pooled connection died with the old process; one retry on a
		// fresh connection must work.
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING after second restart: %v", err)
		}
	}
}

// A port taken between choosing and binding makes the attempt fail with
// errAddrInUse, and start moves on to a fresh port.
func TestPortRaceRetries(t *testing.T) {
	t.Parallel()
	var lc net.ListenConfig
	held, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldPort := held.Addr().(*net.TCPAddr).Port

	bin := lookBinary(t, "redis-server", aptHint("redis-server"))
	dir := t.TempDir()
	attempts := 0
	var usedPort int
	spec := launchSpec{
		name:  "redis-server",
		bin:   bin,
		ports: 1,
		args: func(ports []int) []string {
			attempts++
			usedPort = ports[0]
			if attempts == 1 {
				usedPort = heldPort
			}
			return []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(usedPort), "--save", "", "--appendonly", "no", "--dir", dir}
		},
		env: childEnv(nil),
		dir: dir,
		ready: func(ctx context.Context, ports []int) error {
			return redisPing(ctx, redisAddr(usedPort), "")
		},
	}
	srv := newServer(t, spec, dir)
	if _, err := srv.startOn([]int{heldPort}); !errors.Is(err, errAddrInUse) {
		t.Fatalf("start on a held port: %v, want errAddrInUse", err)
	}
	attempts = 0
	if _, err := srv.start(); err != nil {
		t.Fatalf("start with one lost race: %v", err)
	}
	if attempts != 2 {
		t.Fatalf("start made %d attempts, want 2", attempts)
	}
}

// A Redis started with a password refuses clients without it, as the production Redis the
// deploy tests stand in for does.
func TestRedisWithPassword(t *testing.T) {
	r := StartRedisWithPassword(t, "test-redis-password")
	if err := redisPing(t.Context(), r.Addr(), "test-redis-password"); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
	if err := redisPing(t.Context(), r.Addr(), ""); err == nil {
		t.Fatal("PING without the password was answered")
	}
}
