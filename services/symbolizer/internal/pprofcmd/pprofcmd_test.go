package pprofcmd

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/testsupport"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := testsupport.RemoveFixtures(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// inlineProgram has two levels of forced inlining inside compute, so that one address has three
// frames: square inlined into sum_squares inlined into compute.
const inlineProgram = `#include <stdio.h>
#include <stdlib.h>

static inline __attribute__((always_inline)) long square(long x) {
	return x * x + (x >> 2);
}

static inline __attribute__((always_inline)) long sum_squares(long n) {
	long s = 0;
	for (long i = 0; i < n; i++)
		s += square(i ^ (s >> 3));
	return s;
}

__attribute__((noinline)) long compute(long n) {
	return sum_squares(n) * 3 + 1;
}

int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 1000;
	printf("%ld\n", compute(n));
	return 0;
}
`

// frame is one frame as llvm-symbolizer prints it.
type frame struct {
	fn, file string
	line     int64
}

// llvmSymbolize answers ELF virtual addresses of bin with llvm-symbolizer, every inline frame,
// innermost first.
func llvmSymbolize(t *testing.T, bin string, addrs []uint64) [][]frame {
	t.Helper()
	var in strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	cmd := exec.CommandContext(t.Context(), "llvm-symbolizer", "--obj="+bin, "--inlines", "--functions=linkage")
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	var res [][]frame
	var cur []frame
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name := sc.Text()
		if name == "" {
			res = append(res, cur)
			cur = nil
			continue
		}
		if !sc.Scan() {
			t.Fatalf("llvm-symbolizer: a function line without its location: %q", name)
		}
		loc := strings.Split(sc.Text(), ":") // file:line:column
		if len(loc) < 3 {
			t.Fatalf("llvm-symbolizer: location %q", sc.Text())
		}
		line, _ := strconv.ParseInt(loc[len(loc)-2], 10, 64)
		cur = append(cur, frame{fn: name, file: strings.Join(loc[:len(loc)-2], ":"), line: line})
	}
	if len(res) != len(addrs) {
		t.Fatalf("llvm-symbolizer answered %d addresses of %d", len(res), len(addrs))
	}
	return res
}

// runtimeMapping is the executable segment as a process maps it: the file at a load bias,
// page aligned, with the segment's file offset.
func runtimeMapping(t *testing.T, bin string, bias uint64) (*profile.Mapping, uint64, uint64) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	if text == nil {
		t.Fatal("no executable PT_LOAD")
	}
	const page = 0x1000
	start := bias + text.Vaddr&^(page-1)
	limit := bias + (text.Vaddr+text.Memsz+page-1)&^(page-1)
	m := &profile.Mapping{ID: 1, Start: start, Limit: limit, Offset: text.Off &^ (page - 1), File: "/opt/app/prog"}
	var lo, hi uint64
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == "compute" && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			lo, hi = s.Value, s.Value+s.Size
		}
	}
	if lo == 0 {
		t.Fatal("no symbol compute")
	}
	return m, lo, hi
}

