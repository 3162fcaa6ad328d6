package main

import (
	"fmt"
)

const (
	bigdwarfFile = "bigdwarf.json"
	kernelFile   = "kernel.json"
)

// bigdwarf is bench/bigdwarf's JSON.
type bigdwarf struct {
	Name       string `json:"name"`
	FileMB     int    `json:"file_mb"`
	DWARFBytes int64  `json:"dwarf_bytes"`
	Sections   []struct {
		Name  string `json:"name"`
		Bytes int64  `json:"bytes"`
	} `json:"sections"`
	Recipe  string `json:"recipe"`
	Small   int    `json:"small"`
	OursBig int    `json:"ours_big"`
	Repeat  int    `json:"repeat"`
	Ours    struct {
		ColdS      float64 `json:"cold_s"`
		ColdCPUS   float64 `json:"cold_cpu_s"`
		RSSMB      float64 `json:"rss_mb"`
		IndexBytes int64   `json:"index_bytes"`
		WarmRate   float64 `json:"warm_rate"`
	} `json:"ours"`
	LLVM struct {
		ColdS    float64 `json:"cold_s"`
		ColdCPUS float64 `json:"cold_cpu_s"`
		RSSMB    float64 `json:"rss_mb"`
	} `json:"llvm"`
	// Runs are the cold rounds, ours then llvm-symbolizer back to back; Ours and LLVM above
	// are the worst round of each figure. Results written before rounds were kept have none.
	Runs []struct {
		Load string  `json:"load"`
		Ours coldRun `json:"ours"`
		LLVM coldRun `json:"llvm"`
	} `json:"runs"`
	Fidelity agreement `json:"fidelity"`
	Service  *struct {
		symbolizer
		UploadRSSMiB float64 `json:"upload_rss_mib"`
	} `json:"service"`
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	// When and at which commit, where the file was measured apart from the page's run.
	Measured string `json:"measured"`
	Revision string `json:"revision"`
}

// coldRun is one cold run's figures.
type coldRun struct {
	ColdS    float64 `json:"cold_s"`
	ColdCPUS float64 `json:"cold_cpu_s"`
	RSSMB    float64 `json:"rss_mb"`
}

// runsSaid says how the cold figures were taken from the rounds.
func (b *bigdwarf) runsSaid() string {
	if len(b.Runs) == 0 {
		return fmt.Sprintf("best of %d", b.Repeat)
	}
	return fmt.Sprintf("%d rounds of ours then llvm-symbolizer back to back, each figure from the round where ours compares worst", len(b.Runs))
}

func writeBigDWARF(p *page, b *bigdwarf) {
	p.f("## The biggest debuginfo: over 1 GB of C++ DWARF\n\n")
	if b == nil {
		p.f("Not measured in this run (no %s in the results): the file is not built. `bash bench/bigdwarf/build.sh` builds it "+
			"(about 5 minutes on 2 cores, 5.5 GB of memory for the link, into the user's cache directory), then `make bench-report` measures it.\n\n", bigdwarfFile)
		return
	}
	p.f("`bench/bigdwarf/run.sh` on `%s` (a %d MiB file, %.1f MB of DWARF), made by `bench/bigdwarf/build.sh`: g++ -g -O2 translation units "+
		"each including the standard library's headers and instantiating its templates over their own types (recipe: %s). "+
		"%d addresses sampled over the whole text, one process each, GNU time; %s.\n\n",
		b.Name, b.FileMB, float64(b.DWARFBytes)/1e6, b.Recipe, b.Small, b.runsSaid())
	writeDWARFTables(p, b)
}

// writeKernel is the kernel's debug image, measured as the biggest C++ file is and held to
// the same goals.
func writeKernel(p *page, b *bigdwarf) {
	p.f("## The kernel's debug image: vmlinux\n\n")
	if b == nil {
		p.f("Not measured in this run (no %s in the results): the kernel's debug package is not in the cache. "+
			"`bash e2e/kernels/fetch-kernels.sh && bash e2e/kernels/fetch-kernel-debug.sh amd64-6.1` fetches it (860 MB), then `make bench-report` measures it.\n\n", kernelFile)
		return
	}
	p.f("`bench/bigdwarf/run.sh` on `%s` (a %d MiB file, %.1f MB of DWARF), Debian's kernel debug image (the `-dbg` package's, fetched by "+
		"`e2e/kernels/fetch-kernel-debug.sh`): the file kernel frames are symbolized from. "+
		"%d addresses sampled over the whole text, one process each, GNU time; %s.\n\n",
		b.Name, b.FileMB, float64(b.DWARFBytes)/1e6, b.Small, b.runsSaid())
	writeDWARFTables(p, b)
}

