package pprofexporter

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
)

// writeAtomic writes data to dir/name through a temporary file and a rename, so readers never
// see half a file.
func writeAtomic(dir, name string, write func(f *os.File) error) error {
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return fmt.Errorf("create temp file in %s: %w", dir, err)
	}
	tmp := f.Name()
	// A temporary file that cannot be removed stays behind in the output directory, so its
	// failure is reported with the error that abandoned it.
	abandon := func(err error) error {
		if rerr := os.Remove(tmp); rerr != nil {
			return errors.Join(err, fmt.Errorf("remove %s: %w", tmp, rerr))
		}
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return abandon(err)
	}
	if err := f.Close(); err != nil {
		return abandon(fmt.Errorf("close %s: %w", tmp, err))
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return abandon(fmt.Errorf("rename %s: %w", tmp, err))
	}
	return nil
}

// retention deletes the oldest output files of a directory beyond a count, so a volume that
// only gets written to (a development gateway's emptyDir) never fills. Names start with the
// write time in nanoseconds, fixed width, so name order is age order.
type retention struct {
	mu     sync.Mutex
	keep   int
	prefix string
}

func (r *retention) prune(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keep <= 0 {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s for retention: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), r.prefix) {
			names = append(names, e.Name())
		}
	}
	var errs []error
	for _, name := range names[:max(0, len(names)-r.keep)] {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("retention: %w", err))
		}
	}
	return errors.Join(errs...)
}

// compiled reports whether a location is a frame of compiled code, which lives in a mapped
// binary: frame type native, go, rust, or none. Kernel and interpreted frames are not.
func compiled(d pprofile.ProfilesDictionary, loc pprofile.Location) bool {
	switch otlpprofiles.AttrStr(d, loc.AttributeIndices(), otlpattr.FrameType) {
	case "", otlpattr.FrameTypeNative, otlpattr.FrameTypeGo, otlpattr.FrameTypeRust:
		return true
	}
	return false
}

// mainMapping picks the mapping of the process's main executable among those p's samples
// reach through frames of compiled code (0 when there is none). OTLP does not mark the main
// binary, so the rule goes from the strongest evidence to the weakest:
//  1. the resource names the executable: the mapping whose file name equals
//     process.executable.path, else one whose base name equals that path's base name or
//     process.executable.name (paths seen from another mount namespace differ in their
//     prefix); among several (a binary maps several segments), the lowest-addressed;
//  2. else the mapping of the first sample's outermost compiled frame: every thread starts
//     in the executable (_start, main) unless its stack was cut short;
//  3. else the lowest-addressed mapping reached: in process address space executables are
//     mapped below the shared libraries they load, PIE or not (mappings in ELF virtual
//     addresses, as the OTel eBPF profiler sends, say less, hence this comes last).
func mainMapping(d pprofile.ProfilesDictionary, res pcommon.Resource, p pprofile.Profile) int32 {
	var used []int32
	seen := map[int32]bool{}
	var outermost int32
	ss := p.Samples()
	for i := 0; i < ss.Len(); i++ {
		stack := otlpprofiles.Stack(d, ss.At(i).StackIndex())
		// Stacks list the leaf first: walk from the outermost frame in.
		for j := len(stack) - 1; j >= 0; j-- {
			loc, ok := otlpprofiles.Location(d, stack[j])
			if !ok || loc.MappingIndex() == 0 || !compiled(d, loc) {
				continue
			}
			mi := loc.MappingIndex()
			if _, ok := otlpprofiles.Mapping(d, mi); !ok {
				continue
			}
			if i == 0 && outermost == 0 {
				outermost = mi
			}
			if !seen[mi] {
				seen[mi] = true
				used = append(used, mi)
			}
		}
	}
	lowest := func(match func(file string) bool) int32 {
		var best int32
		for _, mi := range used {
			m, _ := otlpprofiles.Mapping(d, mi)
			if !match(otlpprofiles.Str(d, m.FilenameStrindex())) {
				continue
			}
			if best == 0 {
				best = mi
				continue
			}
			if b, _ := otlpprofiles.Mapping(d, best); m.MemoryStart() < b.MemoryStart() {
				best = mi
			}
		}
		return best
	}
	var exePath, exeName string
	if v, ok := res.Attributes().Get(otlpattr.ProcessExecutablePath); ok && v.Type() == pcommon.ValueTypeStr {
		exePath = v.Str()
	}
	if v, ok := res.Attributes().Get(otlpattr.ProcessExecutableName); ok && v.Type() == pcommon.ValueTypeStr {
		exeName = v.Str()
	}
	if exePath != "" {
		if mi := lowest(func(f string) bool { return f == exePath }); mi != 0 {
			return mi
		}
	}
	if exePath != "" || exeName != "" {
		names := map[string]bool{}
		if exePath != "" {
			names[path.Base(exePath)] = true
		}
		if exeName != "" {
			names[exeName] = true
		}
		if mi := lowest(func(f string) bool { return f != "" && names[path.Base(f)] }); mi != 0 {
			return mi
		}
	}
	if outermost != 0 {
		return outermost
	}
	return lowest(func(string) bool { return true })
}

func boolAttr(d pprofile.ProfilesDictionary, idx pcommon.Int32Slice, key string) bool {
	v := false
	otlpprofiles.Attr(d, idx, func(k string, kv pprofile.KeyValueAndUnit) {
		if k == key && kv.Value().Type() == pcommon.ValueTypeBool && kv.Value().Bool() {
			v = true
		}
	})
	return v
}

