//go:build linux

package arm64

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/e2e/guest"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/otlpattr"
)

// libcTail is how every C and C++ main is called.
var libcTail = []string{"main", "__libc_start_call_main"}

// workload is one program testdata/init.sh starts in the guest, and what its stacks must
// show.
type workload struct {
	name string // as init.sh names it; the binary is /w/<name>
	// chain is the innermost-first sequence of functions a sample must contain (others may
	// sit between), each matched by nameMatches.
	chain    []string
	minShare float64
	// from, when set, limits the share to the samples whose innermost user frame is a
	// function of the program's own (a Go runtime's samples outside the program's code, such
	// as preemption and its futex calls, stop where the runtime switches stacks).
	from string
}

var workloads = []workload{
	// Issue thresholds: 95% whole through code without frame pointers, 90% through qsort.
	{name: "chain-gcc", chain: append([]string{"leaf", "f6", "f5", "f4", "f3", "f2", "f1"}, libcTail...), minShare: 0.95},
	{name: "chain-clang", chain: append([]string{"leaf", "f6", "f5", "f4", "f3", "f2", "f1"}, libcTail...), minShare: 0.95},
	{name: "chain-pac", chain: append([]string{"leaf", "f6", "f5", "f4", "f3", "f2", "f1"}, libcTail...), minShare: 0.95},
	{name: "qsort", chain: append([]string{"cmp", "msort_with_tmp"}, libcTail...), minShare: 0.90},
	// The C++ program also runs in libstdc++ and libc (string growth): the whole chain is
	// from wherever it is up to main.
	{name: "chain-cxx", chain: append([]string{"wl::Hash::run"}, libcTail...), minShare: 0.90},
	// Under emulation the Go runtime's own work (preemption signals, futex wake-ups) takes a
	// large part of the process's time; the chain is checked on the program's own samples.
	{name: "chain-go", chain: []string{"main.leaf", "main.middle", "main.main"}, minShare: 0.95, from: "main."},
	// Mostly in the kernel: the user part of its stacks comes from the registers saved at
	// the system call.
	{name: "reader", chain: append([]string{"reader"}, libcTail...), minShare: 0.90},
	// A signal handler, which runs most of the time: through the vDSO's
	// __kernel_rt_sigreturn, whose registers come from the kernel's rt_sigframe, into the
	// interrupted chain. Under emulation the rt_sigreturn system call itself takes a tenth of
	// the samples: they stand in the trampoline, still above the interrupted chain, without
	// the handler's frames; and the signal lands in main's own loop and time(2) as well as in
	// the g1 chain. So every sample must reach main, and the handler's frames are checked
	// apart (signalHandlerShare).
	{name: "signal", chain: libcTail, minShare: 0.90},
}

// frame is one location of a sample.
type frame struct {
	kernel bool
	name   string // a kernel frame's function, from the collector's kallsyms
	file   string // a user frame's mapped file (guest path); "" outside every file mapping
	addr   uint64 // ELF virtual address for user frames
}

type tally struct {
	// considered counts the samples the share is over (all, or those from the program's own
	// code).
	total, considered, whole, leafOnly, unmapped int
	// withKernel counts samples with kernel frames; kernelWhole those whose kernel frames
	// show the read path.
	withKernel, kernelWhole int
	// handler counts the samples whose stack holds a whole chain through a signal handler
	// (the signal workload's signalChain).
	handler int
	example string
}

// signalChain is the signal workload's stack while its handler runs: the handler, the
// trampoline (unnamed: the vDSO), the interrupted chain.
var signalChain = append([]string{"spin", "on_prof"}, libcTail...)

// signalHandlerShare is the least share of the signal workload's samples that must show the
// whole chain through the handler.
const signalHandlerShare = 0.5

