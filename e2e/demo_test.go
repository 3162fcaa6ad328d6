package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/profsym/profsym/demo/pipeline"
)

// TestDemo runs the demo the way CI does and checks what it prints: the workload's top
// table with a workload function at workload.c:line, equal sample totals, and file paths
// that exist.
func TestDemo(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	// Generous: the demo builds the services, which on a loaded machine with a cold cache
	// takes minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, "go", "run", "./demo", "--non-interactive", "--duration", "8s", "--dir", dir)
	cmd.Dir = moduleRoot(t)
	// Its own group, so a timeout kills the demo's children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	text := out.String()
	t.Logf("demo ran %v:\n%s", time.Since(start).Round(time.Millisecond), text)
	if err != nil {
		t.Fatalf("demo failed: %v", err)
	}
	if strings.Contains(text, "\x1b[") {
		t.Error("--non-interactive output has terminal escape sequences")
	}
	for i := 1; i <= 9; i++ {
		if !strings.Contains(text, "["+string(rune('0'+i))+"/9] ") {
			t.Errorf("step %d/9 not explained", i)
		}
	}

	// The workload's table: a row naming a workload function at workload.c:<line>.
	section := text
	if i := strings.Index(text, "The workload (pid"); i >= 0 {
		section = text[i:]
		if j := strings.Index(section, "The whole machine"); j >= 0 {
			section = section[:j]
		}
	} else {
		t.Fatal("no workload section")
	}
	if !strings.Contains(section, "self%") {
		t.Error("no top table header in the workload section")
	}
	row := regexp.MustCompile(`(?m)^\s+[0-9.]+%\s+\d+\s+(\S+)\s+workload\.c:(\d+)`)
	rows := row.FindAllStringSubmatch(section, -1)
	known := map[string]bool{}
	for _, f := range pipeline.WorkloadFunctions {
		known[f] = true
	}
	found := false
	for _, r := range rows {
		if known[r[1]] && r[2] != "0" {
			found = true
		}
	}
	if !found {
		t.Errorf("no row with a workload function at workload.c:<line> in:\n%s", section)
	}
	if !regexp.MustCompile(`(?m)^\s+[0-9.]+%\s+\d+\s+(mix_round|mix_block|shade_pixel)\s+workload\.c:\d+\s+\S+`).MatchString(section) {
		t.Errorf("no inline helper with the functions it was inlined into:\n%s", section)
	}
	if m := regexp.MustCompile(`samples: (\d+) sent by the collector, (\d+) written by the gateway \(equal\)`).FindStringSubmatch(text); m == nil || m[1] == "0" {
		t.Error("no equal, non-zero sample totals line")
	}

	// Every path it points at exists.
	paths := regexp.MustCompile(`(?m)(?:: |go tool pprof -top )(/\S+)`).FindAllStringSubmatch(text, -1)
	if len(paths) < 4 {
		t.Fatalf("expected the OTLP, pprof, collector and merged pprof paths; found %v", paths)
	}
	for _, p := range paths {
		if !strings.HasPrefix(p[1], dir) {
			continue
		}
		if _, err := os.Stat(p[1]); err != nil {
			t.Errorf("printed path does not exist: %v", err)
		}
	}
	otlpOut, err := pipeline.ReadOTLPFile(filepath.Join(dir, "otlp", "profiles.otlp.pb"))
	if err != nil {
		t.Error(err)
	}
	pprofFiles, _ := filepath.Glob(filepath.Join(dir, "pprof", "*.pb.gz"))
	if len(otlpOut) == 0 || len(pprofFiles) == 0 {
		t.Errorf("OTLP requests %d, pprof files %d; want both", len(otlpOut), len(pprofFiles))
	}
	merged := filepath.Join(dir, "workload.pb.gz")
	if !strings.Contains(text, "go tool pprof -top "+merged) {
		t.Fatal("no go tool pprof command for the merged workload profile")
	}
	// The command it suggests works and shows the workload's functions.
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", merged).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top %s: %v\n%s", merged, err, top)
	}
	if !strings.Contains(string(top), "shade_pixel") && !strings.Contains(string(top), "mix_round") {
		t.Errorf("go tool pprof -top shows no workload function:\n%s", top)
	}
}
