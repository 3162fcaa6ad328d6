package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/profsym/profsym/services/gateway/internal/queue"
)

// Metrics are the gateway's Prometheus collectors, on their own registry.
type Metrics struct {
	Registry          *prometheus.Registry
	Requests          *prometheus.CounterVec
	SamplesIn         prometheus.Counter
	SamplesOut        *prometheus.CounterVec
	SamplesLost       *prometheus.CounterVec
	LocationsSeen     prometheus.Counter
	LocationsSymbol   prometheus.Counter
	LocationsUnres    *prometheus.CounterVec
	CacheHits         prometheus.Counter
	ExportFailures    *prometheus.CounterVec
	SymbolizerLatency *prometheus.HistogramVec
	RequestLatency    *prometheus.HistogramVec
}

func newMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "profsym_gateway_requests_total", Help: "OTLP export requests received, by transport and outcome (ok, invalid, unavailable).",
		}, []string{"transport", "outcome"}),
		SamplesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "profsym_gateway_samples_received_total", Help: "Samples in accepted requests.",
		}),
		SamplesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "profsym_gateway_samples_exported_total", Help: "Samples delivered, by exporter.",
		}, []string{"exporter"}),
		SamplesLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "profsym_gateway_samples_dropped_total", Help: "Samples not delivered, by exporter and reason (rejected by the downstream, shutdown).",
		}, []string{"exporter", "reason"}),
		LocationsSeen: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "profsym_gateway_locations_seen_total", Help: "Locations that needed symbols (native or no frame type, no lines).",
		}),
		LocationsSymbol: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "profsym_gateway_locations_symbolized_total", Help: "Locations that got lines.",
		}),
		LocationsUnres: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "profsym_gateway_locations_unresolved_total", Help: "Locations that needed symbols and went out without, by reason.",
		}, []string{"reason"}),
		CacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "profsym_gateway_symbol_cache_hits_total", Help: "Distinct (binary, address) pairs answered from the in-process cache.",
		}),
		ExportFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "profsym_gateway_export_failures_total", Help: "Failed export attempts, by exporter and kind (retryable, permanent).",
		}, []string{"exporter", "kind"}),
		SymbolizerLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "profsym_gateway_symbolizer_call_seconds", Help: "Symbolizer call latency, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"outcome"}),
		RequestLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "profsym_gateway_request_seconds", Help: "Time from decoded request to queued, by transport.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 1.5, 30),
		}, []string{"transport"}),
	}
	m.Registry.MustRegister(m.Requests, m.SamplesIn, m.SamplesOut, m.SamplesLost, m.LocationsSeen, m.LocationsSymbol,
		m.LocationsUnres, m.CacheHits, m.ExportFailures, m.SymbolizerLatency, m.RequestLatency)
	return m
}

func (m *Metrics) watchQueue(q *queue.Queue) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "profsym_gateway_queue_bytes", Help: "Bytes queued or in flight, by exporter.",
		ConstLabels: prometheus.Labels{"exporter": q.Name()},
	}, func() float64 { return float64(q.Bytes()) }))
}
