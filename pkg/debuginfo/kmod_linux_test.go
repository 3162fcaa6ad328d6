package debuginfo_test

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/internal/llvmcompare"
)

// kernelImage builds vmlinux's index, measuring it, and holds about 2000 addresses sampled from
// its functions to llvm-symbolizer, measured on the same addresses.
func kernelImage(t *testing.T, vmlinux string) {
	funcs, err := llvmcompare.FunctionSymbols(vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	addrs := llvmcompare.Sample(funcs, 1, 2000, 1)

	var before syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	ix, info, err := debuginfo.OpenIndex(vmlinux, debuginfo.Options{NoSearch: true})
	wall := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	t.Logf("index: %v wall, %v CPU, peak RSS of the test process %d MiB; fidelity %v, sources %q, DWARF v%d, index %d bytes",
		wall.Round(time.Millisecond), cpu.Round(time.Millisecond), after.Maxrss>>10, ix.Fidelity(), info.Sources, info.DWARFVersion, ix.Stats().Bytes)
	ours, inlined := lookupAll(ix, addrs)

	var in strings.Builder
	for _, a := range addrs {
		in.WriteString("0x" + strconvHex(a) + "\n")
	}
	cmd := exec.CommandContext(t.Context(), "llvm-symbolizer", "--output-style=JSON", "--inlines", "--demangle", "--obj="+vmlinux)
	cmd.Stdin = strings.NewReader(in.String())
	start = time.Now()
	out, err := cmd.Output()
	lwall := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	// No peak RSS: Linux counts a child's from the RSS of the parent it was forked from, here
	// the test process holding the index. Measure both with /usr/bin/time -v instead.
	t.Logf("llvm-symbolizer: %v wall, %v CPU", lwall.Round(time.Millisecond),
		time.Duration(ru.Utime.Nano()+ru.Stime.Nano()).Round(time.Millisecond))
	res, err := llvmcompare.ParseJSON(strings.NewReader(string(out)))
	if err != nil || len(res) != len(addrs) {
		t.Fatalf("llvm-symbolizer: %d answers, %v", len(res), err)
	}
	ref := make([][]llvmcompare.Frame, len(res))
	for i, r := range res {
		ref[i] = r.Frames
	}
	rep, err := llvmcompare.Compare(addrs, ours, ref, llvmcompare.ModeFull, llvmcompare.Known...)
	if err != nil {
		t.Fatal(err)
	}
	u := rep.Unexplained()
	t.Logf("vmlinux: %d addresses (%d with inlined frames): chains agree %d (+%d known), lines agree %d of %d (+%d known), %d unexplained",
		len(addrs), inlined, rep.ChainAgree, rep.ChainKnown, rep.LineAgree, rep.LineCompared, rep.LineKnown, len(u))
	for _, d := range u[:min(len(u), 10)] {
		t.Errorf("%#x: %s: ours %s, llvm-symbolizer %s", d.Addr, d.Kind, llvmcompare.Chain(d.Ours), llvmcompare.Chain(d.Ref))
	}
}

func strconvHex(a uint64) string { return strconv.FormatUint(a, 16) }
