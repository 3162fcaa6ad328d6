package symbolizecmd

import (
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// BenchmarkWarm measures what bench/symbolize calls the warm rate, inside one process: the cost
// per address once the index is loaded, for the lookup alone and for the lookup with
// llvm-symbolizer's JSON written. PROFSYM_BENCH_OBJ names the binary, PROFSYM_BENCH_ADDRS an
// address file of bench/symbolize/sample; PROFSYM_BENCH_CACHE a --cache-dir that spares the
// index build on later runs. Skipped without them.
func BenchmarkWarm(b *testing.B) {
	obj, addrFile := os.Getenv("PROFSYM_BENCH_OBJ"), os.Getenv("PROFSYM_BENCH_ADDRS")
	if obj == "" || addrFile == "" {
		b.Skip("PROFSYM_BENCH_OBJ and PROFSYM_BENCH_ADDRS name the binary and its addresses")
	}
	raw, err := os.ReadFile(addrFile)
	if err != nil {
		b.Fatal(err)
	}
	lines := strings.Fields(string(raw))
	text := make([][]byte, len(lines))
	for i, l := range lines {
		text[i] = []byte(l)
	}
	addrs := make([]uint64, len(lines))
	for i, l := range lines {
		if addrs[i], err = ParseAddress(l); err != nil {
			b.Fatal(err)
		}
	}
	c := &Cmd{Obj: obj, OutputStyle: "JSON", Inlines: true, CacheDir: os.Getenv("PROFSYM_BENCH_CACHE"), CacheSize: 1 << 40}
	c.NoCache = c.CacheDir == ""
	ix, done, err := c.loadIndex()
	if err != nil {
		b.Fatal(err)
	}
	defer done()
	b.Run("lookup", func(b *testing.B) {
		var frames []index.Frame
		cpu := processCPUTime()
		for i := 0; b.Loop(); i++ {
			frames = ix.AppendLookup(frames[:0], addrs[i%len(addrs)])
		}
		reportCPU(b, cpu)
	})
	if ix, ok := ix.(*index.Index); ok {
		b.Run("refs", func(b *testing.B) {
			var refs []index.FrameRef
			cpu := processCPUTime()
			for i := 0; b.Loop(); i++ {
				refs = ix.AppendLookupRefs(refs[:0], addrs[i%len(addrs)])
			}
			reportCPU(b, cpu)
		})
	}
	b.Run("json", func(b *testing.B) {
		w := newOutput(io.Discard)
		p := printer{w: w, module: obj, json: true, inlines: true, ix: ix}
		cpu := processCPUTime()
		for i := 0; b.Loop(); i++ {
			p.one(lines[i%len(lines)])
			w.putByte('\n')
		}
		reportCPU(b, cpu)
	})
	// What `symbolizer symbolize` runs on addresses from stdin.
	b.Run("batch", func(b *testing.B) {
		p := printer{w: newOutput(io.Discard), module: obj, json: true, inlines: true, ix: ix}
		cpu := processCPUTime()
		for i := 0; b.Loop(); i++ {
			p.add(text[i%len(lines)])
			if p.pending() == batchSize {
				p.flushBatch()
			}
		}
		reportCPU(b, cpu)
	})
}

// reportCPU adds the process's CPU time per operation since start: on a machine shared with
// other work, wall time (ns/op) includes waiting for a CPU, CPU time does not.
func reportCPU(b *testing.B, start time.Duration) {
	if d := processCPUTime() - start; d > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