// checkStacks symbolizes every workload's samples with the engine from the very files the
// guest ran (root is the guest's tree, debugDir holds libc's debug file) and checks the
// shares, the kernel frames, and the engine's names against llvm-symbolizer's.
func checkStacks(t *testing.T, ctx context.Context, g *guest.Guest, reqs []pprofileotlp.ExportRequest, root, debugDir string) {
	byPID := map[int64]*workload{}
	for i := range workloads {
		w := &workloads[i]
		pid, ok := g.PIDs[w.name]
		if !ok {
			t.Fatalf("the guest did not report the pid of %s", w.name)
		}
		byPID[pid] = w
	}
	sym := newSymbolizer(root, debugDir)
	tallies := map[*workload]*tally{}
	kernelFrames, namedKernelFrames := 0, 0
	// seen holds the user frames to check against llvm-symbolizer, by guest file.
	seen := map[string]map[uint64]bool{}
	for _, req := range reqs {
		forEachSample(req.Profiles(), func(pid int64, count int, frames []frame) {
			w := byPID[pid]
			if w == nil {
				return
			}
			tl := tallies[w]
			if tl == nil {
				tl = &tally{}
				tallies[w] = tl
			}
			tl.total += count
			var names, kernelNames []string
			user := 0
			badFrame := ""
			for _, f := range frames {
				if f.kernel {
					kernelFrames += count
					if f.name != "" {
						namedKernelFrames += count
					}
					kernelNames = append(kernelNames, f.name)
					continue
				}
				user++
				if f.file == "" {
					if user > 1 && !g.VDSO[w.name].Contains(f.addr) {
						tl.unmapped += count
						badFrame = fmt.Sprintf("unwound frame %d at %#x outside every mapping", user, f.addr)
					}
					names = append(names, "?")
					continue
				}
				if seen[f.file] == nil {
					seen[f.file] = map[uint64]bool{}
				}
				seen[f.file][f.addr] = true
				names = append(names, sym.functions(t, f.file, f.addr)...)
			}
			if user == 1 {
				tl.leafOnly += count
			}
			if badFrame != "" {
				t.Logf("%s: %s: %s", w.name, badFrame, strings.Join(names, ";"))
			}
			if len(kernelNames) > 0 {
				tl.withKernel += count
				if containsChain(kernelNames, []string{"vfs_read", "el0_svc"}) {
					tl.kernelWhole += count
				}
			}
			if w.from != "" && (len(names) == 0 || !strings.HasPrefix(names[0], w.from)) {
				return
			}
			tl.considered += count
			if w.name == "signal" && containsChain(names, signalChain) {
				tl.handler += count
			}
			if containsChain(names, w.chain) {
				tl.whole += count
			} else if tl.example == "" || len(names) > strings.Count(tl.example, ";")+1 {
				tl.example = strings.Join(append(kernelNames, names...), ";")
			}
		})
	}

	for i := range workloads {
		w := &workloads[i]
		tl := tallies[w]
		if tl == nil || tl.total < 50 {
			t.Errorf("%s: too few samples (%+v)", w.name, tl)
			continue
		}
		share := float64(tl.whole) / float64(max(tl.considered, 1))
		from := ""
		if w.from != "" {
			from = fmt.Sprintf(" (%d with their innermost frame in %s*)", tl.considered, w.from)
		}
		t.Logf("%-12s %5d samples%s, %5.1f%% whole, %d leaf-only, %d unwound frames outside mappings, %d with kernel frames",
			w.name, tl.total, from, 100*share, tl.leafOnly, tl.unmapped, tl.withKernel)
		if tl.considered < 50 || share < w.minShare {
			t.Errorf("%s: %.1f%% of %d samples show %v, want at least %.0f%%; e.g. %s", w.name, 100*share, tl.considered, w.chain, 100*w.minShare, tl.example)
		}
		if tl.unmapped > 0 {
			t.Errorf("%s: %d unwound user frames lie outside every mapping", w.name, tl.unmapped)
		}
		if w.name == "signal" {
			t.Logf("signal: %d of %d samples through the handler and the trampoline to main", tl.handler, tl.total)
			if float64(tl.handler) < signalHandlerShare*float64(tl.total) {
				t.Errorf("signal: %d of %d samples show %v, want at least %.0f%%", tl.handler, tl.total, signalChain, 100*signalHandlerShare)
			}
		}
	}
	// The reader spends its time clearing user memory for read(2): most of its samples are
	// in the kernel, named by the collector from the guest's kallsyms.
	reader := slices.IndexFunc(workloads, func(w workload) bool { return w.name == "reader" })
	if tl := tallies[&workloads[reader]]; tl != nil {
		t.Logf("reader: %d of %d samples in the kernel, %d of them through vfs_read from el0_svc", tl.withKernel, tl.total, tl.kernelWhole)
		if 2*tl.withKernel < tl.total {
			t.Errorf("reader: %d of %d samples carry kernel frames, want most", tl.withKernel, tl.total)
		}
		if float64(tl.kernelWhole) < 0.9*float64(tl.withKernel) {
			t.Errorf("reader: %d of %d samples in the kernel show vfs_read called from el0_svc, want 90%%", tl.kernelWhole, tl.withKernel)
		}
	}
	t.Logf("kernel frames: %d of %d named", namedKernelFrames, kernelFrames)
	if kernelFrames == 0 || float64(namedKernelFrames) < 0.99*float64(kernelFrames) {
		t.Errorf("%d of %d kernel frames named from kallsyms, want 99%%", namedKernelFrames, kernelFrames)
	}

	compareWithLLVM(t, ctx, sym, seen)
}

