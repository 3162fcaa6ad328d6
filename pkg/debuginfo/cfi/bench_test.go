package cfi

import (
	"debug/elf"
	"path/filepath"
	"testing"
)

// BenchmarkBuild measures building the table of real system binaries from their
// .eh_frame bytes (already in memory, as the collector holds them after reading the file).
// SetBytes makes MB/s the section's bytes per second.
func BenchmarkBuild(b *testing.B) {
	files := systemFiles(b)
	if len(files) == 0 {
		b.Skip("no system files found")
	}
	for _, path := range files {
		b.Run(filepath.Base(path), func(b *testing.B) {
			f, err := elf.Open(path)
			if err != nil {
				b.Skip(err)
			}
			defer f.Close()
			s := f.Section(".eh_frame")
			if s == nil {
				b.Skip("no .eh_frame")
			}
			data, err := s.Data()
			if err != nil {
				b.Fatal(err)
			}
			tb, err := ParseSection(data, s.Addr, EHFrame)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			cpu := processCPUTime()
			for b.Loop() {
				if _, err := ParseSection(data, s.Addr, EHFrame); err != nil {
					b.Fatal(err)
				}
			}
			// On a machine shared with other work, wall time (ns/op, MB/s) includes
			// waiting for a CPU; the process's CPU time per op does not (it does include
			// the garbage collector's work, as it should).
			if cpu := processCPUTime() - cpu; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(len(data))*float64(b.N)/cpu.Seconds()/1e6, "cpu-MB/s")
			}
			b.ReportMetric(float64(len(tb.Rows)), "rows")
			b.ReportMetric(float64(tb.FDEs), "FDEs")
			b.ReportMetric(float64(tb.SizeBytes()), "table-bytes")
		})
	}
}
