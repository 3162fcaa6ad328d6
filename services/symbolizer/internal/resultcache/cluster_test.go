package resultcache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/profsym/profsym/pkg/testsupport"
)

// startCluster starts a Redis Cluster of n masters on loopback ports, with the 16384 slots
// shared between them, and returns their addresses.
func startCluster(t *testing.T, n int) []string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is required by this test: %v (apt-get install -y redis-server)", err)
	}
	ctx := context.Background()
	addrs := make([]string, n)
	buses := make([]int, n)
	clients := make([]*redis.Client, n)
	for i := range n {
		addrs[i], buses[i], clients[i] = startClusterNode(t, bin, i)
		// Distinct epochs, as redis-cli --cluster create sets them, so no node has to win a
		// collision before the cluster settles.
		if err := clients[i].Do(ctx, "cluster", "set-config-epoch", i+1).Err(); err != nil {
			t.Fatalf("cluster set-config-epoch on %s: %v", addrs[i], err)
		}
	}
	for i, c := range clients {
		if i > 0 {
			host, port, _ := strings.Cut(addrs[i], ":")
			// The bus port is not port+10000 here, so MEET names it.
			if err := clients[0].Do(ctx, "cluster", "meet", host, port, buses[i]).Err(); err != nil {
				t.Fatalf("cluster meet %s: %v", addrs[i], err)
			}
		}
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := c.Do(ctx, "cluster", "addslotsrange", lo, hi).Err(); err != nil {
			t.Fatalf("cluster addslotsrange on %s: %v", addrs[i], err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, c := range clients {
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster not ready: %v %q", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addrs
}

// startClusterNode starts one cluster-enabled redis-server and returns its address, its
// cluster bus port and a client of it.
func startClusterNode(t *testing.T, bin string, i int) (string, int, *redis.Client) {
	t.Helper()
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		port, bus := testsupport.FreePort(t), testsupport.FreePort(t)
		logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", attempt))
		cmd := exec.CommandContext(t.Context(), bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", attempt)),
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logPath)
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		addr := "127.0.0.1:" + strconv.Itoa(port)
		client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		ready := time.Now().Add(5 * time.Second)
		var err error
		for {
			if err = client.Ping(context.Background()).Err(); err == nil {
				break
			}
			select {
			case werr := <-exited:
				err = fmt.Errorf("exited: %w", werr)
			case <-time.After(20 * time.Millisecond):
				if time.Now().Before(ready) {
					continue
				}
			}
			break
		}
		if err == nil {
			t.Cleanup(func() {
				if err := client.Close(); err != nil {
					t.Logf("close client of redis node %d: %v", i, err)
				}
				if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
					t.Errorf("stop redis node %d: %v", i, err)
				}
				if werr := <-exited; werr != nil {
					t.Logf("redis node %d: %v", i, werr) // normally "signal: killed"
				}
			})
			return addr, bus, client
		}
		if cerr := client.Close(); cerr != nil {
			t.Logf("close client: %v", cerr)
		}
		if kerr := cmd.Process.Kill(); kerr != nil && !errors.Is(kerr, os.ErrProcessDone) {
			t.Logf("stop redis node %d: %v", i, kerr)
		}
		log, _ := os.ReadFile(logPath)
		if werr := <-exited; werr != nil {
			t.Logf("redis node %d: %v", i, werr)
		}
		// Another process may have taken a port between the probe and the bind.
		if attempt < 3 && strings.Contains(string(log), "Address already in use") {
			continue
		}
		t.Fatalf("redis cluster node %d at %s: %v\n%s", i, addr, err, log)
	}
}

// The same layout works on Redis Cluster: the client splits each pipeline by slot, and all
// fields of one HMGET or HSET share their bucket's key, hence its slot.
func TestCluster(t *testing.T) {
	addrs := startCluster(t, 3)
	client, err := NewRedisClient("redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2])
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, ok := client.(*redis.ClusterClient); !ok {
		t.Fatalf("client is a %T", client)
	}
	ctx := context.Background()
	m := newCountMetrics()
	c := New(Options{Redis: client, Metrics: m, Timeout: 2 * time.Second})
	defer c.Close()
	var keys []Key
	var vals []string
	for i := range 3000 {
		mod := strconv.Itoa(i % 4)
		keys = append(keys, Key{"id/" + mod, "t" + mod, uint64(i) * 0x3001, ""})
		if i%7 == 0 {
			vals = append(vals, "")
		} else {
			vals = append(vals, val(strconv.Itoa(i)))
		}
	}
	c.Put(ctx, keys[:2500], vals[:2500])
	c.PutAsync(keys[2500:2900], vals[2500:2900])
	c.Flush(ctx)
	out, found := get(t, c, keys)
	for i := range keys {
		if want := i < 2900; found[i] != want || (want && out[i] != vals[i]) {
			t.Fatalf("key %d %+v = %q found=%v", i, keys[i], out[i], found[i])
		}
	}
	if m.errorCount() != 0 {
		t.Fatalf("errors: %v", m.errors)
	}
	// The buckets really are spread over the nodes.
	for _, addr := range addrs {
		node := redis.NewClient(&redis.Options{Addr: addr})
		n, err := node.DBSize(ctx).Result()
		if cerr := node.Close(); cerr != nil {
			t.Logf("close client of %s: %v", addr, cerr)
		}
		if err != nil || n == 0 {
			t.Fatalf("node %s holds %d keys (%v)", addr, n, err)
		}
	}
}
