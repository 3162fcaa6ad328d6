//go:build linux

package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/profsym/profsym/services/collector/internal/perfmap"
)

// registerPerfMapMetrics exports the perf-map table's counters and usage.
func (a *Agent) registerPerfMapMetrics(reg prometheus.Registerer) {
	const ns = "profsym_collector"
	stat := func(name, help string, labels prometheus.Labels, pick func(perfmap.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(pick(a.jit.Stats())) })
	}
	const dropped = "Perf-map symbols (JIT code names) not kept: malformed lines, and symbols dropped to stay within the perf-map memory bounds (the earliest go first)."
	const reads = "Reads of perf-map files: whole (new, shrunk, replaced or rewritten) or of what was appended."
	reg.MustRegister(
		stat("perf_map_symbols_read_total", "Perf-map symbols (JIT code names) read.", nil,
			func(s perfmap.Stats) uint64 { return s.Read }),
		stat("perf_map_symbols_dropped_total", dropped, prometheus.Labels{"reason": "malformed"},
			func(s perfmap.Stats) uint64 { return s.Malformed }),
		stat("perf_map_symbols_dropped_total", dropped, prometheus.Labels{"reason": "limit"},
			func(s perfmap.Stats) uint64 { return s.Dropped }),
		stat("perf_map_reads_total", reads, prometheus.Labels{"kind": "whole"},
			func(s perfmap.Stats) uint64 { return s.FilesRead }),
		stat("perf_map_reads_total", reads, prometheus.Labels{"kind": "append"},
			func(s perfmap.Stats) uint64 { return s.Appends }),
		stat("perf_map_files_refused_total", "Perf-map files not read: not a regular file, owned by another user than the process's, or older than the process.", nil,
			func(s perfmap.Stats) uint64 { return s.Refused }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "perf_map_bytes",
			Help: "Approximate memory the perf-map symbols held take."},
			func() float64 { _, _, b := a.jit.Usage(); return float64(b) }),
	)
}
