package testsupport

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisCluster is a Redis Cluster of redis-server child processes on loopback ports, created
// as operators create one: `redis-cli --cluster create ... --cluster-replicas N --cluster-yes`.
// Once created, its node timeout is short (1 s), so a killed master's replica takes over
// within seconds.
type RedisCluster struct {
	t       testing.TB
	cli     string // redis-cli
	nodes   []*server
	masters int
}

// StartRedisCluster starts masters*(1+replicasPerMaster) nodes, creates the cluster and waits
// until every slot is served and every replica has synced with its master. The nodes stop
// when the test ends.
func StartRedisCluster(t testing.TB, masters, replicasPerMaster int) *RedisCluster {
	t.Helper()
	bin := lookBinary(t, "redis-server", aptHint("redis-server"))
	cli := lookBinary(t, "redis-cli", aptHint("redis-tools"))
	c := &RedisCluster{t: t, cli: cli, masters: masters}
	n := masters * (1 + replicasPerMaster)
	for i := range n {
		dir := t.TempDir()
		spec := launchSpec{
			name:  fmt.Sprintf("redis-cluster-node-%d", i),
			bin:   bin,
			ports: 2, // clients, cluster bus
			args: func(ports []int) []string {
				return []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(ports[0]),
					"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(ports[1]),
					"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "15000",
					"--save", "", "--appendonly", "no", "--dir", dir}
			},
			env:   childEnv(nil),
			dir:   dir,
			ready: func(ctx context.Context, ports []int) error { return redisPing(ctx, redisAddr(ports[0]), "") },
		}
		s := newServer(t, spec, dir)
		if _, err := s.start(); err != nil {
			t.Fatalf("start redis cluster node %d: %v", i, err)
		}
		c.nodes = append(c.nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.WaitHealthy(time.Minute); err != nil {
		t.Fatal(err)
	}
	// Joined: now the short node timeout, so a killed master's replica takes over within
	// seconds. During the join a loaded machine can take longer than that to finish a
	// handshake, and a MEET whose handshake times out is not tried again.
	for i := range c.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := c.do(ctx, i, "config", "set", "cluster-node-timeout", "1000")
		cancel()
		if err != nil || strings.TrimSpace(out) != "OK" {
			t.Fatalf("set the node timeout of node %d: %v %s", i, err, out)
		}
	}
	t.Logf("redis cluster of %d masters and %d replicas ready: %v", masters, masters*replicasPerMaster, c.Addrs())
	return c
}

// Addrs returns every node's host:port, in start order.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		s.mu.Lock()
		out[i] = redisAddr(s.ports[0])
		s.mu.Unlock()
	}
	return out
}

// URL is a redis+cluster:// URL naming every node as a seed.
func (c *RedisCluster) URL() string {
	addrs := c.Addrs()
	u := "redis+cluster://" + addrs[0]
	for i, a := range addrs[1:] {
		if i == 0 {
			u += "?addr=" + a
		} else {
			u += "&addr=" + a
		}
	}
	return u
}

func (c *RedisCluster) alive(i int) bool {
	c.nodes[i].mu.Lock()
	defer c.nodes[i].mu.Unlock()
	return c.nodes[i].cur != nil
}

// do runs one command on node i with redis-cli and returns its answer's text.
func (c *RedisCluster) do(ctx context.Context, i int, args ...string) (string, error) {
	host, port, _ := strings.Cut(c.Addrs()[i], ":")
	out, err := exec.CommandContext(ctx, c.cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("redis-cli %v on node %d: %w: %s", args, i, err, out)
	}
	return string(out), nil
}

// Info returns the fields of INFO section on node i (e.g. "stats", "memory").
func (c *RedisCluster) Info(ctx context.Context, i int, section string) (map[string]string, error) {
	out, err := c.do(ctx, i, "info", section)
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// Masters returns the indices of the live nodes that are masters now.
func (c *RedisCluster) Masters() []int {
	var out []int
	for i := range c.nodes {
		if !c.alive(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		role, err := c.do(ctx, i, "role")
		cancel()
		if err == nil && firstLine(role) == "master" {
			out = append(out, i)
		}
	}
	return out
}

// Kill ends node i with SIGKILL: a master's replica is promoted after the node timeout.
func (c *RedisCluster) Kill(i int) {
	c.t.Helper()
	if err := c.nodes[i].kill(); err != nil {
		c.t.Fatalf("kill redis cluster node %d: %v", i, err)
	}
}

// WaitHealthy waits until as many live masters as the cluster was created with serve it,
// every live node says the cluster is ok (all slots served) and every live replica's link to
// its master is up. After a master is killed, that is after its replica took over.
func (c *RedisCluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok := true
		if m := c.Masters(); len(m) != c.masters {
			ok = false
			last = fmt.Sprintf("masters %v, want %d", m, c.masters)
		}
		for i := range c.nodes {
			if !ok {
				break
			}
			if !c.alive(i) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s, err := c.do(ctx, i, "cluster", "info")
			var r string
			if err == nil {
				r, err = c.do(ctx, i, "info", "replication")
			}
			cancel()
			if err != nil || !strings.Contains(s, "cluster_state:ok") ||
				(strings.Contains(r, "role:slave") && !strings.Contains(r, "master_link_status:up")) {
				ok = false
				last = fmt.Sprintf("node %d: %v %q %q", i, err, firstLine(s), r)
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis cluster not healthy after %v: %s", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