// maxCompared bounds the addresses per file checked against llvm-symbolizer.
const maxCompared = 300

// compareWithLLVM asks llvm-symbolizer about the user frames the samples hold and compares
// its inline chains (function, file and line of each frame) with the engine's.
func compareWithLLVM(t *testing.T, ctx context.Context, sym *symbolizer, seen map[string]map[uint64]bool) {
	totalAddrs, totalFuncs, totalKnown, totalLines := 0, 0, 0, 0
	for _, file := range sortedKeys(seen) {
		addrs := make([]uint64, 0, len(seen[file]))
		for a := range seen[file] {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		// An even spread over the file's addresses when there are more than maxCompared.
		if len(addrs) > maxCompared {
			step := float64(len(addrs)) / maxCompared
			picked := make([]uint64, 0, maxCompared)
			for i := range maxCompared {
				picked = append(picked, addrs[int(float64(i)*step)])
			}
			addrs = picked
		}
		ix := sym.index(t, file)
		if ix == nil {
			t.Errorf("%s: the engine has no index for a file the samples hold", file)
			continue
		}
		ref, err := llvmSymbolize(ctx, sym.hostPath(file), sym.debugDir, addrs)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		aliases := symbolAddrs(sym.hostPath(file), sym.debugDir)
		funcs, known, lines := 0, 0, 0
		var diffs, realDiffs []string
		for _, a := range addrs {
			ours := ix.Lookup(a)
			theirs := ref[a]
			same, spelled, lineOK := len(ours) == len(theirs), len(ours) == len(theirs), len(ours) == len(theirs)
			var reasons []string
			// llvm-symbolizer 14 does not read the symbol table of a separate debug file: a
			// local symbol only it holds (libgcc's outline atomics linked into libc) names the
			// address for the engine alone.
			engineOnly := len(theirs) == 0 && len(ours) == 1 && ours[0].Line == 0 && !isMappingSymbol(ours[0].Function) && aliases[ours[0].Function] != nil
			if engineOnly {
				spelled, lineOK = true, true
				reasons = append(reasons, "named from the debug file's symbol table")
			}
			for i := 0; !engineOnly && spelled && i < len(ours); i++ {
				if ours[i].File != theirs[i].FileName || int(ours[i].Line) != theirs[i].Line {
					lineOK = false
				}
				if ours[i].Function == theirs[i].FunctionName {
					continue
				}
				same = false
				reason, ok := knownSpelling(ours[i].Function, theirs[i].FunctionName, aliases)
				if !ok {
					spelled = false
				}
				reasons = append(reasons, reason)
			}
			switch {
			case same:
				funcs++
			case spelled:
				known++
			}
			if lineOK {
				lines++
			}
			switch {
			case (!spelled || !lineOK) && len(realDiffs) < 10:
				realDiffs = append(realDiffs, fmt.Sprintf("%#x (differ): engine %s, llvm-symbolizer %s", a, describeOurs(ours), describeTheirs(theirs)))
			case !same && len(diffs) < 3:
				why := strings.Join(slices.Compact(reasons), ", ")
				diffs = append(diffs, fmt.Sprintf("%#x (%s): engine %s, llvm-symbolizer %s", a, why, describeOurs(ours), describeTheirs(theirs)))
			}
		}
		t.Logf("%-40s %3d addresses: functions the same at %d, spelled differently at %d, file:line the same at %d", file, len(addrs), funcs, known, lines)
		for _, d := range append(realDiffs, diffs...) {
			t.Logf("  %s", d)
		}
		totalAddrs += len(addrs)
		totalFuncs += funcs
		totalKnown += known
		totalLines += lines
		if funcs+known != len(addrs) {
			t.Errorf("%s: the engine's functions differ from llvm-symbolizer's at %d of %d addresses", file, len(addrs)-funcs-known, len(addrs))
		}
		if lines != len(addrs) {
			t.Errorf("%s: the engine's file:line differ from llvm-symbolizer's at %d of %d addresses", file, len(addrs)-lines, len(addrs))
		}
	}
	t.Logf("llvm-symbolizer agreement: %d addresses, functions the same at %d and spelled differently at %d, file:line the same at %d", totalAddrs, totalFuncs, totalKnown, totalLines)
	if totalAddrs == 0 {
		t.Error("no user frame to compare with llvm-symbolizer")
	}
}

// cloneSuffix is what compilers append to a function's symbol for a copy of it (a part split
// off, a clone with constants propagated, Go's assembly ABI): llvm-symbolizer names the
// function by its DWARF name where the engine keeps the symbol table's.
var cloneSuffix = regexp.MustCompile(`(\.((part|constprop|isra|lto_priv)\.[0-9]+|cold|abi0))+$`)

// knownSpelling says why two names of the same function differ when the difference is a
// matter of spelling, not a different function: the engine's symbol version
// (__libc_start_main@GLIBC_2.17), a clone suffix, two symbols at the same address (malloc and
// __libc_malloc: the tools pick different ones; symbols maps each name to its addresses), or
// how LLVM 14's demangler writes template arguments (parenthesized types, a parameter pack's
// "...").
func knownSpelling(ours, theirs string, symbols map[string][]uint64) (string, bool) {
	if isMappingSymbol(ours) {
		return "", false
	}
	if i := strings.Index(ours, "@"); i > 0 && ours[:i] == theirs {
		return "symbol version", true
	}
	for _, a := range symbols[ours] {
		if slices.Contains(symbols[theirs], a) {
			return "symbol alias", true
		}
	}
	if cloneSuffix.ReplaceAllString(ours, "") == cloneSuffix.ReplaceAllString(theirs, "") {
		return "clone suffix", true
	}
	if strings.Contains(ours, "<") && strings.Contains(theirs, "<") {
		strip := strings.NewReplacer("(", "", ")", "", "...", "", " ", "")
		if strip.Replace(ours) == strip.Replace(theirs) {
			return "template argument spelling", true
		}
	}
	return "", false
}

// isMappingSymbol reports whether name is one of the ELF mapping symbols AArch64 and Arm
// objects mark code and data with ($x, $d, $x.12): markers, never a function's name.
func isMappingSymbol(name string) bool {
	return name == "$x" || name == "$d" || name == "$a" || name == "$t" ||
		strings.HasPrefix(name, "$x.") || strings.HasPrefix(name, "$d.")
}

// symbolAddrs maps each function symbol of a file and of its separate debug file (by build
// ID under debugDir) to its addresses; nil when neither reads.
func symbolAddrs(path, debugDir string) map[string][]uint64 {
	files := []string{path}
	if ids, err := buildid.FromFile(path); err == nil && len(ids.GNU) > 2 {
		files = append(files, filepath.Join(debugDir, ".build-id", ids.GNU[:2], ids.GNU[2:]+".debug"))
	}
	var m map[string][]uint64
	for _, p := range files {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		syms, _ := f.Symbols()
		dyn, _ := f.DynamicSymbols()
		f.Close()
		for _, s := range append(syms, dyn...) {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
				continue
			}
			if m == nil {
				m = map[string][]uint64{}
			}
			if !slices.Contains(m[s.Name], s.Value) {
				m[s.Name] = append(m[s.Name], s.Value)
			}
		}
	}
	return m
}

