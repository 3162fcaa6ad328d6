// Package replica names a symbolizer replica in the objects it alone writes to the shared
// store (usage days, coverage shards): one name per server, so that an operator matches a
// replica's files to each other and to its logs.
package replica

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
)

// New returns a new replica name: the host name (a pod's name in Kubernetes) made safe for an
// object key, and a random suffix, so that a restarted replica writes new files rather than
// another's, and two servers in one process (tests, embedding) are two replicas. A server
// calls it once and gives the name to everything it writes.
func New() string {
	host, _ := os.Hostname()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return Sanitize(host) + "-" + hex.EncodeToString(rnd[:])
}

// Sanitize keeps letters, digits and '-' of s and replaces the rest with '_' (an object key's
// last element, the same in every store), without leading or trailing '-'.
func Sanitize(s string) string {
	return strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, s), "-")
}
