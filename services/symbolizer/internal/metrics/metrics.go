// Package metrics defines the symbolizer's Prometheus metrics in one place, so names, labels
// and units are documented together.
//
//	symbolizer_rpc_requests_total{procedure,code}     RPCs finished, by Connect code
//	symbolizer_rpc_duration_seconds{procedure}        RPC latency
//	symbolizer_cache_lookups_total{layer,result}      layer: memory, redis (results), index (LRU); result: hit, miss
//	symbolizer_index_builds_total{result}             indexes built from a file: ok, error
//	symbolizer_index_build_seconds                    index build time
//	symbolizer_index_loads_total{result}              serialized indexes loaded from the store
//	symbolizer_index_cache_bytes                      bytes of indexes held in memory
//	symbolizer_stored_bytes_total                     bytes of files accepted into the store
//	symbolizer_uploads_total{result}                  FinishUpload outcomes: ok, rejected
//	symbolizer_redis_errors_total{op}                 failed Redis calls (get, set)
//	symbolizer_debuginfod_fetches_total{upstream,result} upstream fetches: ok, not_found, error, open_circuit
//	symbolizer_store_errors_total{op}                 failed object-store calls (put, open, read, size, delete, copy, list, presign, ping)
//	symbolizer_degraded{dependency}                   1 while a dependency is degraded (store, redis, debuginfod <url>), else 0
package metrics

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds the collectors.
type Metrics struct {
	Registry       *prometheus.Registry
	RPCRequests    *prometheus.CounterVec
	RPCDuration    *prometheus.HistogramVec
	CacheLookups   *prometheus.CounterVec
	IndexBuilds    *prometheus.CounterVec
	IndexBuildTime prometheus.Histogram
	IndexLoads     *prometheus.CounterVec
	// IndexBuildWaits counts index builds left to another replica that held the build's lease.
	IndexBuildWaits prometheus.Counter
	IndexCacheSize  prometheus.Gauge
	StoredBytes     prometheus.Counter
	Uploads         *prometheus.CounterVec
	RedisErrors     *prometheus.CounterVec
	Debuginfod      *prometheus.CounterVec
	StoreErrors     *prometheus.CounterVec
	Degraded        *prometheus.GaugeVec
}

// New registers every metric on a fresh registry (with Go and process collectors).
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: r,
		RPCRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "symbolizer_rpc_requests_total", Help: "RPCs finished, by procedure and Connect code."}, []string{"procedure", "code"}),
		RPCDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "symbolizer_rpc_duration_seconds", Help: "RPC latency.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"procedure"}),
		CacheLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "symbolizer_cache_lookups_total", Help: "Cache lookups by layer (memory, redis, index) and result (hit, miss)."}, []string{"layer", "result"}),
		IndexBuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "symbolizer_index_builds_total", Help: "Indexes built from a stored file."}, []string{"result"}),
		IndexBuildTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "symbolizer_index_build_seconds", Help: "Time to build an index from a file.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 10)}),
		IndexLoads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "symbolizer_index_loads_total", Help: "Serialized indexes loaded from the store."}, []string{"result"}),
		IndexBuildWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "symbolizer_index_build_waits_total", Help: "Indexes this replica waited for while another replica built them (the build lease was held)."}),
		IndexCacheSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "symbolizer_index_cache_bytes", Help: "Approximate bytes of indexes held in memory."}),
		StoredBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "symbolizer_stored_bytes_total", Help: "Bytes of verified files accepted into the store."}),
		Uploads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "symbolizer_uploads_total", Help: "FinishUpload outcomes (ok, rejected), and InitiateUpload calls refused over a tenant's quota (over_quota)."}, []string{"result"}),
		RedisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "symbolizer_redis_errors_total", Help: "Failed Redis calls; symbolization continued without the cache."}, []string{"op"}),
		Debuginfod: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "symbolizer_debuginfod_fetches_total", Help: "Fetches from upstream debuginfod servers."}, []string{"upstream", "result"}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "symbolizer_store_errors_total", Help: "Failed object-store calls, by operation (missing objects are no error)."}, []string{"op"}),
		Degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "symbolizer_degraded", Help: "1 while a dependency is degraded (the logs say since when and why), else 0."}, []string{"dependency"}),
	}
	r.MustRegister(m.RPCRequests, m.RPCDuration, m.CacheLookups, m.IndexBuilds, m.IndexBuildTime,
		m.IndexLoads, m.IndexBuildWaits, m.IndexCacheSize, m.StoredBytes, m.Uploads, m.RedisErrors, m.Debuginfod, m.StoreErrors, m.Degraded)
	return m
}

// DegradedGauge returns a function that sets symbolizer_degraded{dependency}, for
// degraded.Tracker.OnChange; the series starts at 0.
func (m *Metrics) DegradedGauge(dependency string) func(down bool) {
	g := m.Degraded.WithLabelValues(dependency)
	g.Set(0)
	return func(down bool) {
		if down {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}
}

// CacheResult counts lookups of one layer (resultcache.Metrics).
func (m *Metrics) CacheResult(layer string, hits, misses int) {
	if hits > 0 {
		m.CacheLookups.WithLabelValues(layer, "hit").Add(float64(hits))
	}
	if misses > 0 {
		m.CacheLookups.WithLabelValues(layer, "miss").Add(float64(misses))
	}
}

// RedisError counts a failed Redis call (resultcache.Metrics).
func (m *Metrics) RedisError(op string) { m.RedisErrors.WithLabelValues(op).Inc() }

// DebuginfodFetch counts an upstream fetch.
func (m *Metrics) DebuginfodFetch(upstream, result string) {
	m.Debuginfod.WithLabelValues(upstream, result).Inc()
}

// Interceptor counts and times every unary RPC.
func (m *Metrics) Interceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			resp, err := next(ctx, req)
			proc := req.Spec().Procedure
			code := "ok"
			if err != nil {
				code = connect.CodeOf(err).String()
				var ce *connect.Error
				if !errors.As(err, &ce) && errors.Is(err, context.Canceled) {
					code = connect.CodeCanceled.String()
				}
			}
			m.RPCRequests.WithLabelValues(proc, code).Inc()
			m.RPCDuration.WithLabelValues(proc).Observe(time.Since(start).Seconds())
			return resp, err
		}
	})
}
