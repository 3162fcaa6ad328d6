// Command report writes docs/benchmarks.md and its plots (SVG, drawn with gonum/plot) from the
// JSON results of the bench/ scripts. bench/report/run.sh (`make bench-report`) runs the
// scripts with RESULTS set and then this command.
//
// Usage: report -results DIR [-page docs/benchmarks.md] [-plots docs/benchmarks]
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	resultsDir := flag.String("results", "", "directory of the bench results (run.json, symbolize.json, ...)")
	pagePath := flag.String("page", "docs/benchmarks.md", "the page to write")
	plotsDir := flag.String("plots", "docs/benchmarks", "directory of the plots")
	flag.Parse()
	if *resultsDir == "" {
		fmt.Fprintln(os.Stderr, "report: -results is required")
		os.Exit(2)
	}
	if err := generate(*resultsDir, *pagePath, *plotsDir); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}
