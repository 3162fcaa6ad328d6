package cfi

import (
	"debug/elf"
	"path/filepath"
	"testing"
)

// BenchmarkBuild measures Build on real system binaries: reading .eh_frame from the file
// and building its table, as the collector does once per binary a node runs. SetBytes makes
// MB/s the section's bytes per second.
func BenchmarkBuild(b *testing.B) {
	benchFiles(b, func(b *testing.B, f *elf.File, data []byte, addr uint64) (*Table, error) {
		return Build(f)
	})
}

// BenchmarkParseSection measures the parser alone, on section bytes already in memory.
func BenchmarkParseSection(b *testing.B) {
	benchFiles(b, func(b *testing.B, f *elf.File, data []byte, addr uint64) (*Table, error) {
		return ParseSection(data, addr, EHFrame)
	})
}

func benchFiles(b *testing.B, build func(b *testing.B, f *elf.File, data []byte, addr uint64) (*Table, error)) {
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
			tb, err := build(b, f, data, s.Addr)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			cpu := processCPUTime()
			for b.Loop() {
				if _, err := build(b, f, data, s.Addr); err != nil {
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
