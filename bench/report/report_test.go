package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A small results set in the bench scripts' formats, with figures whose ratios are round.
var fixture = map[string]string{
	runFile: `{"started": "2026-11-28T01:02:03Z", "elapsed_s": 1234, "cpu_model": "Test CPU @ 2.0GHz", "cores": 2,
		"mem_kib": 24576000, "kernel": "6.1.0-test", "go": "go1.26.8", "load_start": "1.00 2.00 3.00",
		"load_end": "2.50 2.00 3.00", "command": "make bench-report", "settings": "REPEAT=2", "revision": "abc1234"}`,
	symbolizeFile: `{"small": 10000, "big": 100000, "ours_big": 1000000, "eu_big": 20000, "repeat": 2, "ours_worst": true,
		"load_before": "1 1 1", "load_after": "2 2 2", "measured": "2026-12-07T18:00Z", "revision": "def5678",
		"binaries": [{"name": "minio", "mb": 144, "go": true,
			"ours": {"cold_s": 0.5, "cached_s": 0.25, "warm_rate": 1000000, "rss_mb": 300, "rss_small_mb": 200},
			"llvm": {"cold_s": 1.5, "warm_rate": 250000, "rss_mb": 600},
			"eu": {"cold_s": 10, "warm_rate": 4000, "rss_small_mb": 100},
			"fidelity": [
				{"label": "ours", "addresses": 10000, "innermost": 9900, "function": 9950, "location": 10000, "chain": 9800},
				{"label": "eu-addr2line", "addresses": 10000, "innermost": 250, "function": 8000, "location": 300, "chain": 200},
				{"label": "go tool addr2line", "addresses": 10000, "innermost": 8500, "function": 8600, "location": 9000, "chain": -1}]}],
		"stripped": {"addresses": 20000, "ours": {"wall_s": 0.2, "cpu_s": 0.25, "rss_mb": 110},
			"a2l": {"wall_s": 0.4, "cpu_s": 0.75, "rss_mb": 220},
			"fidelity": [{"label": "ours", "addresses": 20000, "innermost": 19000, "function": 19800, "location": 19500, "chain": 19000}]}}`,
	symbolizerFile: `{"binary": "minio", "binary_mib": 144, "batch": 10000, "batches": 20, "rounds": 3, "upload_s": 1.5,
		"phases": [
			{"phase": "cold", "batches": 2, "addrs_per_s": 125000, "p50_ms": 80, "p99_ms": 90, "server_cpu_ms_per_batch": 100, "rss_mib": 500},
			{"phase": "warm", "batches": 60, "addrs_per_s": 1250000, "p50_ms": 8, "p99_ms": 12, "server_cpu_ms_per_batch": 7, "rss_mib": 400},
			{"phase": "cached", "batches": 60, "addrs_per_s": 1000000, "p50_ms": 10, "p99_ms": 14},
			{"phase": "redis", "batches": 60, "addrs_per_s": 2000000, "p50_ms": 4, "p99_ms": 6}],
		"redis_ms_per_batch_cached": 2.5, "redis_ms_per_batch_redis": 2.0}`,
	gatewayFile: `{"load_before": "1 1 1", "load_after": "1 1 1", "runs": [{"label": "otelcol-cached", "locations": 500,
		"mappings": 20, "samples": 200, "pairs": 500, "gateway_p50_ms": 1.5, "gateway_p99_ms": 8, "direct_p50_ms": 0.5,
		"direct_p99_ms": 2, "added_p50_ms": 1, "added_p99_ms": 6, "pair_p50_ms": 1, "pair_p99_ms": 6.5, "senders": 8,
		"requests_per_s": 900, "locations_per_s": 450000}]}`,
	collectorFile: `{"duration_s": 30, "binaries": 20, "cpus": 2, "load_before": "1 1 1", "load_after": "1 1 1", "runs": [
		{"unwinder": "cfi", "hz": 19, "cpu_pct_core": 0.25, "rss_mb": 40, "samples": 1000, "tables": 30, "rows": 300000, "row_map_mb": 64, "whole_pct": 99.5},
		{"unwinder": "cfi", "hz": 99, "cpu_pct_core": 1, "rss_mb": 44, "samples": 5000, "tables": 30, "rows": 300000, "row_map_mb": 64, "whole_pct": 99.0},
		{"unwinder": "frame-pointers", "hz": 19, "cpu_pct_core": 0.2, "rss_mb": 30, "samples": 1000, "tables": 0, "rows": 0, "row_map_mb": 0, "whole_pct": null},
		{"unwinder": "frame-pointers", "hz": 99, "cpu_pct_core": 0.5, "rss_mb": 32, "samples": 5000, "tables": 0, "rows": 0, "row_map_mb": 0, "whole_pct": null}]}`,
	bigdwarfFile: `{"name": "bigdwarf", "file_mb": 1400, "dwarf_bytes": 1250000000,
		"sections": [{"name": ".debug_info", "bytes": 800000000}, {"name": ".debug_str", "bytes": 450000000}],
		"recipe": "abc bases=20 copies=33 funcs=2", "small": 10000, "ours_big": 1000000, "repeat": 2,
		"ours": {"cold_s": 20, "cold_cpu_s": 30, "rss_mb": 1000, "index_bytes": 150000000, "warm_rate": 2000000},
		"llvm": {"cold_s": 40, "cold_cpu_s": 45, "rss_mb": 2500},
		"runs": [{"load": "3.5 2 1", "ours": {"cold_s": 20, "cold_cpu_s": 25, "rss_mb": 1000}, "llvm": {"cold_s": 40, "cold_cpu_s": 45, "rss_mb": 2500}},
			{"load": "4 3 2", "ours": {"cold_s": 18, "cold_cpu_s": 30, "rss_mb": 990}, "llvm": {"cold_s": 45, "cold_cpu_s": 45, "rss_mb": 2600}}],
		"fidelity": {"label": "ours", "addresses": 10000, "innermost": 9900, "function": 9900, "location": 10000, "chain": 9500},
		"service": {"binary": "bigdwarf", "binary_mib": 1335, "batch": 10000, "batches": 5, "rounds": 1, "upload_s": 12.5, "upload_rss_mib": 300,
			"phases": [{"phase": "cold", "batches": 1, "addrs_per_s": 500, "p50_ms": 20000, "p99_ms": 20000, "server_cpu_ms_per_batch": 30000, "resolved_share": 0.995, "rss_mib": 1100}]},
		"load_before": "1 1 1", "load_after": "2 2 2", "measured": "2026-12-07T13:40Z", "revision": "abc1234"}`,
	kernelFile: `{"name": "vmlinux-6.1.0-57-amd64", "file_mb": 604, "dwarf_bytes": 400000000,
		"sections": [{"name": ".debug_info", "bytes": 174000000}], "recipe": "", "small": 10000, "ours_big": 300000, "repeat": 1,
		"ours": {"cold_s": 4, "cold_cpu_s": 3, "rss_mb": 600, "index_bytes": 100000000, "warm_rate": 1000000},
		"llvm": {"cold_s": 2, "cold_cpu_s": 1.5, "rss_mb": 700},
		"fidelity": {"label": "ours", "addresses": 10000, "innermost": 10000, "function": 10000, "location": 10000, "chain": 10000},
		"load_before": "1 1 1", "load_after": "2 2 2"}`,
}

