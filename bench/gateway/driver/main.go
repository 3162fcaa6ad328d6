// Command driver measures the gateway: added latency (Export round trip through the gateway
// against the same request sent straight to an OTLP sink) and throughput, with requests shaped
// like the OTel eBPF profiler's (ELF virtual addresses, build IDs on mappings) drawn from real
// binaries the symbolizer has.
package main

import (
	"context"
	"debug/elf"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

type binary struct {
	path  string
	ids   buildid.IDs
	load  elf.ProgHeader
	funcs [][2]uint64
}

func loadBinary(path string) (*binary, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	b := &binary{path: path}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			b.load = p.ProgHeader
		}
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("symbols of %s: %w", path, err)
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 4 {
			b.funcs = append(b.funcs, [2]uint64{s.Value, s.Value + s.Size})
		}
	}
	if len(b.funcs) == 0 {
		return nil, fmt.Errorf("%s has no function symbols", path)
	}
	if b.ids, err = buildid.FromFile(path); err != nil {
		return nil, fmt.Errorf("build IDs of %s: %w", path, err)
	}
	return b, nil
}

// request builds one eBPF-profiler-shaped request: nloc distinct locations over nmap mappings,
// stacks of 8 to 24 frames drawn from them, one sample with two timestamps per stack.
func request(r *rand.Rand, bins []*binary, nloc, nmap, nsamples int) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	strs := map[string]int32{}
	str := func(s string) int32 {
		if i, ok := strs[s]; ok {
			return i
		}
		d.StringTable().Append(s)
		strs[s] = int32(d.StringTable().Len() - 1)
		return strs[s]
	}
	str("")
	d.AttributeTable().AppendEmpty()
	attr := func(k, v string) int32 {
		kv := d.AttributeTable().AppendEmpty()
		kv.SetKeyStrindex(str(k))
		kv.Value().SetStr(v)
		return int32(d.AttributeTable().Len() - 1)
	}
	native := attr(otlpattr.FrameType, otlpattr.FrameTypeNative)
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	chosen := r.Perm(len(bins))[:min(nmap, len(bins))]
	for _, bi := range chosen {
		b := bins[bi]
		m := d.MappingTable().AppendEmpty()
		m.SetMemoryStart(b.load.Vaddr)
		m.SetMemoryLimit(b.load.Vaddr + b.load.Memsz)
		m.SetFileOffset(b.load.Off)
		m.SetFilenameStrindex(str(b.path))
		if b.ids.GNU != "" {
			m.AttributeIndices().Append(attr(otlpattr.BuildIDGNU, b.ids.GNU))
		}
		m.AttributeIndices().Append(attr(otlpattr.BuildIDHTLHash, b.ids.HTLHash))
	}
	seen := map[[2]uint64]bool{}
	for d.LocationTable().Len()-1 < nloc {
		k := r.IntN(len(chosen))
		b := bins[chosen[k]]
		fn := b.funcs[r.IntN(len(b.funcs))]
		addr := fn[0] + uint64(r.IntN(int(fn[1]-fn[0])))
		if seen[[2]uint64{uint64(k), addr}] {
			continue
		}
		seen[[2]uint64{uint64(k), addr}] = true
		l := d.LocationTable().AppendEmpty()
		l.SetMappingIndex(int32(k + 1))
		l.SetAddress(addr)
		l.AttributeIndices().Append(native)
	}
	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("host.name", "bench")
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(str("samples"))
	p.SampleType().SetUnitStrindex(str("count"))
	p.SetTime(pcommon.Timestamp(time.Now().UnixNano()))
	for range nsamples {
		st := d.StackTable().AppendEmpty()
		for range 8 + r.IntN(17) {
			st.LocationIndices().Append(int32(1 + r.IntN(nloc)))
		}
		s := p.Samples().AppendEmpty()
		s.SetStackIndex(int32(d.StackTable().Len() - 1))
		s.TimestampsUnixNano().Append(uint64(time.Now().UnixNano()), uint64(time.Now().UnixNano()+1))
	}
	return pd
}

type sink struct {
	samples atomic.Int64
}

