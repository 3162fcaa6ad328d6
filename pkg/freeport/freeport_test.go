package freeport

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestPorts(t *testing.T) {
	lo, hi := candidateRange()
	ports, err := Ports(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	var lc net.ListenConfig
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("Ports(5) = %v: a port twice", ports)
		}
		seen[p] = true
		if hi > lo && (p < lo || p >= hi) {
			t.Errorf("port %d is outside [%d, %d), below the ephemeral range", p, lo, hi)
		}
		// Free on both address families, as a server binding the wildcard needs.
		for _, addr := range []string{"127.0.0.1", "::1"} {
			l, err := lc.Listen(t.Context(), "tcp", net.JoinHostPort(addr, strconv.Itoa(p)))
			if err != nil {
				if addr == "::1" {
					continue // a machine without IPv6 loopback
				}
				t.Fatalf("port %d is not bindable on %s: %v", p, addr, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A port held by another listener is never handed out.
func TestPortsSkipsTaken(t *testing.T) {
	var lc net.ListenConfig
	var held []net.Listener
	taken := map[int]bool{}
	// Hold a few hundred ports of the range, then ask for many: none may be a held one.
	lo, hi := candidateRange()
	if hi <= lo {
		t.Skip("no room below the ephemeral range on this machine")
	}
	for p := lo; p < lo+300 && p < hi; p++ {
		l, err := lc.Listen(t.Context(), "tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		held = append(held, l)
		taken[p] = true
	}
	defer func() {
		for _, l := range held {
			if err := l.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	for range 20 {
		ports, err := Ports(10)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if taken[p] {
				t.Fatalf("Ports returned %d, which a listener holds", p)
			}
		}
	}
}

func TestEphemeralStart(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    int
		ok      bool
	}{
		{"32768\t60999\n", 32768, true},
		{"15000 20000", 15000, true},
		{"", 0, false},
		{"a b", 0, false},
		{"1 2 3", 0, false},
	} {
		p := filepath.Join(dir, "range")
		if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ephemeralStart(p)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ephemeralStart(%q) = %d, %v; want %d, ok %v", tc.content, got, err, tc.want, tc.ok)
		}
	}
}
