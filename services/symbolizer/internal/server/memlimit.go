package server

import (
	"fmt"
	"math"
	"strings"

	"github.com/dustin/go-humanize"
)

// What a replica holds besides the caches its flags size, in the soft memory limit that
// --memory-limit=auto derives (measured with the release-day drill's heap profiles,
// docs/design/0008-capacity-model.md):
const (
	// resultEntryBytes is one entry of the in-process result cache: 238 bytes measured for
	// 200,000 entries of short answers; longer inline chains cost more.
	resultEntryBytes = 256
	// verifyBytes is an upload's verification: its index built from the file (205 MB for a
	// Go binary over 100 MB) and the DWARF sections read to tell a supplementary file (41 MB).
	verifyBytes = 256 << 20
	// serveBytes is what answering takes: requests and answers in flight, their tables, the
	// runtime's own.
	serveBytes = 128 << 20
)

// memoryLimit reads --memory-limit: the soft memory limit the garbage collector is given
// when neither GOMEMLIMIT nor a container's limit gives one (0: none).
func (c *Config) memoryLimit() (int64, error) {
	switch v := strings.TrimSpace(c.MemoryLimit); strings.ToLower(v) {
	case "", "auto":
		return c.derivedMemoryLimit(), nil
	case "off", "0":
		return 0, nil
	default:
		n, err := humanize.ParseBytes(v)
		if err != nil {
			return 0, fmt.Errorf("--memory-limit %q: want auto, off or a size such as 2GiB: %w", v, err)
		}
		if n < 64<<20 || n > math.MaxInt64 {
			return 0, fmt.Errorf("--memory-limit %q: a limit under 64 MiB would keep the collector running all the time; want auto, off or a larger size", v)
		}
		return int64(n), nil
	}
}

// derivedMemoryLimit is what this replica is configured to hold, plus what verifying an
// upload and serving take.
func (c *Config) derivedMemoryLimit() int64 {
	return max(c.IndexCacheBytes, 0) + max(c.StringsBytes, 0) + int64(max(c.ResultEntries, 0))*resultEntryBytes +
		verifyBytes + serveBytes
}
