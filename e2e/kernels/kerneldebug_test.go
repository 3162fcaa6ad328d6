//go:build linux

package kernels

import (
	"debug/elf"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/profsym/profsym/e2e/guest"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/testsupport"
)

// debugKernels are the kernels whose debuginfo the test uploads: Debian's stable (6.1) on both
// architectures and its next release (6.12) on amd64.
var debugKernels = []string{"amd64-6.1", "amd64-6.12", "arm64-6.1"}

// The module the workload drives, and the share it must reach.
const (
	debugModule = "brd"
	// minKernelShare is the least share of kernel frames (by samples) that must carry
	// file:line and an inline chain equal to llvm-symbolizer's.
	minKernelShare = 0.95
	// minModuleSamples is the least the module's frames must be sampled.
	minModuleSamples = 20
)

// kernelTally counts kernel frames of one file, by samples and by distinct addresses.
type kernelTally struct {
	samples, located, equal int // frames in samples; with file:line; equal to llvm-symbolizer's
	addrs, addrsEqual       int
	inlined                 int // samples whose frame has an inline chain (more than one line)
	example                 string
}

func (k *kernelTally) String() string {
	return fmt.Sprintf("%d of %d sampled frames (%.1f%%) equal to llvm-symbolizer's, %d with file:line, %d with inlined frames; %d of %d addresses",
		k.equal, k.samples, 100*float64(k.equal)/float64(max(k.samples, 1)), k.located, k.inlined, k.addrsEqual, k.addrs)
}