func describeOurs(fs []index.Frame) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("%s %s:%d", f.Function, filepath.Base(f.File), f.Line))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

func describeTheirs(fs []llvmFrame) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("%s %s:%d", f.FunctionName, filepath.Base(f.FileName), f.Line))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// llvmFrame is one frame of llvm-symbolizer's JSON output.
type llvmFrame struct {
	FunctionName string
	FileName     string
	Line         int
}

// llvmSymbolize runs llvm-symbolizer on addrs of file (its separate debug file found by
// build ID under debugDir) and returns each address's inline chain, innermost first. Frames
// it cannot name ("??" and no line) count as none, as the engine returns none.
func llvmSymbolize(ctx context.Context, file, debugDir string, addrs []uint64) (map[uint64][]llvmFrame, error) {
	var in strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	cmd := exec.CommandContext(ctx, "llvm-symbolizer", "--output-style=JSON", "--inlines",
		"--debug-file-directory="+debugDir, "--obj="+file)
	cmd.Stdin = strings.NewReader(in.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("llvm-symbolizer: %w: %s", err, stderr.String())
	}
	res := map[uint64][]llvmFrame{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for _, a := range addrs {
		var rec struct{ Symbol []llvmFrame }
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("llvm-symbolizer output for %#x: %w", a, err)
		}
		var fs []llvmFrame
		for _, f := range rec.Symbol {
			if f.FunctionName == "??" || f.FunctionName == "" {
				continue
			}
			fs = append(fs, f)
		}
		res[a] = fs
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return nil, fmt.Errorf("llvm-symbolizer answered more than %d addresses", len(addrs))
	}
	return res, nil
}