func (s *sink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	s.samples.Add(int64(req.Profiles().SampleCount()))
	return pprofileotlp.NewExportResponse(), nil
}

func dial(addr string) pprofileotlp.GRPCClient {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	return pprofileotlp.NewGRPCClient(cc)
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// paired sends each request through the gateway and then straight to the sink, n times. The
// machines here are shared and their noise comes in bursts: sending the two back to back lets
// both see the same burst, so the difference of each pair is the gateway's own share.
func paired(gw, base pprofileotlp.GRPCClient, reqs []pprofile.Profiles, n int) (g, b, diff []time.Duration) {
	for i := range n {
		one := []pprofile.Profiles{reqs[i%len(reqs)]}
		tg := latency(gw, one, 1)[0]
		tb := latency(base, one, 1)[0]
		g, b, diff = append(g, tg), append(b, tb), append(diff, tg-tb)
	}
	return g, b, diff
}

func latency(c pprofileotlp.GRPCClient, reqs []pprofile.Profiles, n int) []time.Duration {
	out := make([]time.Duration, 0, n)
	for i := range n {
		t0 := time.Now()
		if _, err := c.Export(context.Background(), pprofileotlp.NewExportRequestFromProfiles(reqs[i%len(reqs)])); err != nil {
			log.Fatalf("export: %v", err)
		}
		out = append(out, time.Since(t0))
	}
	return out
}

// buckets reads the gateway's request-duration histogram (cumulative counts by upper bound).
func buckets(ctx context.Context, admin string) (map[float64]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	if _, err := io.Copy(&sb, resp.Body); err != nil {
		return nil, err
	}
	out := map[float64]float64{}
	for _, line := range strings.Split(sb.String(), "\n") {
		if !strings.HasPrefix(line, `profsym_gateway_request_seconds_bucket{le="`) && !strings.HasPrefix(line, `profsym_gateway_request_seconds_bucket{transport="grpc",le="`) {
			continue
		}
		i := strings.Index(line, `le="`)
		j := strings.Index(line[i+4:], `"`)
		le, err := strconv.ParseFloat(line[i+4:i+4+j], 64)
		if err != nil {
			continue
		}
		f := strings.Fields(line)
		n, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		out[le] = n
	}
	return out, nil
}

// quantile returns the upper bound of the bucket holding quantile q of the requests counted
// between two snapshots.
func quantile(before, after map[float64]float64, q float64) float64 {
	var les []float64
	for le := range after {
		les = append(les, le)
	}
	slices.Sort(les)
	total := after[les[len(les)-1]] - before[les[len(les)-1]]
	for _, le := range les {
		if after[le]-before[le] >= q*total {
			return le
		}
	}
	return les[len(les)-1]
}

func main() {
	gateway := flag.String("gateway", "", "gateway OTLP/gRPC address")
	admin := flag.String("admin", "", "gateway admin address (for its own request-duration histogram)")
	label := flag.String("label", "gateway", "name of this run in the report")
	sinkListen := flag.String("sink-listen", "", "serve an OTLP/gRPC sink here (the gateway's downstream) and exit when killed")
	binsFlag := flag.String("binaries", "", "comma-separated ELF files (uploaded to the symbolizer)")
	nloc := flag.Int("locations", 500, "distinct locations per request")
	nmap := flag.Int("mappings", 20, "mappings per request")
	nsamples := flag.Int("samples", 200, "samples (stacks) per request")
	nreq := flag.Int("templates", 20, "distinct requests (all warmed first)")
	n := flag.Int("n", 1000, "request pairs (through the gateway, then direct) for the latency phase (sequential)")
	conc := flag.Int("concurrency", 8, "senders in the throughput phase")
	dur := flag.Duration("duration", 15*time.Second, "length of the throughput phase")
	resultsPath := flag.String("results", "", "also write the figures here as JSON")
	flag.Parse()
	ctx := context.Background()
	var lc net.ListenConfig

	if *sinkListen != "" {
		ln, err := lc.Listen(ctx, "tcp", *sinkListen)
		if err != nil {
			log.Fatal(err)
		}
		log.Fatal(otlptest.NewProfilesServer((&sink{}).Export).Serve(ln))
	}

	var bins []*binary
	for _, p := range strings.Split(*binsFlag, ",") {
		b, err := loadBinary(p)
		if err != nil {
			log.Fatal(err)
		}
		bins = append(bins, b)
	}
	r := rand.New(rand.NewPCG(42, 42))
	reqs := make([]pprofile.Profiles, *nreq)
	for i := range reqs {
		reqs[i] = request(r, bins, *nloc, *nmap, *nsamples)
	}

	// A sink of our own gives the baseline: the same request, the same client, no gateway.
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	direct := otlptest.NewProfilesServer((&sink{}).Export)
	go func() {
		if err := direct.Serve(ln); err != nil {
			log.Printf("baseline sink: %v", err)
		}
	}()
	base := dial(ln.Addr().String())
	gw := dial(*gateway)

	t0 := time.Now()
	latency(gw, reqs, len(reqs)) // warm: the first pass fills the symbolizer's and gateway's caches
	warm := time.Since(t0)
	latency(base, reqs, len(reqs))

	var before map[float64]float64
	if *admin != "" {
		if before, err = buckets(ctx, *admin); err != nil {
			log.Fatal(err)
		}
	}
	g, b, diff := paired(gw, base, reqs, *n)
	fmt.Printf("%s: %d-location requests over %d mappings, %d samples; warm-up of %d requests took %v\n",
		*label, *nloc, *nmap, *nsamples, len(reqs), warm.Round(time.Millisecond))
	r10 := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	fmt.Printf("%s: %d pairs; latency through gateway p50 %v p99 %v; direct to sink p50 %v p99 %v\n", *label, *n,
		r10(pct(g, .5)), r10(pct(g, .99)), r10(pct(b, .5)), r10(pct(b, .99)))
	// Two estimates of what the gateway adds: the difference of the percentiles (noise of the
	// shared machine mostly cancels when both runs saw the same bursts) and the percentiles of
	// each pair's difference (an upper bound: a burst that hits only one of a pair counts whole).
	fmt.Printf("%s: added by the gateway p50 %v p99 %v (difference of percentiles); per pair p50 %v p99 %v\n", *label,
		r10(pct(g, .5)-pct(b, .5)), r10(pct(g, .99)-pct(b, .99)), r10(pct(diff, .5)), r10(pct(diff, .99)))

	if *admin != "" {
		after, err := buckets(ctx, *admin)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: inside the gateway (validate, symbolize, rewrite, queue): p50 <= %.2fms p99 <= %.2fms (histogram bucket bounds)\n",
			*label, quantile(before, after, .5)*1000, quantile(before, after, .99)*1000)
	}

	var done atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(*dur)
	start := time.Now()
	for w := range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i += *conc {
				if _, err := gw.Export(context.Background(), pprofileotlp.NewExportRequestFromProfiles(reqs[i%len(reqs)])); err != nil {
					fmt.Fprintln(os.Stderr, "export:", err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	fmt.Printf("%s: throughput with %d senders: %.0f requests/s, %.0f locations/s\n", *label, *conc,
		float64(done.Load())/el, float64(done.Load())*float64(*nloc)/el)

	if *resultsPath != "" {
		msf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		res := map[string]any{
			"label": *label, "locations": *nloc, "mappings": *nmap, "samples": *nsamples, "pairs": *n,
			"gateway_p50_ms": msf(pct(g, .5)), "gateway_p99_ms": msf(pct(g, .99)),
			"direct_p50_ms": msf(pct(b, .5)), "direct_p99_ms": msf(pct(b, .99)),
			"added_p50_ms": msf(pct(g, .5) - pct(b, .5)), "added_p99_ms": msf(pct(g, .99) - pct(b, .99)),
			"pair_p50_ms": msf(pct(diff, .5)), "pair_p99_ms": msf(pct(diff, .99)),
			"senders": *conc, "requests_per_s": float64(done.Load()) / el, "locations_per_s": float64(done.Load()) * float64(*nloc) / el,
		}
		out, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(*resultsPath, append(out, '\n'), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