// TestKernelDebuginfo boots Debian's 6.1 kernel under qemu with KASLR on, loads the brd
// module, samples the whole guest while it spends its time in the kernel, and has the kernel
// frames symbolized by a real symbolizer: without debuginfo stored they come out as the
// collector sent them (kallsyms names); with the -dbg package's vmlinux and brd.ko uploaded,
// at least 95% carry file:line and inline chains equal to llvm-symbolizer's on the same
// addresses. It downloads the 860 MB debug package once (cached) and indexes a 630 MB
// vmlinux: `make test-kernel-debuginfo` runs it.
func TestKernelDebuginfo(t *testing.T) {
	if os.Getenv("PROFSYM_KERNEL_DEBUGINFO") == "" {
		t.Skip("downloads Debian's kernel debug packages (about 860 MB each, cached) and indexes their vmlinux: make test-kernel-debuginfo (PROFSYM_KERNEL_DEBUGINFO=1) runs it")
	}
	requireHarness(t)
	if _, err := exec.LookPath("llvm-symbolizer"); err != nil {
		t.Fatal("needs llvm-symbolizer (bash .ci/install-deps installs it)")
	}
	ctx := t.Context()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	out, err := runScript(ctx, filepath.Join(here, "fetch-kernels.sh"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseFetched(out)
	if err != nil {
		t.Fatal(err)
	}
	sym := testsupport.StartSymbolizer(t, "")
	for _, id := range debugKernels {
		t.Run(id, func(t *testing.T) { kernelDebuginfo(t, here, id, got, sym) })
	}
}

// kernelDebuginfo runs one kernel of debugKernels: its guest, its debug files uploaded to sym,
// its frames against llvm-symbolizer.
func kernelDebuginfo(t *testing.T, here, id string, got map[string]fetched, sym *testsupport.Symbolizer) {
	ctx := t.Context()
	arch, _, _ := strings.Cut(id, "-")
	start := time.Now()
	out, err := runScript(ctx, filepath.Join(here, "fetch-kernel-debug.sh"), id, debugModule)
	if err != nil {
		t.Fatal(err)
	}
	var vmlinux, module string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "vmlinux":
			vmlinux = f[1]
		case len(f) == 3 && f[0] == "module" && f[1] == debugModule:
			module = f[2]
		}
	}
	if vmlinux == "" || module == "" {
		t.Fatalf("fetch-kernel-debug.sh printed %q", out)
	}
	t.Logf("debug files ready in %v: %s, %s", time.Since(start).Round(time.Millisecond), vmlinux, module)

	dir := t.TempDir()
	busybox := "/bin/busybox"
	if arch == "arm64" {
		busybox = got["busybox-arm64"].path
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(here, "build-guest.sh"), arch, dir, busybox)
	cmd.Env = append(os.Environ(), "PROFSYM_GUEST_EXTRA="+module)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build-guest.sh: %v\n%s", err, b)
	}
	params := fmt.Sprintf("panic=-1 quiet e2e_kernel=1 e2e_secs=%d e2e_hz=%d", sampleSecs, sampleHz)
	qemu, args := "qemu-system-x86_64", []string{"-M", "q35", "-cpu", "max", "-append", "console=ttyS0 " + params}
	if arch == "arm64" {
		qemu, args = "qemu-system-aarch64", []string{"-M", "virt", "-cpu", "max,pauth-impdef=on", "-append", "console=ttyAMA0 " + params}
	}
	args = append(args, "-smp", "2", "-m", "1024", "-nographic", "-no-reboot", "-nic", "none",
		"-kernel", got[id].path, "-initrd", filepath.Join(dir, "initrd.cpio"))
	run, err := guest.Boot(ctx, guestDeadline, qemu, args...)
	if run != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("guest console:\n%s", guest.WithoutBase64(run.Console))
			}
		})
	}
	if err != nil {
		t.Fatalf("%s: %v", got[id].pkg, err)
	}
	g := run.Guest
	t.Logf("%s ran for %v: %s", g.Kernel, run.Took.Round(time.Millisecond), run.Timeline)
	for _, m := range g.Metrics {
		if strings.Contains(m, "kernel_frames") {
			t.Logf("guest metric %s", m)
		}
	}
	if !g.Ready || g.CollectorExit != 0 || g.OTLP == nil {
		t.Fatalf("the collector did not run to the end (ready %v, exit status %d, output file %d bytes)", g.Ready, g.CollectorExit, len(g.OTLP))
	}
	if src := metricLabel(g.Metrics, "profsym_collector_kernel_frames", "reason"); src != "vmcoreinfo" {
		t.Errorf("the KASLR offset came from %q, want vmcoreinfo (/proc/kcore)", src)
	}
	if text, link := g.Info["stext"], linkText(t, vmlinux); text == "" || text == link {
		t.Errorf("_stext at %q, where vmlinux links it: KASLR did not move the kernel, so undoing it is not tested", text)
	} else {
		t.Logf("KASLR moved _stext from %s to %s", link, text)
	}
	checkModuleLayout(t, module, g.Info)

	ids := map[string]string{}
	for name, path := range map[string]string{"vmlinux": vmlinux, debugModule: module} {
		id, err := buildid.FromFile(path)
		if err != nil || id.GNU == "" {
			t.Fatalf("%s: build ID %v, %v", path, id, err)
		}
		ids[id.GNU] = name
	}
	profiles := decodeOutput(t, g.OTLP)

	newSymbolizer := func() *symbolize.Symbolizer {
		return symbolize.New(symbolize.Config{Client: symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, sym.URL()),
			Timeout: 10 * time.Minute, CacheEntries: -1})
	}

	// Nothing stored: every kernel frame comes out as the collector sent it.
	kernelFrames := 0
	for _, pd := range profiles {
		in := otlptest.Resolve(pd)
		cp := pprofile.NewProfiles()
		pd.CopyTo(cp)
		rep := newSymbolizer().Process(ctx, cp)
		outS := otlptest.Resolve(cp)
		for i := range in {
			for j, f := range in[i].Stack {
				if !isKernel(f) {
					continue
				}
				kernelFrames++
				if !reflect.DeepEqual(f, outS[i].Stack[j]) {
					t.Fatalf("without debuginfo a kernel frame changed: %+v became %+v", f, outS[i].Stack[j])
				}
			}
		}
		if rep.Symbolized != 0 && kernelFrames > 0 && rep.Unresolved[symbolize.ReasonNotFound] == 0 {
			t.Logf("report without debuginfo: %+v", rep)
		}
	}
	if kernelFrames == 0 {
		t.Fatal("no kernel frames sampled")
	}

	start = time.Now()
	sym.Upload(t, vmlinux, module)
	t.Logf("uploaded and indexed vmlinux and %s.ko in %v", debugModule, time.Since(start).Round(time.Millisecond))

	// With debuginfo: the frames, by file, against llvm-symbolizer.
	type key struct {
		file string
		addr uint64
	}
	answers := map[key][]otlptest.Line{}
	weights := map[key]int{}
	start = time.Now()
	s := newSymbolizer()
	for _, pd := range profiles {
		cp := pprofile.NewProfiles()
		pd.CopyTo(cp)
		s.Process(ctx, cp)
		for _, smp := range otlptest.Resolve(cp) {
			w := max(len(smp.Timestamps), 1)
			for _, f := range smp.Stack {
				if !isKernel(f) {
					continue
				}
				name := ids[gnuOf(f)]
				if name == "" {
					continue // another module, whose debug file is not uploaded
				}
				k := key{name, f.Address}
				answers[k] = f.Lines
				weights[k] += w
			}
		}
	}
	t.Logf("symbolized in %v", time.Since(start).Round(time.Millisecond))
	tallies := map[string]*kernelTally{}
	// llvm-symbolizer reads a relocatable object as if every section started at 0 (it mixes
	// .text up with the module's other code sections, and names callers after .modinfo
	// symbols): it is asked about the module linked with its sections where the layout puts
	// them, plus a base.
	linked, base := linkModule(t, module, arch)
	for _, name := range []string{"vmlinux", debugModule} {
		path, shift := vmlinux, uint64(0)
		if name == debugModule {
			path, shift = linked, base
		}
		var addrs, asked []uint64
		for k := range answers {
			if k.file == name {
				addrs = append(addrs, k.addr)
			}
		}
		slices.Sort(addrs)
		for _, a := range addrs {
			asked = append(asked, a+shift)
		}
		want := otlptest.LLVMSymbolize(t, path, asked)
		tl := &kernelTally{}
		tallies[name] = tl
		for i, a := range addrs {
			k := key{name, a}
			w := weights[k]
			gotLines := answers[k]
			tl.samples += w
			tl.addrs++
			if len(gotLines) > 0 && gotLines[0].Line > 0 {
				tl.located += w
			}
			if len(gotLines) > 1 {
				tl.inlined += w
			}
			if sameChain(gotLines, want[i]) {
				tl.equal += w
				tl.addrsEqual++
			} else if tl.example == "" || w > 1 {
				tl.example = fmt.Sprintf("%s %#x: got %v, llvm-symbolizer %v", name, a, gotLines, want[i])
			}
		}
		t.Logf("%s (%s): %s", name, g.Kernel, tl)
		if tl.example != "" {
			t.Logf("%s: e.g. %s", name, tl.example)
		}
	}
	if v := tallies["vmlinux"]; float64(v.equal) < minKernelShare*float64(v.samples) || v.samples < minSamples {
		t.Errorf("vmlinux: %s; want at least %.0f%% of at least %d", v, 100*minKernelShare, minSamples)
	}
	if m := tallies[debugModule]; m.samples < minModuleSamples || float64(m.equal) < minKernelShare*float64(m.samples) {
		t.Errorf("%s: %s; want at least %.0f%% of at least %d", debugModule, m, 100*minKernelShare, minModuleSamples)
	}
}