// ToPprof converts one OTLP profile to pprof. The main executable's mapping comes first, as
// pprof expects (see mainMapping). Inline frames keep their order (OTLP and pprof
// both list the innermost function first); a mapping's build ID is its GNU build ID, else its
// Go build ID, else its htlhash. A sample without values counts its timestamps (the OTel eBPF
// profiler sends one timestamp per event and no values). The dictionary must have passed
// validation.
func ToPprof(d pprofile.ProfilesDictionary, res pcommon.Resource, p pprofile.Profile) (*profile.Profile, error) {
	out := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: otlpprofiles.Str(d, p.SampleType().TypeStrindex()), Unit: otlpprofiles.Str(d, p.SampleType().UnitStrindex())}},
		TimeNanos:     int64(p.Time()),
		DurationNanos: int64(p.DurationNano()),
		Period:        p.Period(),
	}
	if pt := p.PeriodType(); pt.TypeStrindex() != 0 || pt.UnitStrindex() != 0 {
		out.PeriodType = &profile.ValueType{Type: otlpprofiles.Str(d, pt.TypeStrindex()), Unit: otlpprofiles.Str(d, pt.UnitStrindex())}
	}
	for k, v := range res.Attributes().All() {
		out.Comments = append(out.Comments, k+"="+v.AsString())
	}

	mappings := map[int32]*profile.Mapping{}
	functions := map[int32]*profile.Function{}
	locations := map[int32]*profile.Location{}
	mapping := func(mi int32) *profile.Mapping {
		if mi == 0 {
			return nil
		}
		if m, ok := mappings[mi]; ok {
			return m
		}
		om, ok := otlpprofiles.Mapping(d, mi)
		if !ok {
			return nil
		}
		ai := om.AttributeIndices()
		bid := otlpprofiles.AttrStr(d, ai, otlpattr.BuildIDGNU)
		if bid == "" {
			bid = otlpprofiles.AttrStr(d, ai, otlpattr.BuildIDGo)
		}
		if bid == "" {
			bid = otlpprofiles.AttrStr(d, ai, otlpattr.BuildIDHTLHash)
		}
		m := &profile.Mapping{
			ID:              uint64(len(out.Mapping) + 1),
			Start:           om.MemoryStart(),
			Limit:           om.MemoryLimit(),
			Offset:          om.FileOffset(),
			File:            otlpprofiles.Str(d, om.FilenameStrindex()),
			BuildID:         bid,
			HasFunctions:    boolAttr(d, ai, otlpattr.MappingHasFunctions),
			HasFilenames:    boolAttr(d, ai, otlpattr.MappingHasFilenames),
			HasLineNumbers:  boolAttr(d, ai, otlpattr.MappingHasLineNumbers),
			HasInlineFrames: boolAttr(d, ai, otlpattr.MappingHasInlineFrames),
		}
		mappings[mi] = m
		out.Mapping = append(out.Mapping, m)
		return m
	}
	function := func(fi int32) *profile.Function {
		if f, ok := functions[fi]; ok {
			return f
		}
		f := &profile.Function{ID: uint64(len(out.Function) + 1)}
		if of, ok := otlpprofiles.Function(d, fi); ok {
			f.Name = otlpprofiles.Str(d, of.NameStrindex())
			f.SystemName = otlpprofiles.Str(d, of.SystemNameStrindex())
			f.Filename = otlpprofiles.Str(d, of.FilenameStrindex())
			f.StartLine = of.StartLine()
		}
		functions[fi] = f
		out.Function = append(out.Function, f)
		return f
	}
	location := func(li int32) *profile.Location {
		if l, ok := locations[li]; ok {
			return l
		}
		l := &profile.Location{ID: uint64(len(out.Location) + 1)}
		if ol, ok := otlpprofiles.Location(d, li); ok {
			l.Mapping = mapping(ol.MappingIndex())
			l.Address = ol.Address()
			l.IsFolded = boolAttr(d, ol.AttributeIndices(), otlpattr.LocationIsFolded)
			lines := ol.Lines()
			for i := 0; i < lines.Len(); i++ {
				ln := lines.At(i)
				l.Line = append(l.Line, profile.Line{Function: function(ln.FunctionIndex()), Line: ln.Line(), Column: ln.Column()})
			}
		}
		locations[li] = l
		out.Location = append(out.Location, l)
		return l
	}

	// pprof takes the first mapping for the main binary (the "File:" of its reports).
	if mi := mainMapping(d, res, p); mi != 0 {
		mapping(mi)
	}
	ss := p.Samples()
	for i := 0; i < ss.Len(); i++ {
		s := ss.At(i)
		var v int64
		switch {
		case s.Values().Len() > 0:
			v = s.Values().At(0)
		case s.TimestampsUnixNano().Len() > 0:
			v = int64(s.TimestampsUnixNano().Len())
		default:
			v = 1
		}
		ps := &profile.Sample{Value: []int64{v}}
		for _, li := range otlpprofiles.Stack(d, s.StackIndex()) {
			ps.Location = append(ps.Location, location(li))
		}
		otlpprofiles.Attr(d, s.AttributeIndices(), func(k string, kv pprofile.KeyValueAndUnit) {
			switch kv.Value().Type() {
			case pcommon.ValueTypeInt:
				if ps.NumLabel == nil {
					ps.NumLabel, ps.NumUnit = map[string][]int64{}, map[string][]string{}
				}
				ps.NumLabel[k] = append(ps.NumLabel[k], kv.Value().Int())
				ps.NumUnit[k] = append(ps.NumUnit[k], otlpprofiles.Str(d, kv.UnitStrindex()))
			case pcommon.ValueTypeEmpty:
			default:
				if ps.Label == nil {
					ps.Label = map[string][]string{}
				}
				ps.Label[k] = append(ps.Label[k], kv.Value().AsString())
			}
		})
		out.Sample = append(out.Sample, ps)
	}
	if err := out.CheckValid(); err != nil {
		return nil, fmt.Errorf("pprof conversion: %w", err)
	}
	return out, nil
}