var allPlots = []string{"engine-fidelity.svg", "engine-cold.svg", "engine-warm.svg", "engine-rss.svg",
	"symbolizer-latency.svg", "gateway-latency.svg", "collector-cpu.svg", "collector-rss.svg"}

func writeFixture(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func only(names ...string) map[string]string {
	m := map[string]string{}
	for _, n := range names {
		m[n] = fixture[n]
	}
	return m
}

func TestGenerate(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    []string // substrings of the page
		plots   []string
		notes   int // "Not measured" sections
		wantErr string
	}{
		{
			name:  "every bench",
			files: fixture,
			want: []string{
				"Generated by `make bench-report`",
				"2026-11-28 01:02 UTC, took 20m34s at commit `abc1234`",
				"Test CPU @ 2.0GHz, 2 cores, 23.4 GiB of memory, Linux 6.1.0-test, go1.26.8",
				"1.00 2.00 3.00 at the start, 2.50 2.00 3.00 at the end",
				"each tool 2 times; of ours every figure is the worst of its runs, of each reference tool the best of its runs",
				"Load average during this bench: 1 1 1 before, 2 2 2 after. Measured 2026-12-07 18:00Z at commit `def5678`.",
				// fidelity: shares of 10000 addresses
				"| minio (144 MB, Go) | ours | 99.0% | 100.0% | 99.5% | 98.0% |",
				"|  | eu-addr2line | 2.5% | 3.0% | 80.0% | 2.0% |",
				"|  | go tool addr2line | 85.0% | 90.0% | 86.0% | – |",
				// cold 1.5/0.5 and 10/0.5; cached 1.5/0.25; warm 1e6/2.5e5 and 1e6/4e3; RSS 300/600 and 200/100
				"| minio | 0.50 s | 3.00× | 20.00× | 0.25 s | 6.00× | 1.00 M/s | 4.00× | 250.00× | 300 MB | 0.50× | 2.00× |",
				// stripped: 0.4/0.2, 0.75/0.25, 110/220
				"| 2.00× | 3.00× | 0.50× |",
				"| minio, stripped | ours | 95.0% | 97.5% | 99.0% | 95.0% |",
				// symbolizer: cold p50 80 over warm 8; cached 10 over the redis floor 4
				"| cold | no index in memory or in the store: the first batch builds it | 2 | 80.0 | 90.0 | 10.00× |",
				"The cached phase's p50 is 2.50× the Redis floor's",
				"`symbolizer upload` took 1.50 s",
				// gateway: 1.5/0.5 and 8/2
				"| 0.50 | 1.50 | 1.00 | 3.00× | 2.00 | 8.00 | 6.00 | 4.00× |",
				// collector: 0.25 of a 0.5 target, 0.25/0.2 against frame pointers, 40 of 50 MB
				"| cfi | 19 | 0.25% | 0.50× | 1.25× | 40.0 | 0.80× |",
				"99 Hz costs 4.00× the CPU of 19 Hz and 1.10× its RSS",
				// bigdwarf: 40/20, 45/30, 2500/1000
				"`bigdwarf` (a 1400 MiB file, 1250.0 MB of DWARF)",
				"| `.debug_info` | 800.0 |",
				"| ratio: llvm / ours (> 1: ours faster, smaller) | 2.00× | 1.50× | 2.50× |",
				"2 rounds of ours then llvm-symbolizer back to back, each figure from the round where ours compares worst",
				"| 2 | 4 3 2 | 18.00 s | 30.00 s | 990 MB | 45.00 s | 45.00 s | 2600 MB | 2.50× | 1.50× | 2.63× |",
				"Index: 150.0 MB; warm: 2.00 M/s of CPU time",
				"| bigdwarf | ours | 99.0% | 100.0% | 99.0% | 95.0% |",
				"stored it in 12.5 s (server peak RSS 300 MiB)",
				"Load average during this bench: 1 1 1 before, 2 2 2 after. Measured 2026-12-07 13:40Z at commit `abc1234`.",
				"| cold | no index in memory or in the store: the first batch builds it | 1 | 20000.0 | 500 /s | 30000.0 | 99.5% | 1100 |",
				// kernel: 2/4, 1.5/3, 700/600
				"## The kernel's debug image: vmlinux",
				"`vmlinux-6.1.0-57-amd64` (a 604 MiB file, 400.0 MB of DWARF)",
				"| ratio: llvm / ours (> 1: ours faster, smaller) | 0.50× | 0.50× | 1.17× |",
				"| vmlinux-6.1.0-57-amd64 | ours | 100.0% | 100.0% | 100.0% | 100.0% |",
			},
			plots: allPlots,
		},
		{
			name:  "the engine only",
			files: only(runFile, symbolizeFile),
			want:  []string{"| minio | 0.50 s | 3.00× |", "Not measured in this run (no symbolizer.json in the results)"},
			plots: []string{"engine-fidelity.svg", "engine-cold.svg", "engine-warm.svg", "engine-rss.svg"},
			notes: 5,
		},
		{
			name: "the engine's results of a run that took every tool's best",
			files: map[string]string{runFile: fixture[runFile],
				symbolizeFile: strings.Replace(fixture[symbolizeFile], `"ours_worst": true,`, "", 1)},
			want:  []string{"one process per run, addresses on stdin; each time the best of 2 runs."},
			plots: []string{"engine-fidelity.svg", "engine-cold.svg", "engine-warm.svg", "engine-rss.svg"},
			notes: 5,
		},
		{name: "no bench", files: only(runFile), want: []string{"`bash bench/bigdwarf/build.sh` builds it", "fetch-kernel-debug.sh amd64-6.1` fetches it"}, notes: 6},
		{name: "no run.json", files: only(symbolizeFile), wantErr: "run.json"},
		{name: "malformed results", files: map[string]string{runFile: fixture[runFile], gatewayFile: `{"runs": [`}, wantErr: "gateway.json"},
		{name: "a field of the wrong type", files: map[string]string{runFile: fixture[runFile], collectorFile: `{"runs": [{"hz": "19"}]}`}, wantErr: "collector.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := writeFixture(t, tt.files)
			out := t.TempDir()
			pagePath, plotsDir := filepath.Join(out, "docs", "benchmarks.md"), filepath.Join(out, "docs", "benchmarks")
			if err := os.MkdirAll(filepath.Dir(pagePath), 0o755); err != nil {
				t.Fatal(err)
			}
			err := generate(res, pagePath, plotsDir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pageBytes, err := os.ReadFile(pagePath)
			if err != nil {
				t.Fatal(err)
			}
			page := string(pageBytes)
			for _, w := range tt.want {
				if !strings.Contains(page, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			if n := strings.Count(page, "Not measured in this run"); n != tt.notes {
				t.Errorf("%d sections not measured, want %d", n, tt.notes)
			}
			// The page links exactly the plots written, relative to itself, and each parses as SVG.
			links := regexp.MustCompile(`!\[[^]]*\]\(([^)]+)\)`).FindAllStringSubmatch(page, -1)
			if len(links) != len(tt.plots) {
				t.Errorf("%d images on the page, want %d", len(links), len(tt.plots))
			}
			for _, l := range links {
				if !strings.HasPrefix(l[1], "benchmarks/") {
					t.Errorf("image %s is not relative to the page", l[1])
				}
			}
			for _, name := range tt.plots {
				checkSVG(t, filepath.Join(plotsDir, name))
			}
			entries, err := os.ReadDir(plotsDir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != len(tt.plots) {
				t.Errorf("%d files in the plots directory, want %d", len(entries), len(tt.plots))
			}
		})
	}
}

// checkSVG parses the file as XML to its end and checks that its root is an svg element.
func checkSVG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Errorf("%s: not XML: %v", filepath.Base(path), err)
			return
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("%s: root element %q, want svg", filepath.Base(path), root)
	}
}

// TestGenerateReproducible: the same results give the same page and plots, byte for byte, so
// a regenerated page differs from the committed one only where the figures do.
func TestGenerateReproducible(t *testing.T) {
	res := writeFixture(t, fixture)
	var outs [2]map[string][]byte
	for i := range outs {
		out := t.TempDir()
		if err := generate(res, filepath.Join(out, "benchmarks.md"), filepath.Join(out, "benchmarks")); err != nil {
			t.Fatal(err)
		}
		outs[i] = map[string][]byte{}
		err := filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			outs[i][strings.TrimPrefix(p, out)] = b
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(outs[0]) != 1+len(allPlots) {
		t.Fatalf("%d files written, want %d", len(outs[0]), 1+len(allPlots))
	}
	for name, b := range outs[0] {
		if !bytes.Equal(b, outs[1][name]) {
			t.Errorf("%s differs between two generations from the same results", name)
		}
	}
}

func TestRatio(t *testing.T) {
	for _, tt := range []struct {
		a, b float64
		want string
	}{{3, 1, "3.00×"}, {1, 4, "0.25×"}, {1, 0, "–"}, {0, 2, "0.00×"}} {
		if got := fmtRatio(ratio(tt.a, tt.b)); got != tt.want {
			t.Errorf("ratio(%v, %v) = %s, want %s", tt.a, tt.b, got, tt.want)
		}
	}
}