// writeDWARFTables writes a big file's sections, cold runs against llvm-symbolizer, answers
// and service phases.
func writeDWARFTables(p *page, b *bigdwarf) {
	var rows [][]string
	for _, s := range b.Sections {
		rows = append(rows, []string{"`" + s.Name + "`", fmtNum(float64(s.Bytes)/1e6, 1)})
	}
	p.table([]string{"section", "MB"}, rows)
	p.table([]string{"", "cold wall", "cold CPU", "peak RSS"}, [][]string{
		{"ours (index built from the DWARF)", fmtNum(b.Ours.ColdS, 2) + " s", fmtNum(b.Ours.ColdCPUS, 2) + " s", fmtNum(b.Ours.RSSMB, 0) + " MB"},
		{"llvm-symbolizer", fmtNum(b.LLVM.ColdS, 2) + " s", fmtNum(b.LLVM.ColdCPUS, 2) + " s", fmtNum(b.LLVM.RSSMB, 0) + " MB"},
		{"ratio: llvm / ours (> 1: ours faster, smaller)", fmtRatio(ratio(b.LLVM.ColdS, b.Ours.ColdS)), fmtRatio(ratio(b.LLVM.ColdCPUS, b.Ours.ColdCPUS)),
			fmtRatio(ratio(b.LLVM.RSSMB, b.Ours.RSSMB))},
	})
	if len(b.Runs) > 0 {
		var rows [][]string
		for i, r := range b.Runs {
			rows = append(rows, []string{fmt.Sprint(i + 1), r.Load,
				fmtNum(r.Ours.ColdS, 2) + " s", fmtNum(r.Ours.ColdCPUS, 2) + " s", fmtNum(r.Ours.RSSMB, 0) + " MB",
				fmtNum(r.LLVM.ColdS, 2) + " s", fmtNum(r.LLVM.ColdCPUS, 2) + " s", fmtNum(r.LLVM.RSSMB, 0) + " MB",
				fmtRatio(ratio(r.LLVM.ColdS, r.Ours.ColdS)), fmtRatio(ratio(r.LLVM.ColdCPUS, r.Ours.ColdCPUS)), fmtRatio(ratio(r.LLVM.RSSMB, r.Ours.RSSMB))})
		}
		p.f("Each round (load average at its start; ratios llvm / ours):\n\n")
		p.table([]string{"round", "load", "ours wall", "ours CPU", "ours RSS", "llvm wall", "llvm CPU", "llvm RSS", "wall", "CPU", "RSS"}, rows)
	}
	p.f("The goals, held in the worst round on a busy machine: cold wall time at most 1.2× llvm-symbolizer's (ratio at least 0.83×), "+
		"cold CPU at most its (ratio at least 1×), peak memory at most 0.75× its (ratio at least 1.33×). "+
		"Index: %.1f MB; warm: %s of CPU time (index cached, between %d and %d addresses).\n\n",
		float64(b.Ours.IndexBytes)/1e6, fmtRate(b.Ours.WarmRate), b.Small, b.OursBig)
	p.table([]string{"binary", "tool", "innermost frame", "file:line", "function name", "whole inline chain"}, [][]string{agreementRow(b.Name, b.Fidelity)})
	if s := b.Service; s != nil {
		p.f("Through the service (bench/symbolizer's driver, `symbolizer serve` on a loopback port): `symbolizer upload` sent, verified and stored it in %.1f s "+
			"(server peak RSS %.0f MiB); Symbolize calls of %d addresses:\n\n", s.UploadS, s.UploadRSSMiB, s.Batch)
		var srows [][]string
		for _, ph := range s.Phases {
			srows = append(srows, []string{ph.Phase, phaseMeaning[ph.Phase], fmt.Sprint(ph.Batches), fmtNum(ph.P50ms, 1), fmtRate(ph.AddrsPerSec),
				orDash(ph.CPUmsBatch > 0, fmtNum(ph.CPUmsBatch, 1)), orDash(ph.Resolved > 0, fmtNum(100*ph.Resolved, 1)+"%"), orDash(ph.RSSMiB > 0, fmtNum(ph.RSSMiB, 0))})
		}
		p.table([]string{"phase", "what it measures", "calls", "p50 ms", "addresses/s", "server CPU ms/call", "resolved", "RSS MiB"}, srows)
	}
	p.loadAndWhen(b.LoadBefore, b.LoadAfter, b.Measured, b.Revision)
}
