package server

import (
	"strings"
	"testing"
)

func TestMemoryLimitFlag(t *testing.T) {
	const mib = 1 << 20
	defaults := Config{IndexCacheBytes: 1 << 30, StringsBytes: 256 * mib, ResultEntries: 200000}
	for _, c := range []struct {
		value string
		cfg   Config
		want  int64
		err   string
	}{
		{"auto", defaults, 1024*mib + 256*mib + 200000*256 + 384*mib, ""}, // 1,712.8 MiB
		{"", defaults, 1024*mib + 256*mib + 200000*256 + 384*mib, ""},     // a Config built in code
		{"AUTO", Config{IndexCacheBytes: 2 << 30, StringsBytes: 256 * mib}, 2048*mib + 256*mib + 384*mib, ""},
		{"auto", Config{IndexCacheBytes: 1}, 1 + 384*mib, ""},
		{"off", defaults, 0, ""},
		{"0", defaults, 0, ""},
		{"2GiB", defaults, 2 << 30, ""},
		{"1536MiB", defaults, 1536 * mib, ""},
		{"3000000000", defaults, 3000000000, ""},
		{" 1.5 GiB ", defaults, 1536 * mib, ""},
		{"lots", defaults, 0, `--memory-limit "lots": want auto, off or a size`},
		{"10MiB", defaults, 0, "under 64 MiB"},
		{"-1", defaults, 0, "want auto, off or a size"},
	} {
		cfg := c.cfg
		cfg.MemoryLimit = c.value
		got, err := cfg.memoryLimit()
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("--memory-limit %q: error %v, want one saying %q", c.value, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("--memory-limit %q: %v", c.value, err)
		case c.err == "" && got != c.want:
			t.Errorf("--memory-limit %q: %d bytes (%.1f MiB), want %d (%.1f MiB)", c.value, got, float64(got)/mib, c.want, float64(c.want)/mib)
		}
	}
}