func isKernel(f otlptest.Frame) bool {
	return slices.ContainsFunc(f.Attrs, func(a string) bool { return strings.Contains(a, "("+otlpattr.FrameTypeKernel+")") })
}

// gnuOf returns the GNU build ID of a frame's mapping ("" without one).
func gnuOf(f otlptest.Frame) string {
	for _, a := range f.MappingAttrs {
		if v, ok := strings.CutPrefix(a, otlpattr.BuildIDGNU+"=Str("); ok {
			id, _, _ := strings.Cut(v, ")")
			return id
		}
	}
	return ""
}

// sameChain compares a location's lines with llvm-symbolizer's frames: function, line and file
// name, innermost first.
func sameChain(got []otlptest.Line, want []otlptest.LLVMFrame) bool {
	if len(got) != len(want) || len(got) == 0 {
		return false
	}
	for i := range want {
		if got[i].Function != want[i].FunctionName || got[i].Line != want[i].Line || filepath.Base(got[i].File) != filepath.Base(want[i].FileName) {
			return false
		}
	}
	return true
}

func decodeOutput(t *testing.T, data []byte) []pprofile.Profiles {
	t.Helper()
	recs, err := guest.Records(data)
	if err != nil {
		t.Fatalf("output file: %v", err)
	}
	var out []pprofile.Profiles
	for i, b := range recs {
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b); err != nil {
			t.Fatalf("output file: request %d: %v", i, err)
		}
		out = append(out, req.Profiles())
	}
	return out
}

