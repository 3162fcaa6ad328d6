package symbolizecodec

import (
	"fmt"
	"strings"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
)

// Frame is one function activation at an address: a real function or an inlined call.
type Frame struct {
	Function    string
	LinkageName string // empty when it equals Function or is unknown
	File        string
	Line        uint32
	Column      uint32
	StartLine   uint32
}

// Decode returns the frames of each of the module's addresses, innermost first, in the order
// of the request's addresses. addresses is how many the request carried for the module: an
// answer with another count, a column of the wrong length or a string index out of range is
// an error naming the problem, never a panic. The frames of all addresses share one backing
// array.
func Decode(r *symbolizerv1.ModuleResult, addresses int) ([][]Frame, error) {
	counts := r.GetFrameCounts()
	if len(counts) != addresses {
		return nil, fmt.Errorf("frame_counts: %d entries for %d addresses", len(counts), addresses)
	}
	total := 0
	for _, c := range counts {
		total += int(c)
	}
	ft := r.GetFrames()
	cols := []struct {
		name string
		v    []uint32
	}{
		{"function_names", ft.GetFunctionNames()},
		{"linkage_names", ft.GetLinkageNames()},
		{"files", ft.GetFiles()},
		{"lines", ft.GetLines()},
		{"columns", ft.GetColumns()},
		{"start_lines", ft.GetStartLines()},
	}
	for _, c := range cols {
		if len(c.v) != total {
			return nil, fmt.Errorf("frames.%s: %d rows, frame_counts add up to %d", c.name, len(c.v), total)
		}
	}
	strs := r.GetStrings()
	if len(strs) > 0 && strs[0] != "" {
		return nil, fmt.Errorf("strings[0] is %q, not empty", strs[0])
	}
	for _, c := range cols[:3] {
		for row, i := range c.v {
			if i != 0 && int(i) >= len(strs) {
				return nil, fmt.Errorf("frames.%s[%d]: string %d outside strings of %d entries", c.name, row, i, len(strs))
			}
		}
	}
	str := func(i uint32) string {
		if i == 0 {
			return ""
		}
		return strs[i]
	}
	slab := make([]Frame, total)
	for row := range slab {
		slab[row] = Frame{
			Function:    str(ft.FunctionNames[row]),
			LinkageName: str(ft.LinkageNames[row]),
			File:        str(ft.Files[row]),
			Line:        ft.Lines[row],
			Column:      ft.Columns[row],
			StartLine:   ft.StartLines[row],
		}
	}
	out := make([][]Frame, addresses)
	row := 0
	for i, c := range counts {
		if c > 0 {
			out[i] = slab[row : row+int(c) : row+int(c)]
			row += int(c)
		}
	}
	return out, nil
}

// Detacher copies frames out of an answer for keeping. Decode's frames share one array and
// Codec's strings one allocation, so a value pointing into them keeps the whole answer
// alive: a cache bounded by entries, holding a few hot frames of each of many answers, would
// hold all of those answers. Each distinct string is copied once per Detacher; use one per
// answer.
type Detacher struct{ strs map[string]string }

// NewDetacher returns a Detacher with no strings copied yet.
func NewDetacher() *Detacher { return &Detacher{strs: map[string]string{}} }

// Frames returns a copy of fs that shares no memory with the answer fs came from.
func (d *Detacher) Frames(fs []Frame) []Frame {
	if len(fs) == 0 {
		return nil
	}
	out := make([]Frame, len(fs))
	for i, f := range fs {
		f.Function, f.LinkageName, f.File = d.str(f.Function), d.str(f.LinkageName), d.str(f.File)
		out[i] = f
	}
	return out
}

func (d *Detacher) str(s string) string {
	if s == "" {
		return ""
	}
	c, ok := d.strs[s]
	if !ok {
		c = strings.Clone(s)
		d.strs[s] = c
	}
	return c
}
