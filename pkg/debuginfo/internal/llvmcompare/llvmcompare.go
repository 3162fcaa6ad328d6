// Package llvmcompare checks profsym's symbolization engine against llvm-symbolizer: it
// samples addresses inside the functions of a binary, runs llvm-symbolizer on them in one
// batched process, and compares the two answers frame by frame (function chain, then file:line
// of every frame). Differences that are understood are classified with a reason, so a test
// can hold the engine to a bar without hiding what llvm-symbolizer gets wrong or spells
// differently.
package llvmcompare

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Frame is one frame of an answer, from either side; the fields compared are the ones both
// tools fill.
type Frame struct {
	Function string
	// LinkageName is the mangled name; only our side has it (llvm-symbolizer's JSON does not).
	LinkageName string
	File        string
	Line        uint32
	Column      uint32
}

func (f Frame) String() string {
	fn := f.Function
	if fn == "" {
		fn = "??"
	}
	file := f.File
	if file == "" {
		file = "??"
	}
	return fmt.Sprintf("%s at %s:%d", fn, file, f.Line)
}

// Chain formats frames innermost first, the order both tools use.
func Chain(frames []Frame) string {
	if len(frames) == 0 {
		return "(none)"
	}
	parts := make([]string, len(frames))
	for i, f := range frames {
		parts[i] = f.String()
	}
	return strings.Join(parts, " <- ")
}

// Tool is how to run llvm-symbolizer; the zero value runs "llvm-symbolizer" from PATH.
type Tool struct {
	// Path of the executable; empty means "llvm-symbolizer".
	Path string
	// DebugFileDirectories are passed as --debug-file-directory.
	DebugFileDirectories []string
	// DWP, when set, is the DWARF package of a -gsplit-dwarf obj (--dwp), instead of the
	// obj.dwp beside it.
	DWP string
}

// Symbolize runs one llvm-symbolizer process over all addrs of obj (fed on stdin, one per
// line) and returns one answer per address, in order. Unknown frames (llvm-symbolizer prints
// an empty or "??" function and file with line 0) come back as an empty chain.
func (t Tool) Symbolize(ctx context.Context, obj string, addrs []uint64) ([][]Frame, error) {
	path := t.Path
	if path == "" {
		path = "llvm-symbolizer"
	}
	args := []string{"--output-style=JSON", "--inlines", "--demangle", "--obj=" + obj}
	for _, d := range t.DebugFileDirectories {
		args = append(args, "--debug-file-directory="+d)
	}
	if t.DWP != "" {
		args = append(args, "--dwp="+t.DWP)
	}
	var in bytes.Buffer
	for _, a := range addrs {
		fmt.Fprintf(&in, "0x%x\n", a)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("run %s on %s: %w: %s", path, obj, err, firstLine(stderr.String()))
	}
	res, err := ParseJSON(bytes.NewReader(out))
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", path, obj, err)
	}
	if len(res) != len(addrs) {
		return nil, fmt.Errorf("%s on %s: %d answers for %d addresses", path, obj, len(res), len(addrs))
	}
	frames := make([][]Frame, len(res))
	for i, r := range res {
		if r.Address != addrs[i] {
			return nil, fmt.Errorf("%s on %s: answer %d is for 0x%x, asked 0x%x", path, obj, i, r.Address, addrs[i])
		}
		frames[i] = r.Frames
	}
	return frames, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Result is one line of llvm-symbolizer's --output-style=JSON output (our CLI writes the same).
type Result struct {
	Address uint64
	Frames  []Frame
}

type jsonLine struct {
	Address string `json:"Address"`
	Error   *struct {
		Message string `json:"Message"`
	} `json:"Error"`
	Symbol []struct {
		FunctionName string `json:"FunctionName"`
		FileName     string `json:"FileName"`
		Line         uint32 `json:"Line"`
		Column       uint32 `json:"Column"`
	} `json:"Symbol"`
}

// maxLine bounds one JSON line: a deep inline chain with long C++ names stays far below it.
const maxLine = 16 << 20

