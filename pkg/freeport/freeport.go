// Package freeport finds TCP ports for the servers that tests, demos and benchmarks start on
// the local machine.
//
// The ports come from below the kernel's ephemeral range (net.ipv4.ip_local_port_range), not
// from a bind to port 0: the kernel hands out ephemeral ports to every outgoing connection of
// every process as well, so a port found by binding port 0, released and then given to a
// server could be taken in between by any client's connect (seen: a gateway's readiness port
// taken while the test's MinIO and Redis clients were busy). Below the range only another
// explicit bind can take it, and callers that start servers still retry on "address already
// in use".
package freeport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports returns n distinct TCP ports that were free on every local address a moment ago
// (listening on the wildcard address finds a port free on both IPv4 and IPv6, which a server
// that binds both needs).
func Ports(n int) (ports []int, err error) {
	lo, hi := candidateRange()
	var listeners []net.Listener
	// A port whose probe listener cannot be released is of no use to the server that is
	// about to bind it.
	defer func() {
		for _, l := range listeners {
			if cerr := l.Close(); cerr != nil && err == nil {
				ports, err = nil, fmt.Errorf("release probe port: %w", cerr)
			}
		}
	}()
	// A bind does not block, so there is nothing for a context to cancel.
	var lc net.ListenConfig
	ports = make([]int, 0, n)
	for len(ports) < n {
		var l net.Listener
		var lastErr error
		for range maxTries {
			p := 0 // the kernel's choice, when there is no room below its range
			if hi > lo {
				p = lo + rand.IntN(hi-lo)
			}
			l, lastErr = lc.Listen(context.Background(), "tcp", ":"+strconv.Itoa(p))
			if lastErr == nil {
				break
			}
		}
		if lastErr != nil {
			return nil, fmt.Errorf("find a free port: %w", lastErr)
		}
		// The listeners are held open together, so no port comes back twice.
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Port is Ports(1).
func Port() (int, error) {
	ports, err := Ports(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// maxTries bounds the random probes for one port: a range of thousands of ports with a few in
// use finds one at the first or second try.
const maxTries = 64

// firstPort is the lowest port handed out: above the well-known and the common registered
// server ports (8080, 9000, 9090 ...).
const firstPort = 10000

// minRoom is the fewest ports below the ephemeral range worth choosing from; with fewer, the
// kernel's choice (port 0) is used.
const minRoom = 1000

// candidateRange returns [lo, hi) to choose ports from, or hi <= lo for the kernel's choice.
func candidateRange() (lo, hi int) {
	ephemeral, err := ephemeralStart("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		// Linux's default range starts at 32768.
		ephemeral = 32768
	}
	if ephemeral-firstPort < minRoom {
		return 0, 0
	}
	return firstPort, ephemeral
}

// ephemeralStart reads the first port of the kernel's ephemeral range.
func ephemeralStart(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, errors.New(path + ": want two ports")
	}
	return strconv.Atoi(f[0])
}
