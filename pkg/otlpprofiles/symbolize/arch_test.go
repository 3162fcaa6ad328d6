package symbolize_test

import (
	"debug/elf"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/testsupport"
)

// TestMain removes what the shared fixtures left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, remove := range []func() error{otlptest.RemoveFixtures, testsupport.RemoveFixtures} {
		if err := remove(); err != nil {
			fmt.Fprintf(os.Stderr, "remove test fixtures: %v\n", err)
		}
	}
	os.Exit(code)
}

// TestMixedArchitectures: one OTLP profile holding mappings of amd64 and arm64 binaries (C with
// inlining and Go, built for each; all uploaded to the real symbolizer's store) is symbolized
// through the real path (Process, the Connect client, the symbolizer's address normalization
// with each file's own PT_LOAD segments) in the layouts of the OTel eBPF profiler and of pprof,
// and every frame of both architectures is the one llvm-symbolizer reads.
func TestMixedArchitectures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the symbolizer and compiles test binaries for two architectures")
	}
	testsupport.NeedTools(t, "gcc", "clang", "ld.lld", "llvm-symbolizer", "aarch64-linux-gnu-gcc")
	bins := append(otlptest.Binaries(t), otlptest.ARM64Binaries(t)...)
	machines := map[elf.Machine]int{}
	paths := make([]string, len(bins))
	for i, b := range bins {
		paths[i] = b.Path
		f, err := elf.Open(b.Path)
		if err != nil {
			t.Fatal(err)
		}
		machines[f.Machine]++
		f.Close()
	}
	if machines[elf.EM_X86_64] == 0 || machines[elf.EM_AARCH64] == 0 {
		t.Fatalf("test binaries by machine %v: want amd64 and arm64 ones", machines)
	}
	sym := testsupport.StartSymbolizer(t, "")
	sym.Upload(t, paths...)
	s := symbolize.New(symbolize.Config{Client: symbolize.NewClient(http.DefaultClient, sym.URL(), ""), Timeout: time.Minute})

	for _, sh := range []otlptest.Shape{otlptest.ShapeEBPF, otlptest.ShapeEBPFZero, otlptest.ShapePprof} {
		t.Run(string(sh), func(t *testing.T) {
			pd, cases := otlptest.BuildRequest(t, sh, bins)
			in := otlptest.Resolve(copyOf(pd))
			rep := s.Process(t.Context(), pd)
			if rep.Symbolized != len(cases) || len(rep.Unresolved) != 0 {
				t.Fatalf("report %+v: want all %d locations symbolized", rep, len(cases))
			}
			if err := otlpprofiles.Validate(pd); err != nil {
				t.Fatalf("output invalid: %v", err)
			}
			out := otlptest.Resolve(pd)
			if err := otlptest.Compare(in, out); err != nil {
				t.Fatal(err)
			}
			otlptest.CheckFrames(t, out, cases)
			perBin := map[string]int{}
			for _, c := range cases {
				perBin[c.Bin.Name]++
			}
			t.Logf("%d locations symbolized as llvm-symbolizer reads them, per binary %v", len(cases), perBin)
		})
	}
}
