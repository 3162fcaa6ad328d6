// Package frametable reads the frames of a Symbolize answer. The API sends them column by
// column with a string table (see ModuleResult in proto/profsym/symbolizer/v1), which is
// cheap on the wire but easy to misread; Decode checks every count and index and hands back
// one slice of frames per requested address.
package frametable

import (
	"fmt"

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

// Encode sets r's frame counts, frames and strings to hold locs (the frames of each address,
// innermost first), each distinct string once. It is the inverse of Decode, for servers and
// tests that have frames in hand.
func Encode(r *symbolizerv1.ModuleResult, locs [][]Frame) {
	ids := map[string]uint32{"": 0}
	var strs []string
	str := func(s string) uint32 {
		if i, ok := ids[s]; ok {
			return i
		}
		if strs == nil {
			strs = []string{""}
		}
		i := uint32(len(strs))
		strs = append(strs, s)
		ids[s] = i
		return i
	}
	counts := make([]uint32, len(locs))
	ft := &symbolizerv1.FrameTable{}
	for i, frames := range locs {
		counts[i] = uint32(len(frames))
		for _, f := range frames {
			link := f.LinkageName
			if link == f.Function {
				link = ""
			}
			ft.FunctionNames = append(ft.FunctionNames, str(f.Function))
			ft.LinkageNames = append(ft.LinkageNames, str(link))
			ft.Files = append(ft.Files, str(f.File))
			ft.Lines = append(ft.Lines, f.Line)
			ft.Columns = append(ft.Columns, f.Column)
			ft.StartLines = append(ft.StartLines, f.StartLine)
		}
	}
	r.FrameCounts, r.Frames, r.Strings = counts, ft, strs
}
