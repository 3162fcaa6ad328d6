// Package flamegraphcmd implements `symbolizer flamegraph`: the profile files profsym writes
// (the gateway's pprof and OTLP files, the collector's --output-file, a plain OTLP request) as
// one self-contained interactive flame graph.
package flamegraphcmd

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/profsym/profsym/pkg/flamegraph"
)

// Cmd is `symbolizer flamegraph`.
type Cmd struct {
	Output      string    `short:"o" type:"path" help:"The HTML file to write (default: the first input's name with .html)." placeholder:"OUT"`
	Title       string    `help:"The page's title (default: the inputs' names)."`
	SampleType  string    `name:"sample-type" help:"pprof sample type to draw (default: the last, as pprof does)."`
	MinFraction float64   `name:"min-fraction" default:"0.0001" help:"Leave out frames below this share of the total (they would be narrower than a pixel); 0 keeps all."`
	Inputs      []string  `arg:"" type:"existingfile" help:"pprof (gzipped or not) or OTLP files (plain, or length-delimited as the collector and the gateway write them); several are merged." placeholder:"FILE"`
	Stdout      io.Writer `kong:"-"`
}

// Run reads the inputs, merges them and writes the page.
func (c *Cmd) Run() error {
	stdout := c.Stdout
	if stdout == nil {
		stdout = os.Stdout
	}
	tree := flamegraph.NewTree()
	unit := ""
	for _, in := range c.Inputs {
		p, err := flamegraph.Read(in, c.SampleType)
		if err != nil {
			return err
		}
		if unit == "" {
			unit = p.Unit
		} else if p.Unit != unit {
			return fmt.Errorf("%s holds %s, the files before it %s: a flame graph adds one kind of value", in, p.Unit, unit)
		}
		for _, s := range p.Stacks {
			tree.Add(s)
		}
	}
	if tree.Total() == 0 {
		return fmt.Errorf("%s: no sample with a stack and a value", strings.Join(c.Inputs, ", "))
	}
	out := c.Output
	if out == "" {
		base := c.Inputs[0]
		for _, ext := range []string{".gz", ".pb", ".otlp", ".pprof"} {
			base = strings.TrimSuffix(base, ext)
		}
		out = base + ".html"
	}
	title := c.Title
	if title == "" {
		var names []string
		for _, in := range c.Inputs {
			names = append(names, filepath.Base(in))
		}
		title = strings.Join(names, ", ")
	}
	frac := c.MinFraction
	if frac == 0 {
		frac = -1 // keep every frame
	}
	var b bytes.Buffer
	if err := flamegraph.Render(&b, tree, flamegraph.Options{Title: title, Unit: unit, MinFraction: frac}); err != nil {
		return err
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the flame graph: %w", err)
	}
	fmt.Fprintf(stdout, "%s\n", out)
	return nil
}
