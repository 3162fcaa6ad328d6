package otlpprofiles

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
)

// Frame is one frame of a location as a reader of profiles sees it: a function with its
// file and line where the location is symbolized (one per inlined call), or the mapping's file
// and the address where it is not.
type Frame struct {
	Function string // empty when unsymbolized
	File     string
	Line     int64
	// Inlined is true for a frame that was inlined into the frame after it (same location).
	Inlined bool
	Kind    string // profile.frame.type: native, kernel, go, ... (empty when not said)
	Mapping string // the mapping's file name
	Address uint64
}

// CheckedString returns the string at index i of d's string table, or an error naming the
// index when it lies outside the table (untrusted input: pdata's At panics there).
func CheckedString(d pprofile.ProfilesDictionary, i int32) (string, error) {
	t := d.StringTable()
	if i < 0 || int(i) >= t.Len() {
		return "", fmt.Errorf("string index %d outside the table of %d", i, t.Len())
	}
	return t.At(int(i)), nil
}

// locationFrames returns loc's frames, innermost first, checking every index it follows.
func locationFrames(d pprofile.ProfilesDictionary, loc pprofile.Location) ([]Frame, error) {
	base := Frame{Address: loc.Address()}
	attrs := d.AttributeTable()
	idx := loc.AttributeIndices()
	for i := 0; i < idx.Len(); i++ {
		a := idx.At(i)
		if a < 0 || int(a) >= attrs.Len() {
			return nil, fmt.Errorf("attribute index %d outside the table of %d", a, attrs.Len())
		}
		k, err := CheckedString(d, attrs.At(int(a)).KeyStrindex())
		if err != nil {
			return nil, err
		}
		if k == otlpattr.FrameType {
			base.Kind = attrs.At(int(a)).Value().AsString()
		}
	}
	if mi := loc.MappingIndex(); mi != 0 {
		maps := d.MappingTable()
		if mi < 0 || int(mi) >= maps.Len() {
			return nil, fmt.Errorf("mapping index %d outside the table of %d", mi, maps.Len())
		}
		name, err := CheckedString(d, maps.At(int(mi)).FilenameStrindex())
		if err != nil {
			return nil, err
		}
		base.Mapping = name
	}
	lines := loc.Lines()
	if lines.Len() == 0 {
		return []Frame{base}, nil
	}
	funcs := d.FunctionTable()
	out := make([]Frame, 0, lines.Len())
	for i := 0; i < lines.Len(); i++ {
		ln := lines.At(i)
		f := base
		f.Line = ln.Line()
		f.Inlined = i < lines.Len()-1
		if fi := ln.FunctionIndex(); fi != 0 {
			if fi < 0 || int(fi) >= funcs.Len() {
				return nil, fmt.Errorf("function index %d outside the table of %d", fi, funcs.Len())
			}
			fn := funcs.At(int(fi))
			var err error
			if f.Function, err = CheckedString(d, fn.NameStrindex()); err != nil {
				return nil, err
			}
			if f.File, err = CheckedString(d, fn.FilenameStrindex()); err != nil {
				return nil, err
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// StackFrames returns the frames of the stack at index si of d's stack table, innermost
// first, checking every index it follows.
func StackFrames(d pprofile.ProfilesDictionary, si int32) ([]Frame, error) {
	stacks := d.StackTable()
	if si < 0 || int(si) >= stacks.Len() {
		return nil, fmt.Errorf("stack index %d outside the table of %d", si, stacks.Len())
	}
	locs := d.LocationTable()
	li := stacks.At(int(si)).LocationIndices()
	var out []Frame
	for i := 0; i < li.Len(); i++ {
		l := li.At(i)
		if l < 0 || int(l) >= locs.Len() {
			return nil, fmt.Errorf("location index %d outside the table of %d", l, locs.Len())
		}
		frames, err := locationFrames(d, locs.At(int(l)))
		if err != nil {
			return nil, fmt.Errorf("location %d: %w", l, err)
		}
		out = append(out, frames...)
	}
	return out, nil
}
