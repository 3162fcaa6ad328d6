package testsupport

import (
	"slices"
	"testing"
	"time"
)

// TestRedisCluster: three masters with a replica each; a killed master's replica takes over.
func TestRedisCluster(t *testing.T) {
	c := StartRedisCluster(t, 3, 1)
	m := c.Masters()
	if len(m) != 3 || len(c.Addrs()) != 6 {
		t.Fatalf("masters %v of nodes %v, want 3 of 6", m, c.Addrs())
	}
	c.Kill(m[0])
	if err := c.WaitHealthy(time.Minute); err != nil {
		t.Fatal(err)
	}
	after := c.Masters()
	if len(after) != 3 || slices.Contains(after, m[0]) {
		t.Fatalf("masters after killing node %d: %v", m[0], after)
	}
}
