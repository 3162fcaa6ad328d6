package demangle

import (
	"os"
	"runtime"
	"sort"
	"testing"
	"time"
)

// BenchmarkNameLibraries demangles every mangled name of the installed system C++ libraries
// (libstdc++ and libLLVM, about 44,000 names), what the index build does for each symbol of
// a binary. One op is one name; the names are taken in turn.
func BenchmarkNameLibraries(b *testing.B) {
	var names []string
	for _, p := range systemLibraries {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		n, err := mangledNames(p)
		if err != nil {
			b.Fatalf("%s: %v", p, err)
		}
		names = append(names, n...)
	}
	if len(names) == 0 {
		b.Skip("no system C++ library installed")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		_ = Name(names[i%len(names)])
	}
}

// BenchmarkNameMedian measures names one at a time and reports the cost of the median name,
// where BenchmarkNameLibraries and BenchmarkNameDistribution report the mean: ns, allocations
// and bytes of the median name, the 90th percentile's ns, and the slowest name's. The names
// are every k-th of DEMANGLE_NAMES (bench/demangle's distribution set) when it is set,
// otherwise of the installed system libraries (BenchmarkNameLibraries's), about 10,000 in
// all. A name's time is the least of 3 runs of 16 calls, so that a pause of the machine is not
// taken for a slow name. Run it once: -benchtime 1x.
func BenchmarkNameMedian(b *testing.B) {
	var names []string
	if file := os.Getenv("DEMANGLE_NAMES"); file != "" {
		n, err := readNames(file)
		if err != nil {
			b.Fatal(err)
		}
		names = n
	} else {
		for _, p := range systemLibraries {
			if _, err := os.Stat(p); err != nil {
				continue
			}
			n, err := mangledNames(p)
			if err != nil {
				b.Fatalf("%s: %v", p, err)
			}
			names = append(names, n...)
		}
	}
	if len(names) == 0 {
		b.Skip("no names: set DEMANGLE_NAMES or install libstdc++ and libLLVM-14")
	}
	stride := max(1, len(names)/10000)
	type cost struct {
		ns, allocs, bytes float64
		name              string
	}
	const calls = 16
	var costs []cost
	for b.Loop() {
		costs = costs[:0]
		for i := 0; i < len(names); i += stride {
			n := names[i]
			best := time.Duration(1 << 62)
			for range 3 {
				start := time.Now()
				for range calls {
					_ = Name(n)
				}
				best = min(best, time.Since(start))
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range calls {
				_ = Name(n)
			}
			runtime.ReadMemStats(&after)
			costs = append(costs, cost{
				ns:     float64(best.Nanoseconds()) / calls,
				allocs: float64(after.Mallocs-before.Mallocs) / calls,
				bytes:  float64(after.TotalAlloc-before.TotalAlloc) / calls,
				name:   n,
			})
		}
	}
	median := func(f func(cost) float64, q float64) float64 {
		v := make([]float64, len(costs))
		for i, c := range costs {
			v[i] = f(c)
		}
		sort.Float64s(v)
		return v[int(q*float64(len(v)-1))]
	}
	slowest := costs[0]
	for _, c := range costs {
		if c.ns > slowest.ns {
			slowest = c
		}
	}
	b.ReportMetric(median(func(c cost) float64 { return c.ns }, 0.5), "median-ns/name")
	b.ReportMetric(median(func(c cost) float64 { return c.allocs }, 0.5), "median-allocs/name")
	b.ReportMetric(median(func(c cost) float64 { return c.bytes }, 0.5), "median-B/name")
	b.ReportMetric(median(func(c cost) float64 { return c.ns }, 0.9), "p90-ns/name")
	b.ReportMetric(slowest.ns, "max-ns/name")
	b.Logf("%d names of %d; the slowest (%.0f ns, %d bytes): %.200s", len(costs), len(names), slowest.ns, len(slowest.name), slowest.name)
}
