package pipeline

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/profsym/profsym/pkg/flamegraph"
)

// FlameGraph writes the stacks as one self-contained interactive flame graph page at path.
// byProcess puts each process (its executable or thread name and pid) at the base of its
// stacks, for a graph of the whole machine.
func FlameGraph(stacks []Stack, path, title string, byProcess bool) error {
	tree := flamegraph.NewTree()
	for _, s := range stacks {
		fs := make([]flamegraph.Frame, 0, len(s.Frames)+1)
		for _, f := range s.Frames {
			fs = append(fs, flamegraph.Frame{Function: f.Function, File: f.File, Line: f.Line, Inlined: f.Inlined,
				Kind: f.Kind, Module: f.Mapping, Address: f.Address})
		}
		if byProcess {
			name := s.Exe
			if name == "" {
				name = s.Comm
			}
			fs = append(fs, flamegraph.Frame{Function: fmt.Sprintf("%s (pid %s)", filepath.Base(name), s.PID), Kind: "process"})
		}
		tree.Add(flamegraph.Stack{Frames: fs, Value: s.Samples})
	}
	if tree.Total() == 0 {
		return fmt.Errorf("%s: no samples to draw", title)
	}
	var b bytes.Buffer
	if err := flamegraph.Render(&b, tree, flamegraph.Options{Title: title, Unit: "samples"}); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the flame graph: %w", err)
	}
	return nil
}
