// Command agree measures a symbolizer's fidelity against a reference: the share of addresses
// whose innermost frame (function name, source file and line) is the reference's, and, for
// tools that report inline frames, the share whose whole chain of frames is. bench/symbolize
// runs it on the answers of ours, eu-addr2line and go tool addr2line, with llvm-symbolizer's
// answers to the same addresses as the reference.
//
// Formats:
//
//	llvm-json  one JSON object per address with a Symbol array, innermost frame first
//	           (llvm-symbolizer --output-style=JSON, and `symbolizer symbolize`, which writes
//	           the same)
//	eu         eu-addr2line -a -f -i -A -C: an address line (0x...), then a function line and
//	           a file:line[:column] line per frame, innermost first; an inlined frame's
//	           function line reads "NAME inlined at FILE:LINE in CALLER"
//	goa2l      go tool addr2line: a function line and a file:line line per address (no
//	           inline frames)
//
// Files are compared as cleaned paths; "??", "?" and empty names mean unknown, and two
// unknowns agree.
//
// Usage: agree -ref REF -cand CAND -format FORMAT [-ref-format FORMAT] [-label NAME]
// It prints one JSON object: {"label", "addresses", "innermost", "function", "location",
// "chain"}: innermost counts the addresses whose innermost frame agrees whole, function those
// whose innermost function name does (file and line aside), location those whose innermost
// file and line do (the name aside: demanglers and Go's ABI suffixes write names differently),
// chain those whose every frame does (-1 when the candidate's format has no inline frames).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

type frame struct {
	fn   string
	file string
	line int
}

// Result is what agree prints.
type Result struct {
	Label     string `json:"label,omitempty"`
	Addresses int    `json:"addresses"`
	Innermost int    `json:"innermost"`
	Function  int    `json:"function"`
	Location  int    `json:"location"`
	Chain     int    `json:"chain"`
}

func main() {
	ref := flag.String("ref", "", "reference answers")
	refFormat := flag.String("ref-format", "llvm-json", "format of -ref")
	cand := flag.String("cand", "", "candidate answers")
	format := flag.String("format", "llvm-json", "format of -cand: llvm-json, eu or goa2l")
	label := flag.String("label", "", "name of the candidate in the output")
	flag.Parse()
	res, err := run(*ref, *refFormat, *cand, *format)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agree:", err)
		os.Exit(1)
	}
	res.Label = *label
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "agree:", err)
		os.Exit(1)
	}
}

func run(refPath, refFormat, candPath, candFormat string) (Result, error) {
	ref, err := readFile(refPath, refFormat)
	if err != nil {
		return Result{}, err
	}
	cand, err := readFile(candPath, candFormat)
	if err != nil {
		return Result{}, err
	}
	return compare(ref, cand, candFormat != "goa2l")
}

func readFile(path, format string) ([][]frame, error) {
	if path == "" {
		return nil, fmt.Errorf("no %s file given", format)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	answers, err := parse(f, format)
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", path, format, err)
	}
	return answers, nil
}

func compare(ref, cand [][]frame, chains bool) (Result, error) {
	if len(ref) != len(cand) {
		return Result{}, fmt.Errorf("%d reference answers, %d candidate answers: not the same addresses", len(ref), len(cand))
	}
	r := Result{Addresses: len(ref), Chain: -1}
	if chains {
		r.Chain = 0
	}
	for i := range ref {
		a, b := ref[i], cand[i]
		if len(a) > 0 && len(b) > 0 && same(a[0], b[0]) || unknown(a) && unknown(b) {
			r.Innermost++
		}
		if len(a) > 0 && len(b) > 0 && a[0].fn == b[0].fn || unknown(a) && unknown(b) {
			r.Function++
		}
		if len(a) > 0 && len(b) > 0 && a[0].file == b[0].file && a[0].line == b[0].line || unknown(a) && unknown(b) {
			r.Location++
		}
		if chains && sameChain(a, b) {
			r.Chain++
		}
	}
	return r, nil
}

func unknown(fs []frame) bool { return len(fs) == 0 || len(fs) == 1 && fs[0] == frame{} }

func same(a, b frame) bool { return a == b }

func sameChain(a, b []frame) bool {
	if unknown(a) && unknown(b) {
		return true
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !same(a[i], b[i]) {
			return false
		}
	}
	return true
}

func norm(fn, file string, line int) frame {
	if fn == "??" || fn == "?" {
		fn = ""
	}
	if file == "??" || file == "?" || file == "" {
		file, line = "", 0
	} else {
		file = filepath.Clean(file)
	}
	return frame{fn, file, line}
}

func parse(r io.Reader, format string) ([][]frame, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	switch format {
	case "llvm-json":
		return parseJSON(sc)
	case "eu":
		return parseEU(sc)
	case "goa2l":
		return parseGoA2L(sc)
	}
	return nil, fmt.Errorf("unknown format %q (want llvm-json, eu or goa2l)", format)
}

func parseJSON(sc *bufio.Scanner) ([][]frame, error) {
	var out [][]frame
	for n := 1; sc.Scan(); n++ {
		var v struct {
			Symbol []struct {
				FunctionName string
				FileName     string
				Line         int
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		fs := make([]frame, 0, len(v.Symbol))
		for _, s := range v.Symbol {
			fs = append(fs, norm(s.FunctionName, s.FileName, s.Line))
		}
		out = append(out, fs)
	}
	return out, sc.Err()
}

// splitFileLine splits "FILE:LINE" or "FILE:LINE:COLUMN".
func splitFileLine(s string) (string, int, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("%q: no :LINE", s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return "", 0, fmt.Errorf("%q: line %w", s, err)
	}
	if j := strings.LastIndexByte(s[:i], ':'); j >= 0 {
		if m, err := strconv.Atoi(s[j+1 : i]); err == nil {
			return s[:j], m, nil // FILE:LINE:COLUMN
		}
	}
	return s[:i], n, nil
}

func parseEU(sc *bufio.Scanner) ([][]frame, error) {
	var out [][]frame
	var fn string
	haveFn := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "0x") && !haveFn:
			out = append(out, nil)
		case len(out) == 0:
			return nil, fmt.Errorf("line %d: %q before the first address line", n, line)
		case !haveFn:
			fn, _, _ = strings.Cut(line, " inlined at ")
			haveFn = true
		default:
			file, ln, err := splitFileLine(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			out[len(out)-1] = append(out[len(out)-1], norm(fn, file, ln))
			haveFn = false
		}
	}
	if haveFn {
		return nil, fmt.Errorf("last frame has a function line and no file:line line")
	}
	return out, sc.Err()
}

func parseGoA2L(sc *bufio.Scanner) ([][]frame, error) {
	var out [][]frame
	for n := 1; sc.Scan(); n++ {
		fn := sc.Text()
		if !sc.Scan() {
			return nil, fmt.Errorf("line %d: function %q without a file:line line", n, fn)
		}
		n++
		file, ln, err := splitFileLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, []frame{norm(fn, file, ln)})
	}
	return out, sc.Err()
}