// containsChain reports whether want appears in names in order (other frames may sit
// between: libc's qsort runs through several of its own).
func containsChain(names, want []string) bool {
	i := 0
	for _, n := range names {
		if i < len(want) && nameMatches(n, want[i]) {
			i++
		}
	}
	return i == len(want)
}

// nameMatches: the exact name, a compiler clone (name + "."), or a C++ name qualified by a
// namespace or class or followed by its parameters.
func nameMatches(name, want string) bool {
	return name == want || strings.HasPrefix(name, want+".") || strings.HasPrefix(name, want+"(") ||
		strings.HasSuffix(name, "::"+want)
}

// forEachSample calls fn with each sample's process, count and frames (innermost first).
func forEachSample(p pprofile.Profiles, fn func(pid int64, count int, frames []frame)) {
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	for r := 0; r < p.ResourceProfiles().Len(); r++ {
		rp := p.ResourceProfiles().At(r)
		pidV, _ := rp.Resource().Attributes().Get(otlpattr.ProcessPID)
		for sp := 0; sp < rp.ScopeProfiles().Len(); sp++ {
			profs := rp.ScopeProfiles().At(sp).Profiles()
			for pi := 0; pi < profs.Len(); pi++ {
				prof := profs.At(pi)
				for s := 0; s < prof.Samples().Len(); s++ {
					smp := prof.Samples().At(s)
					count := 0
					for v := 0; v < smp.Values().Len(); v++ {
						count += int(smp.Values().At(v))
					}
					locs := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
					frames := make([]frame, 0, locs.Len())
					for l := 0; l < locs.Len(); l++ {
						loc := d.LocationTable().At(int(locs.At(l)))
						f := frame{addr: loc.Address()}
						for a := 0; a < loc.AttributeIndices().Len(); a++ {
							kv := d.AttributeTable().At(int(loc.AttributeIndices().At(a)))
							if str(kv.KeyStrindex()) == otlpattr.FrameType && kv.Value().AsString() == otlpattr.FrameTypeKernel {
								f.kernel = true
							}
						}
						switch {
						case f.kernel && loc.Lines().Len() > 0:
							f.name = str(d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex())).NameStrindex())
						case !f.kernel && loc.MappingIndex() != 0:
							f.file = str(d.MappingTable().At(int(loc.MappingIndex())).FilenameStrindex())
						}
						frames = append(frames, f)
					}
					fn(pidV.Int(), count, frames)
				}
			}
		}
	}
}