// ParseJSON reads JSON lines as llvm-symbolizer 14 writes them with --output-style=JSON.
func ParseJSON(r io.Reader) ([]Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var out []Result
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var jl jsonLine
		if err := json.Unmarshal(line, &jl); err != nil {
			return nil, fmt.Errorf("JSON line %d: %w", n, err)
		}
		if jl.Error != nil {
			return nil, fmt.Errorf("JSON line %d: symbolizer error: %s", n, jl.Error.Message)
		}
		addr, err := strconv.ParseUint(strings.TrimPrefix(jl.Address, "0x"), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("JSON line %d: address %q: %w", n, jl.Address, err)
		}
		var frames []Frame
		for _, s := range jl.Symbol {
			f := Frame{Function: unknown(s.FunctionName), File: unknown(s.FileName), Line: s.Line, Column: s.Column}
			if f == (Frame{}) {
				continue
			}
			frames = append(frames, f)
		}
		out = append(out, Result{Address: addr, Frames: frames})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read JSON lines: %w", err)
	}
	return out, nil
}

func unknown(s string) string {
	if s == "??" {
		return ""
	}
	return s
}

// Func is a function symbol to sample addresses from.
type Func struct {
	Name string
	Addr uint64
	Size uint64
}

// FunctionAddrs returns every address of every function of FunctionSymbols(path), the
// addresses the comparisons ask both tools about.
func FunctionAddrs(path string) ([]uint64, error) {
	fns, err := FunctionSymbols(path)
	if err != nil {
		return nil, err
	}
	var addrs []uint64
	for _, f := range fns {
		for a := f.Addr; a < f.Addr+f.Size; a++ {
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}

// FunctionSymbols returns the sized FUNC symbols of path's .symtab that lie in executable
// sections, one per start address (aliases share an address and would be sampled twice).
func FunctionSymbols(path string) ([]Func, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: symbol table: %w", path, err)
	}
	seen := map[uint64]bool{}
	var out []Func
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Section == elf.SHN_UNDEF ||
			int(s.Section) >= len(f.Sections) || seen[s.Value] {
			continue
		}
		sec := f.Sections[s.Section]
		if sec.Flags&elf.SHF_EXECINSTR == 0 || s.Value < sec.Addr || s.Value+s.Size > sec.Addr+sec.Size {
			continue
		}
		seen[s.Value] = true
		out = append(out, Func{Name: s.Name, Addr: s.Value, Size: s.Size})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no sized function symbols in .symtab", path)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// Sample draws perFunc random offsets inside every function, then keeps a random subset of
// at most limit addresses. The same seed gives the same addresses; the result is sorted.
func Sample(funcs []Func, perFunc, limit int, seed uint64) []uint64 {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	seen := map[uint64]bool{}
	var out []uint64
	for _, f := range funcs {
		for i := 0; i < perFunc; i++ {
			a := f.Addr + rng.Uint64N(f.Size)
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	if limit > 0 && len(out) > limit {
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		out = out[:limit]
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// PerFunc is how many offsets per function Sample needs so that about want addresses come
// out of n functions (at least one each).
func PerFunc(want, n int) int {
	if n == 0 {
		return 0
	}
	return max(1, (want+n-1)/n)
}

// Mode says what a comparison holds the engine to.
type Mode int

const (
	// ModeFull compares the whole inline chain and file:line of every frame.
	ModeFull Mode = iota
	// ModeSymbols compares only the function name of the outermost frame: the reference
	// answers from a symbol table, with no inline chains and no lines.
	ModeSymbols
)

// Kind of a difference.
type Kind string

const (
	KindChain Kind = "chain" // the function chains differ
	KindLine  Kind = "line"  // same chain, a frame's file:line differs
)

// Diff is one address where the two answers differ.
type Diff struct {
	Addr uint64
	Kind Kind
	Ours []Frame
	Ref  []Frame
	// Reason explains a known, justified difference; empty when unexplained.
	Reason string
	// Diagnosis explains an unexplained difference whose cause is understood but which is
	// not justified (the engine should change); set by Diagnose.
	Diagnosis string
}

// Diagnose fills Diagnosis of the unexplained differences that a diagnoser recognizes.
func Diagnose(r *Report, diagnosers ...Classifier) {
	for i := range r.Diffs {
		if r.Diffs[i].Reason == "" {
			r.Diffs[i].Diagnosis = classify(r.Diffs[i], diagnosers)
		}
	}
}

// Classifier recognizes a known difference and says why it is justified; ok is false when it
// does not apply.
type Classifier func(d Diff) (reason string, ok bool)

// Report is the outcome of one comparison.
type Report struct {
	Addresses int
	// ChainAgree counts addresses whose chains are equal; ChainKnown those that differ in a
	// classified way.
	ChainAgree, ChainKnown int
	// LineCompared counts addresses where the reference has a file or line for some frame
	// (llvm-symbolizer read DWARF there); LineAgree those where every frame's file:line is equal
	// and LineKnown those that differ in a classified way.
	LineCompared, LineAgree, LineKnown int
	Diffs                              []Diff
}

// ChainRate is the share of addresses whose chains agree or differ for a known reason.
func (r Report) ChainRate() float64 {
	return rate(r.ChainAgree+r.ChainKnown, r.Addresses)
}

// LineRate is the share of line-compared addresses whose file:line agrees, or differs for a
// known reason.
func (r Report) LineRate() float64 { return rate(r.LineAgree+r.LineKnown, r.LineCompared) }

// RawChainRate and RawLineRate count exact agreement only.
func (r Report) RawChainRate() float64 { return rate(r.ChainAgree, r.Addresses) }
func (r Report) RawLineRate() float64  { return rate(r.LineAgree, r.LineCompared) }

func rate(n, d int) float64 {
	if d == 0 {
		return 1
	}
	return float64(n) / float64(d)
}

// Unexplained returns the differences no classifier accepted.
func (r Report) Unexplained() []Diff {
	var out []Diff
	for _, d := range r.Diffs {
		if d.Reason == "" {
			out = append(out, d)
		}
	}
	return out
}

// Compare holds ours against ref, address by address.
func Compare(addrs []uint64, ours, ref [][]Frame, mode Mode, classifiers ...Classifier) (Report, error) {
	if len(ours) != len(addrs) || len(ref) != len(addrs) {
		return Report{}, errors.New("llvmcompare: answers and addresses differ in number")
	}
	rep := Report{Addresses: len(addrs)}
	for i, a := range addrs {
		o, r := ours[i], ref[i]
		if mode == ModeSymbols {
			o, r = outermostName(o), outermostName(r)
		}
		if !sameChain(o, r) {
			d := Diff{Addr: a, Kind: KindChain, Ours: o, Ref: r}
			d.Reason = classify(d, classifiers)
			if d.Reason != "" {
				rep.ChainKnown++
			}
			rep.Diffs = append(rep.Diffs, d)
		} else {
			rep.ChainAgree++
		}
		// file:line is held frame by frame on its own, whatever the names say, so a naming
		// difference does not hide (or excuse) a location difference.
		if mode == ModeFull && (located(r) || located(o)) {
			rep.LineCompared++
			if sameLines(o, r) {
				rep.LineAgree++
				continue
			}
			d := Diff{Addr: a, Kind: KindLine, Ours: o, Ref: r}
			d.Reason = classify(d, classifiers)
			if d.Reason != "" {
				rep.LineKnown++
			}
			rep.Diffs = append(rep.Diffs, d)
		}
	}
	return rep, nil
}

func classify(d Diff, cs []Classifier) string {
	for _, c := range cs {
		if reason, ok := c(d); ok {
			return reason
		}
	}
	return ""
}

func outermostName(fs []Frame) []Frame {
	if len(fs) == 0 || fs[len(fs)-1].Function == "" {
		return nil
	}
	last := fs[len(fs)-1]
	return []Frame{{Function: last.Function, LinkageName: last.LinkageName}}
}

func sameChain(a, b []Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Function != b[i].Function {
			return false
		}
	}
	return true
}

// located says whether some frame has a file or a line. A file with line 0 counts: it is
// the STT_FILE symbol's name that llvm-symbolizer prints for a local function without line
// rows (code built without -g), or the file of a line-0 row for compiler-generated code.
func located(fs []Frame) bool {
	for _, f := range fs {
		if f.Line != 0 || f.File != "" {
			return true
		}
	}
	return false
}

func sameLines(a, b []Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Line != b[i].Line {
			return false
		}
		if cleanPath(a[i].File) != cleanPath(b[i].File) {
			return false
		}
	}
	return true
}

func cleanPath(p string) string {
	if p == "" {
		return ""
	}
	return filepath.Clean(p)
}

// Summary counts differences by kind and reason; unexplained ones under "unexplained <kind>"
// and their diagnosis, if any.
func (r Report) Summary() map[string]int {
	m := map[string]int{}
	for _, d := range r.Diffs {
		switch {
		case d.Reason != "":
			m["known "+string(d.Kind)+": "+d.Reason]++
		case d.Diagnosis != "":
			m["unexplained "+string(d.Kind)+", diagnosed: "+d.Diagnosis]++
		default:
			m["unexplained "+string(d.Kind)]++
		}
	}
	return m
}

// AddrToLine asks GNU addr2line (-a -f -i -C) about addrs of obj: a third opinion that
// decides, for an unexplained difference, which of the two sides a second independent
// DWARF reader agrees with.
func AddrToLine(ctx context.Context, obj string, addrs []uint64) ([][]Frame, error) {
	if len(addrs) == 0 {
		return nil, nil
	}
	var in bytes.Buffer
	for _, a := range addrs {
		fmt.Fprintf(&in, "0x%x\n", a)
	}
	cmd := exec.CommandContext(ctx, "addr2line", "-a", "-f", "-i", "-C", "-e", obj)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("run addr2line on %s: %w: %s", obj, err, firstLine(stderr.String()))
	}
	return parseAddr2line(out, len(addrs))
}

// parseAddr2line splits addr2line -a -f output into answers: an "0x..." address line, then
// function and file:line pairs, innermost first.
func parseAddr2line(out []byte, n int) ([][]Frame, error) {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	var res [][]Frame
	cur := -1
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "0x") && i+1 < len(lines) {
			res = append(res, nil)
			cur++
			continue
		}
		if cur < 0 || i+1 >= len(lines) {
			return nil, fmt.Errorf("addr2line output line %d: unexpected %q", i+1, l)
		}
		loc := lines[i+1]
		i++
		if j := strings.Index(loc, " (discriminator"); j >= 0 {
			loc = loc[:j]
		}
		f := Frame{Function: unknown(l)}
		if k := strings.LastIndexByte(loc, ':'); k >= 0 {
			f.File = unknown(loc[:k])
			if v, err := strconv.ParseUint(loc[k+1:], 10, 32); err == nil {
				f.Line = uint32(v)
			}
		}
		if f != (Frame{}) {
			res[cur] = append(res[cur], f)
		}
	}
	if len(res) != n {
		return nil, fmt.Errorf("addr2line: %d answers for %d addresses", len(res), n)
	}
	return res, nil
}

// Verdict says which side a third opinion (addr2line) agrees with on d.
func Verdict(d Diff, third []Frame) string {
	cmp := sameChain
	if d.Kind == KindLine {
		cmp = sameLines
	}
	o, r := cmp(d.Ours, third), cmp(d.Ref, third)
	switch {
	case o && !r:
		return "addr2line agrees with ours"
	case r && !o:
		return "addr2line agrees with llvm-symbolizer"
	case o && r:
		return "addr2line agrees with both"
	default:
		return "addr2line agrees with neither: " + Chain(third)
	}
}

// FirstDifference names the first frame where d's two answers part, for logs where whole
// chains of long C++ names are hard to compare by eye.
func FirstDifference(d Diff) string {
	n := min(len(d.Ours), len(d.Ref))
	for i := 0; i < n; i++ {
		o, r := d.Ours[i], d.Ref[i]
		if d.Kind == KindChain && o.Function != r.Function {
			return fmt.Sprintf("frame %d function: %s", i, nameDiff(o.Function, r.Function))
		}
		if d.Kind == KindLine && (o.Line != r.Line || (o.Line != 0 && cleanPath(o.File) != cleanPath(r.File))) {
			return fmt.Sprintf("frame %d (%s) location: ours %s:%d, llvm %s:%d", i, o.Function, o.File, o.Line, r.File, r.Line)
		}
	}
	if len(d.Ours) != len(d.Ref) {
		return fmt.Sprintf("chain length: ours %d frames, llvm %d", len(d.Ours), len(d.Ref))
	}
	return "none"
}

// nameDiff shows where two long names part: the common prefix is elided when it is long.
func nameDiff(o, r string) string {
	const keep = 40
	if len(o)+len(r) < 240 {
		return fmt.Sprintf("ours %q, llvm %q", o, r)
	}
	p := 0
	for p < len(o) && p < len(r) && o[p] == r[p] {
		p++
	}
	from := max(0, p-keep)
	cut := func(s string) string {
		s = s[from:]
		if len(s) > 3*keep {
			s = s[:3*keep] + "..."
		}
		return s
	}
	return fmt.Sprintf("after %d equal bytes: ours ...%q, llvm ...%q", from, cut(o), cut(r))
}
