package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The results directory bench/report/run.sh fills: one JSON file per bench script (each
// written by the script under RESULTS=path) and run.json, the machine and the run's timing.
const (
	runFile        = "run.json"
	symbolizeFile  = "symbolize.json"
	symbolizerFile = "symbolizer.json"
	gatewayFile    = "gateway.json"
	collectorFile  = "collector.json"
)

// run is run.json: what the page says about the machine and the run.
type run struct {
	Started    string  `json:"started"` // RFC 3339, UTC
	ElapsedS   float64 `json:"elapsed_s"`
	CPUModel   string  `json:"cpu_model"`
	Cores      int     `json:"cores"`
	MemKiB     int64   `json:"mem_kib"`
	Kernel     string  `json:"kernel"`
	Go         string  `json:"go"`
	LoadStart  string  `json:"load_start"`
	LoadEnd    string  `json:"load_end"`
	Command    string  `json:"command"`
	Settings   string  `json:"settings"`
	ProfsymRev string  `json:"revision"`
}

// symbolize is bench/symbolize's JSON.
type symbolize struct {
	Small   int `json:"small"`
	Big     int `json:"big"`
	OursBig int `json:"ours_big"`
	EUBig   int `json:"eu_big"`
	Repeat  int `json:"repeat"`
	// OursWorst: each figure of ours is the worst of Repeat runs, each reference's the best of
	// its runs; unset in results of a run that took the best of every tool's.
	OursWorst bool `json:"ours_worst"`
	// When and at which commit, where the engine was measured apart from the page's run.
	Measured   string            `json:"measured"`
	Revision   string            `json:"revision"`
	LoadBefore string            `json:"load_before"`
	LoadAfter  string            `json:"load_after"`
	Binaries   []symbolizeBinary `json:"binaries"`
	Stripped   *stripped         `json:"stripped"`
}

type symbolizeBinary struct {
	Name string `json:"name"`
	MB   int    `json:"mb"`
	Go   bool   `json:"go"`
	Ours struct {
		ColdS      float64 `json:"cold_s"`
		CachedS    float64 `json:"cached_s"`
		WarmRate   float64 `json:"warm_rate"`
		RSSMB      float64 `json:"rss_mb"`
		RSSSmallMB float64 `json:"rss_small_mb"`
	} `json:"ours"`
	LLVM struct {
		ColdS    float64 `json:"cold_s"`
		WarmRate float64 `json:"warm_rate"`
		RSSMB    float64 `json:"rss_mb"`
	} `json:"llvm"`
	EU struct {
		ColdS      float64 `json:"cold_s"`
		WarmRate   float64 `json:"warm_rate"`
		RSSSmallMB float64 `json:"rss_small_mb"`
	} `json:"eu"`
	Fidelity []agreement `json:"fidelity"`
}

// agreement is bench/symbolize/agree's output.
type agreement struct {
	Label     string `json:"label"`
	Addresses int    `json:"addresses"`
	Innermost int    `json:"innermost"`
	Function  int    `json:"function"`
	Location  int    `json:"location"`
	Chain     int    `json:"chain"`
}

type toolCost struct {
	WallS float64 `json:"wall_s"`
	CPUS  float64 `json:"cpu_s"`
	RSSMB float64 `json:"rss_mb"`
}

type stripped struct {
	Addresses int         `json:"addresses"`
	Ours      toolCost    `json:"ours"`
	A2L       toolCost    `json:"a2l"`
	Fidelity  []agreement `json:"fidelity"`
}

// symbolizer is bench/symbolizer's JSON.
type symbolizer struct {
	Binary        string  `json:"binary"`
	BinaryMiB     float64 `json:"binary_mib"`
	Batch         int     `json:"batch"`
	Batches       int     `json:"batches"`
	Rounds        int     `json:"rounds"`
	UploadS       float64 `json:"upload_s"`
	Phases        []phase `json:"phases"`
	RedisMsCached float64 `json:"redis_ms_per_batch_cached"`
	RedisMsRedis  float64 `json:"redis_ms_per_batch_redis"`
}

type phase struct {
	Phase       string  `json:"phase"`
	Batches     int     `json:"batches"`
	AddrsPerSec float64 `json:"addrs_per_s"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	P99DecodeMs float64 `json:"p99_decode_ms"`
	CPUmsBatch  float64 `json:"server_cpu_ms_per_batch"`
	Resolved    float64 `json:"resolved_share"`
	RSSMiB      float64 `json:"rss_mib"`
}

// gateway is bench/gateway's JSON.
type gateway struct {
	LoadBefore string       `json:"load_before"`
	LoadAfter  string       `json:"load_after"`
	Runs       []gatewayRun `json:"runs"`
}

type gatewayRun struct {
	Label        string  `json:"label"`
	Locations    int     `json:"locations"`
	Mappings     int     `json:"mappings"`
	Samples      int     `json:"samples"`
	Pairs        int     `json:"pairs"`
	GatewayP50ms float64 `json:"gateway_p50_ms"`
	GatewayP99ms float64 `json:"gateway_p99_ms"`
	DirectP50ms  float64 `json:"direct_p50_ms"`
	DirectP99ms  float64 `json:"direct_p99_ms"`
	AddedP50ms   float64 `json:"added_p50_ms"`
	AddedP99ms   float64 `json:"added_p99_ms"`
	PairP50ms    float64 `json:"pair_p50_ms"`
	PairP99ms    float64 `json:"pair_p99_ms"`
	Senders      int     `json:"senders"`
	RequestsPerS float64 `json:"requests_per_s"`
	LocsPerS     float64 `json:"locations_per_s"`
}

// collector is bench/collector's JSON.
type collector struct {
	DurationS  int            `json:"duration_s"`
	Binaries   int            `json:"binaries"`
	CPUs       int            `json:"cpus"`
	LoadBefore string         `json:"load_before"`
	LoadAfter  string         `json:"load_after"`
	Runs       []collectorRun `json:"runs"`
}

type collectorRun struct {
	Unwinder string   `json:"unwinder"`
	Hz       int      `json:"hz"`
	CPUPct   float64  `json:"cpu_pct_core"`
	RSSMB    float64  `json:"rss_mb"`
	Samples  int      `json:"samples"`
	Tables   int      `json:"tables"`
	Rows     int      `json:"rows"`
	RowMapMB float64  `json:"row_map_mb"`
	WholePct *float64 `json:"whole_pct"`
}

// results is everything the page is made of. A bench that did not run leaves its field nil
// and its section says so.
type results struct {
	Run        run
	Symbolize  *symbolize
	Symbolizer *symbolizer
	Gateway    *gateway
	Collector  *collector
	BigDWARF   *bigdwarf
	Kernel     *bigdwarf
}

// load reads a results directory. run.json is required; a missing bench file is a section
// not measured, a malformed one an error.
func load(dir string) (*results, error) {
	r := &results{}
	if err := readJSON(filepath.Join(dir, runFile), &r.Run); err != nil {
		return nil, err
	}
	for name, dst := range map[string]any{
		symbolizeFile:  &r.Symbolize,
		symbolizerFile: &r.Symbolizer,
		gatewayFile:    &r.Gateway,
		collectorFile:  &r.Collector,
		bigdwarfFile:   &r.BigDWARF,
		kernelFile:     &r.Kernel,
	} {
		err := readJSON(filepath.Join(dir, name), dst)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

func readJSON(path string, dst any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