// symbolizer names ELF virtual addresses of the guest's files with the engine, reading
// the host's copy of each (root + guest path) and, for Debian's libc, its debug file.
type symbolizer struct {
	root, debugDir string
	ixs            map[string]*index.Index
}

func newSymbolizer(root, debugDir string) *symbolizer {
	return &symbolizer{root: root, debugDir: debugDir, ixs: map[string]*index.Index{}}
}

func (s *symbolizer) hostPath(guest string) string { return filepath.Join(s.root, guest) }

func (s *symbolizer) index(t *testing.T, guest string) *index.Index {
	if ix, ok := s.ixs[guest]; ok {
		return ix
	}
	ix, err := s.open(guest)
	if err != nil {
		t.Logf("%s: %v", guest, err)
	}
	s.ixs[guest] = ix
	return ix
}

func (s *symbolizer) open(guest string) (*index.Index, error) {
	p := s.hostPath(guest)
	if _, err := os.Stat(p); err != nil {
		return nil, fmt.Errorf("not in the guest's tree: %w", err)
	}
	b, err := debuginfo.Open(p, debuginfo.Options{DebugDirs: []string{s.debugDir}})
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	ix, err := b.Index()
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	return ix, nil
}

// functions returns the inline chain's functions at addr, innermost first, or a
// file+address placeholder when the engine names nothing there.
func (s *symbolizer) functions(t *testing.T, guest string, addr uint64) []string {
	var names []string
	if ix := s.index(t, guest); ix != nil {
		for _, f := range ix.Lookup(addr) {
			names = append(names, f.Function)
		}
	}
	if len(names) == 0 {
		return []string{fmt.Sprintf("%s+%#x", filepath.Base(guest), addr)}
	}
	return names
}

func TestKnownSpelling(t *testing.T) {
	symbols := map[string][]uint64{"malloc": {0x92240}, "__libc_malloc": {0x92240}, "free": {0x929c4}, "$x": {0x650}, "_init": {0x650}}
	tests := []struct {
		ours, theirs, reason string
	}{
		{"malloc", "__libc_malloc", "symbol alias"},
		{"malloc", "free", ""},
		{"$x", "_init", ""}, // a mapping symbol is never an alias
		{"free", "unknown", ""},
		{"__libc_start_main@GLIBC_2.17", "__libc_start_main", "symbol version"},
		{"__libc_start_main@@GLIBC_2.34", "__libc_start_main", "symbol version"},
		{"msort_with_tmp.part.0", "msort_with_tmp", "clone suffix"},
		{"runtime.goexit", "runtime.goexit.abi0", "clone suffix"},
		{"f.constprop.0.isra.0", "f", "clone suffix"},
		{"std::invoke_r<long, (long)>(long&&)", "std::invoke_r<long, long>(long&&...)", "template argument spelling"},
		{"leaf", "f1", ""},
		{"f1@GLIBC_2.17", "f2", ""},
		{"main.part", "main", ""}, // no clone has a bare ".part"
		{"f(int)", "f(long)", ""},
	}
	for _, tt := range tests {
		reason, ok := knownSpelling(tt.ours, tt.theirs, symbols)
		if reason != tt.reason || ok != (tt.reason != "") {
			t.Errorf("knownSpelling(%q, %q) = %q, %v; want %q", tt.ours, tt.theirs, reason, ok, tt.reason)
		}
	}
}