// TestSymbolizePprof makes a pprof profile as a profiler of a running process would (runtime
// addresses of a -O2 binary with inline frames, the mapping at a load bias, its GNU build ID),
// puts the binary into a real symbolizer's store with the upload client, runs `symbolizer
// pprof`, and reads the result both directly and with `go tool pprof`: every location's lines
// are llvm-symbolizer's frames for that address, innermost first, inline frames as lines of one
// location; a mapping the store does not have is left as it was and reported.
func TestSymbolizePprof(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a symbolizer")
	}
	testsupport.RequireTools(t, "gcc", "llvm-symbolizer")
	bin := testsupport.CompileC(t, inlineProgram, "-O2", "-g", "-Wl,--build-id")
	ids, err := buildid.FromFile(bin)
	if err != nil || ids.GNU == "" {
		t.Fatalf("build ID of %s: %v %+v", bin, err, ids)
	}
	const bias = 0x555555554000
	m, lo, hi := runtimeMapping(t, bin, bias)
	m.BuildID = ids.GNU

	// Every address of compute, then those where llvm-symbolizer sees inlining; the answers
	// must include three-deep ones.
	var all []uint64
	for a := lo; a < hi; a++ {
		all = append(all, a)
	}
	want := llvmSymbolize(t, bin, all)
	var addrs []uint64
	var wantFrames [][]frame
	depth3 := 0
	for i, fr := range want {
		if len(fr) >= 2 && len(addrs) < 40 {
			addrs = append(addrs, all[i])
			wantFrames = append(wantFrames, fr)
			if len(fr) >= 3 {
				depth3++
			}
		}
	}
	addrs = append(addrs, lo)
	wantFrames = append(wantFrames, want[0])
	if depth3 == 0 {
		t.Fatalf("no address of compute has three frames in llvm-symbolizer's answer: %v", want)
	}

	t.Logf("%d addresses of compute with inline frames (%d three deep), and its entry", len(addrs)-1, depth3)
	other := &profile.Mapping{ID: 2, Start: 0x7f0000000000, Limit: 0x7f0000100000, File: "/usr/lib/libmissing.so", BuildID: strings.Repeat("ab", 20)}
	missingLoc := &profile.Location{ID: 1, Mapping: other, Address: 0x7f0000001234}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}},
		Mapping:    []*profile.Mapping{m, other},
		Location:   []*profile.Location{missingLoc},
	}
	for i, a := range addrs {
		loc := &profile.Location{ID: uint64(i + 2), Mapping: m, Address: bias + a}
		p.Location = append(p.Location, loc)
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{loc, missingLoc}, Value: []int64{int64(i + 1)}})
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.pb.gz"), filepath.Join(dir, "out.pb.gz")
	writeProfile(t, p, in)

	s := testsupport.StartSymbolizer(t, "", "--require-read-token")
	s.Upload(t, bin)
	var stderr bytes.Buffer
	cmd := Cmd{Server: s.URL(), Token: s.Token, Input: in, Output: out, Stderr: &stderr}
	if err := cmd.Run(); err != nil {
		t.Fatalf("symbolizer pprof: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("symbolized %d of %d locations", len(addrs), len(addrs)+1)) ||
		!strings.Contains(stderr.String(), "libmissing.so") || !strings.Contains(stderr.String(), "NOT_FOUND") {
		t.Errorf("summary:\n%s", stderr.String())
	}

	verify := func(t *testing.T, out string) {
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		got, err := profile.Parse(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		byAddr := map[uint64]*profile.Location{}
		for _, l := range got.Location {
			byAddr[l.Address] = l
		}
		for i, a := range addrs {
			l := byAddr[bias+a]
			if l == nil {
				t.Fatalf("location of %#x gone", a)
			}
			var lines []frame
			for _, ln := range l.Line {
				lines = append(lines, frame{fn: ln.Function.Name, file: ln.Function.Filename, line: ln.Line})
			}
			if fmt.Sprint(lines) != fmt.Sprint(wantFrames[i]) {
				t.Errorf("%#x (runtime %#x): lines %v, llvm-symbolizer %v", a, bias+a, lines, wantFrames[i])
			}
		}
		if l := byAddr[missingLoc.Address]; l == nil || len(l.Line) != 0 {
			t.Errorf("the location of the mapping the store lacks changed: %+v", l)
		}
		for _, gm := range got.Mapping {
			if gm.BuildID == ids.GNU && (!gm.HasFunctions || !gm.HasFilenames || !gm.HasLineNumbers || !gm.HasInlineFrames) {
				t.Errorf("symbolized mapping's flags: %+v", gm)
			}
			if gm.BuildID == other.BuildID && gm.HasFunctions {
				t.Error("the unresolved mapping claims functions")
			}
		}

		// What pprof tooling shows: every frame, inline ones marked, with file:line.
		goTool, err := exec.LookPath("go")
		if err != nil {
			t.Fatal(err)
		}
		pp := exec.CommandContext(t.Context(), goTool, "tool", "pprof", "-top", "-lines", out)
		pp.Env = append(os.Environ(), "PPROF_BINARY_PATH="+dir) // nothing to find there: pprof must not re-symbolize
		top, err := pp.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof: %v\n%s", err, top)
		}
		for i := range addrs {
			for j, fr := range wantFrames[i] {
				row := fmt.Sprintf("%s %s:%d", fr.fn, fr.file, fr.line)
				if j < len(wantFrames[i])-1 {
					row += " (inline)"
				}
				if !bytes.Contains(top, []byte(row)) {
					t.Errorf("go tool pprof -top -lines has no row %q:\n%s", row, top)
				}
			}
		}
	}
	t.Run("server", func(t *testing.T) { verify(t, out) })

	// Small batches: a mapping's addresses over several calls, several mappings in one.
	t.Run("batches", func(t *testing.T) {
		f, err := os.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		st, err := Symbolize(t.Context(), symbolize.NewClient(http.DefaultClient, s.URL(), s.Token), p, Options{BatchAddresses: 7})
		if err != nil {
			t.Fatal(err)
		}
		if st.Symbolized != len(addrs) || st.Asked != len(addrs)+1 || len(st.Unresolved) != 1 {
			t.Errorf("stats %+v: want %d of %d symbolized, one mapping unresolved", st, len(addrs), len(addrs)+1)
		}
		batched := filepath.Join(dir, "batched.pb.gz")
		writeProfile(t, p, batched)
		verify(t, batched)
	})

	// The same from the folder store alone, with no server running.
	s.Stop()
	local := filepath.Join(dir, "local.pb.gz")
	stderr.Reset()
	cmd = Cmd{StoreDir: s.StoreDir(), Input: in, Output: local, Stderr: &stderr}
	if err := cmd.Run(); err != nil {
		t.Fatalf("symbolizer pprof --store-dir: %v\n%s", err, stderr.String())
	}
	t.Run("store-dir", func(t *testing.T) { verify(t, local) })
}

func writeProfile(t *testing.T, p *profile.Profile, path string) {
	t.Helper()
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCmdRefuses(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("not a profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.pb.gz")
	writeProfile(t, &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}}}, good)
	for _, tc := range []struct {
		name string
		cmd  Cmd
		want string
	}{
		{"no source", Cmd{Input: good, Output: filepath.Join(dir, "o")}, "--server URL or --store-dir DIR"},
		{"not pprof", Cmd{Server: "http://127.0.0.1:1", Input: junk, Output: filepath.Join(dir, "o")}, "junk: not a pprof profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cmd.Stderr = &bytes.Buffer{}
			err := tc.cmd.Run()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
}

func TestModuleFromMapping(t *testing.T) {
	for _, tc := range []struct {
		m          profile.Mapping
		gnu, goID  string
		wantErrSub string
	}{
		{m: profile.Mapping{BuildID: "ABCDEF0123", Start: 0x1000, Limit: 0x2000}, gnu: "abcdef0123"},
		{m: profile.Mapping{BuildID: "aaaaaaaaaaaaaaaaaaaa/bbbbbbbbbbbbbbbbbbbb/cccccccccccccccccccc/dddddddddddddddddddd", Start: 0x1000, Limit: 0x2000}, goID: "aaaaaaaaaaaaaaaaaaaa/bbbbbbbbbbbbbbbbbbbb/cccccccccccccccccccc/dddddddddddddddddddd"},
		{m: profile.Mapping{BuildID: "not an id!", Start: 0x1000, Limit: 0x2000}, wantErrSub: "neither a GNU"},
		{m: profile.Mapping{BuildID: "abcd", Start: 0x2000, Limit: 0x1000}, wantErrSub: "is empty"},
	} {
		mod, err := module(&tc.m)
		if tc.wantErrSub != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
				t.Errorf("%+v: error %v, want %q", tc.m, err, tc.wantErrSub)
			}
			continue
		}
		if err != nil || mod.GetGnuBuildId() != tc.gnu || mod.GetGoBuildId() != tc.goID || mod.GetMemoryStart() != tc.m.Start {
			t.Errorf("%+v: %v %v", tc.m, mod, err)
		}
	}
}
