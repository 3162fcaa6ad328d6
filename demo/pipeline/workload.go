package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// WorkloadSource is the path of the bundled workload's C source below the module root.
const WorkloadSource = "demo/workload/workload.c"

// WorkloadFunctions are the workload's own functions and inline helpers, as they appear in its
// symbolized profile.
var WorkloadFunctions = []string{
	"main", "run_workload", "process_request", "checksum_buffer", "mix_block", "mix_round",
	"render_frame", "shade_row", "shade_pixel", "flush_log",
}

// HotChains are the call chains a profile of the workload shows most, leaf first. Inline
// helpers (mix_round, mix_block, shade_pixel) appear as inline frames of their callers.
var HotChains = [][]string{
	{"mix_round", "mix_block", "checksum_buffer", "process_request", "run_workload", "main"},
	{"shade_pixel", "shade_row", "render_frame", "run_workload", "main"},
}

// InlineFunctions are the always_inline helpers.
var InlineFunctions = []string{"mix_round", "mix_block", "shade_pixel"}

// Workload is the demo's bundled C program, built twice: an unstripped binary with DWARF
// (what a CI pipeline uploads) and a stripped copy with the same build ID (what runs, as on
// a production node).
type Workload struct {
	// Source is the path of the C file compiled.
	Source string
	// Debug is the unstripped binary with DWARF.
	Debug string
	// Stripped is Debug without symbols or debug sections; same GNU build ID.
	Stripped string
}

// CompileWorkload builds the workload of the module at root into dir with gcc (-O2 -g
// -fno-omit-frame-pointer) and strips a copy with strip from binutils, which gcc needs to
// link anyway.
func CompileWorkload(ctx context.Context, root, dir string) (Workload, error) {
	src, err := os.ReadFile(filepath.Join(root, WorkloadSource))
	if err != nil {
		return Workload{}, fmt.Errorf("read workload source: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Workload{}, fmt.Errorf("workload dir: %w", err)
	}
	b := Workload{
		Source:   filepath.Join(dir, "workload.c"),
		Debug:    filepath.Join(dir, "workload.debug"),
		Stripped: filepath.Join(dir, "workload"),
	}
	if err := os.WriteFile(b.Source, src, 0o644); err != nil {
		return Workload{}, fmt.Errorf("write workload source: %w", err)
	}
	gcc := os.Getenv("CC")
	if gcc == "" {
		gcc = "gcc"
	}
	if err := run(ctx, dir, gcc, "-O2", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id",
		"-o", b.Debug, b.Source); err != nil {
		return Workload{}, fmt.Errorf("compile workload: %w", err)
	}
	if err := run(ctx, dir, "strip", "--strip-all", "-o", b.Stripped, b.Debug); err != nil {
		return Workload{}, fmt.Errorf("strip workload: %w", err)
	}
	return b, nil
}

func run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, out.String())
	}
	return nil
}