// linkModule links a module's debug file with a linker script that puts each of its
// SHF_ALLOC sections at base plus the address the symbolizer's layout gives it (elfx), so that
// llvm-symbolizer, reading the linked file at base+a, answers what the module should at a.
func linkModule(t *testing.T, ko, arch string) (string, uint64) {
	t.Helper()
	const base = 0x1000000
	f, closer, err := elfx.OpenPath(ko, elfx.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var script strings.Builder
	script.WriteString("SECTIONS {\n")
	for _, s := range f.ELF().Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Size > 0 {
			fmt.Fprintf(&script, "  %s %#x : { *(%s) }\n", s.Name, base+s.Addr, s.Name)
		}
	}
	script.WriteString("}\n")
	dir := t.TempDir()
	lds, out := filepath.Join(dir, "layout.ld"), filepath.Join(dir, "linked")
	if err := os.WriteFile(lds, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ld := "ld"
	if arch == "arm64" {
		ld = "aarch64-linux-gnu-ld"
	}
	cmd := exec.CommandContext(t.Context(), ld, "-T", lds, "--unresolved-symbols=ignore-all", "--noinhibit-exec", "-e", "0", "-o", out, ko)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", ld, err, b)
	}
	return out, base
}

// checkModuleLayout checks the rule by which the collector and the symbolizer agree on module
// addresses against the kernel that loaded the module: its executable sections (but .init
// ones), in section-header order, each aligned, follow .text as /sys/module/NAME/sections
// shows them.
func checkModuleLayout(t *testing.T, path string, info map[string]string) {
	t.Helper()
	runtime := map[string]uint64{}
	for k, v := range info {
		name, ok := strings.CutPrefix(k, "section."+debugModule+".")
		if !ok {
			continue
		}
		a, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
		if err != nil {
			t.Fatalf("section %s at %q", name, v)
		}
		runtime[name] = a
	}
	text, ok := runtime[".text"]
	if !ok {
		t.Fatalf("the guest reported no address of %s's .text (insmod failed?): %v", debugModule, info)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var off uint64
	var seenText bool
	checked := 0
	for _, s := range f.Sections {
		if s.Flags&(elf.SHF_ALLOC|elf.SHF_EXECINSTR) != elf.SHF_ALLOC|elf.SHF_EXECINSTR || strings.HasPrefix(s.Name, ".init") {
			continue
		}
		// arm64's loader sizes and aligns these itself (PLT veneers and ftrace's trampoline,
		// empty in the .ko, which module.lds puts after the module's code): they hold no
		// code the DWARF describes, and nothing follows them.
		if f.Machine == elf.EM_AARCH64 && (s.Name == ".plt" || s.Name == ".init.plt" || s.Name == ".text.ftrace_trampoline") {
			continue
		}
		align := max(s.Addralign, 1)
		off = (off + align - 1) &^ (align - 1)
		if s.Name == ".text" {
			seenText = true
			if off != 0 {
				t.Fatalf(".text is not the first executable section: at %#x", off)
			}
		}
		if a, ok := runtime[s.Name]; ok && seenText {
			if a-text != off {
				t.Errorf("%s: the kernel put it at .text+%#x, the layout rule at .text+%#x", s.Name, a-text, off)
			}
			checked++
		}
		off += s.Size
	}
	t.Logf("%s: %d executable sections where the layout rule puts them", debugModule, checked)
	if checked < 2 {
		t.Errorf("only %d executable sections checked", checked)
	}
}

// linkText returns the address vmlinux links _stext at, as kallsyms prints it (16 hex digits).
func linkText(t *testing.T, vmlinux string) string {
	t.Helper()
	return fmt.Sprintf("%016x", elfxtest.SymbolValue(t, vmlinux, "_stext"))
}
