//go:build linux

// Package nodescan walks the node's processes for the collector's upload-only mode: every scan
// reads each process's maps (through /proc/<pid>/map_files or its root, so files inside
// containers are reached) and hands every executable file mapping to the file hook, which
// offers it for upload. It samples nothing and loads no eBPF program: it runs beside any
// profiler, such as the OpenTelemetry eBPF profiler, whose frames then symbolize.
package nodescan

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

// Scanner walks /proc.
type Scanner struct {
	procRoot string
	table    *procmaps.Table
	log      *slog.Logger
	scans    prometheus.Counter
	procs    prometheus.Gauge
	files    prometheus.Gauge
	cache    *procmaps.FileCache
}

// New returns a scanner of the processes below procRoot ("/proc" outside tests). hook sees
// every executable file mapping of every scan; it must not block. files caches what is read
// of each file (IDs, program headers) across scans.
func New(procRoot string, files *procmaps.FileCache, hook func(procmaps.MappedFile), reg prometheus.Registerer, log *slog.Logger) *Scanner {
	if log == nil {
		log = slog.Default()
	}
	t := procmaps.NewTable(procRoot, files, log)
	t.SetFileHook(hook)
	s := &Scanner{procRoot: procRoot, table: t, log: log, cache: files,
		scans: prometheus.NewCounter(prometheus.CounterOpts{Name: "profsym_nodescan_scans_total", Help: "Walks of the node's processes (upload-only mode)."}),
		procs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "profsym_nodescan_processes", Help: "Processes whose maps the last walk read."}),
		files: prometheus.NewGauge(prometheus.GaugeOpts{Name: "profsym_nodescan_files", Help: "Distinct mapped files whose IDs are known."}),
	}
	if reg != nil {
		reg.MustRegister(s.scans, s.procs, s.files)
	}
	return s
}

// Scan reads the maps of every process once and returns how many it read.
func (s *Scanner) Scan() int {
	entries, err := os.ReadDir(s.procRoot)
	if err != nil {
		s.log.Warn("list processes", "dir", s.procRoot, "err", err)
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.IsDir() {
			continue
		}
		// Re-read even a known process: it may have loaded libraries since (dlopen).
		s.table.MarkExec(uint32(pid))
		if p := s.table.Process(uint32(pid)); p.Err == nil {
			n++
		}
	}
	s.table.Sweep()
	s.scans.Inc()
	s.procs.Set(float64(n))
	s.files.Set(float64(s.cache.Len()))
	return n
}

// Run scans now and then every interval until ctx ends; first, if set, is called after the
// first scan.
func (s *Scanner) Run(ctx context.Context, interval time.Duration, first func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	n := s.Scan()
	s.log.Info("walked the node's processes", "processes", n)
	if first != nil {
		first()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Scan()
		}
	}
}
