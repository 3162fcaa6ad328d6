package server_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/gateway/internal/server"
)

// TestMain removes what the shared fixtures left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	// The verdict is already in code; a leftover directory only needs to be named.
	for _, remove := range []func() error{otlptest.RemoveFixtures, testsupport.RemoveFixtures} {
		if err := remove(); err != nil {
			fmt.Fprintf(os.Stderr, "remove test fixtures: %v\n", err)
		}
	}
	os.Exit(code)
}

func TestSymbolizesShapes(t *testing.T) {
	bins := otlptest.Binaries(t)
	sym := testsupport.StartSymbolizer(t, "")
	paths := make([]string, len(bins))
	for i, b := range bins {
		paths[i] = b.Path
	}
	sym.Upload(t, paths...)
	sk := startSink(t)
	pprofDir := t.TempDir()
	g := startGateway(t, server.Config{SymbolizerURL: sym.URL(), OTLPGRPCEndpoint: sk.addr, PprofDir: pprofDir})

	var total int64
	for _, sh := range []otlptest.Shape{otlptest.ShapeEBPF, otlptest.ShapeEBPFZero, otlptest.ShapePprof} {
		t.Run(string(sh), func(t *testing.T) {
			pd, cases := otlptest.BuildRequest(t, sh, bins)
			in := pprofile.NewProfiles()
			pd.CopyTo(in)
			if err := g.send(context.Background(), pd); err != nil {
				t.Fatal(err)
			}
			total += int64(len(cases))
			sk.waitSamples(t, total, 10*time.Second)
			reqs := sk.received()
			out := otlptest.Resolve(reqs[len(reqs)-1])
			if err := otlptest.Compare(otlptest.Resolve(in), out); err != nil {
				t.Fatal(err)
			}
			if err := otlpprofiles.Orphans(reqs[len(reqs)-1]); err != nil {
				t.Fatalf("output dictionary: %v", err)
			}
			otlptest.CheckFrames(t, out, cases)
			t.Logf("%s: %d addresses symbolized as llvm-symbolizer does", sh, len(cases))
			for _, s := range out {
				attrs := fmt.Sprint(s.Stack[0].MappingAttrs)
				if !strings.Contains(attrs, otlpattr.MappingHasFunctions) || !strings.Contains(attrs, otlpattr.MappingHasLineNumbers) {
					t.Fatalf("symbolized mapping without has_* attributes: %v", attrs)
				}
			}
		})
	}

	t.Run("pprof-raw", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(pprofDir, "*.pb.gz"))
		deadline := time.Now().Add(5 * time.Second)
		for len(files) < 3 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			files, _ = filepath.Glob(filepath.Join(pprofDir, "*.pb.gz"))
		}
		if len(files) < 3 {
			t.Fatalf("%d pprof files, want 3", len(files))
		}
		cmd := exec.CommandContext(t.Context(), "go", "tool", "pprof", "-raw", files[0])
		cmd.Env = append(os.Environ(), "PPROF_BINARY_PATH="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -raw: %v\n%s", err, out)
		}
		// An inline chain prints as consecutive lines of one location: leaf, then middle, then outer.
		text := string(out)
		i := strings.Index(text, " leaf ")
		if i < 0 || !strings.Contains(text[i:], " middle ") || !strings.Contains(text[i:], " outer ") || !strings.Contains(text, "do_syscall_64") {
			t.Fatalf("pprof -raw output lacks the inline chain leaf/middle/outer:\n%s", text[:min(len(text), 3000)])
		}
		t.Logf("pprof -raw:\n%s", text[:min(len(text), 1500)])
		if !strings.Contains(text, "main.work") {
			t.Fatalf("pprof -raw output lacks the Go frames")
		}
	})
}
