//go:build linux

package unwind

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

// BenchmarkBuildTable is the collector's cost per file: open, parse the CFI, encode the
// kernel rows. Reported per MB of .eh_frame.
func BenchmarkBuildTable(b *testing.B) {
	for _, name := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/python3"} {
		path, err := filepath.EvalSymlinks(name)
		if err != nil {
			b.Logf("skip %s: %v", name, err)
			continue
		}
		st, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		key, err := procmaps.KeyOf(st)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Base(path), func(b *testing.B) {
			mt := &metrics{buildSeconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"}), ehFrameBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"})}
			t, err := buildTable(path, key, mt)
			if err != nil {
				b.Fatal(err)
			}
			f, err := elf.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			if s := f.Section(".eh_frame"); s != nil {
				b.SetBytes(int64(s.Size))
			}
			f.Close()
			for b.Loop() {
				if _, err := buildTable(path, key, mt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(t.rows)), "rows")
		})
	}
}
