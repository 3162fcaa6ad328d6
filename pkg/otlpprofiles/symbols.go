package otlpprofiles

import (
	"slices"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/symbolizecodec"
)

// SymbolStats says what AddSymbols added, and what compaction dropped.
type SymbolStats struct {
	Locations, Lines, Functions, Strings, MappingAttributes int
	Compacted                                               CompactStats
}

type fnKey struct {
	name, system, file int32
	start              int64
}

type attrKey struct {
	key int32
	val bool
}

type interner struct {
	d pprofile.ProfilesDictionary
	// strings, funcs and byFrame (pooled maps): byFrame skips hashing names again for a frame
	// already interned: answers for the same address, and the symbolize cache, share frames.
	*maps
	attrs map[attrKey]int32
	// The tables are seeded with the dictionary's entries on first use.
	stringsSeeded, funcsSeeded bool
	// hint sizes the tables for what this request will add.
	hint  int
	stats *SymbolStats
}

// maps are the interner's tables, kept between requests: building them was a fifth of the
// gateway's allocation per request. A request so large that its maps would pin much memory
// does not return them.
type maps struct {
	strings map[string]int32
	funcs   map[fnKey]int32
	byFrame map[*symbolizecodec.Frame]int32
}

const maxPooledEntries = 1 << 16

var mapPool = sync.Pool{New: func() any {
	return &maps{strings: map[string]int32{}, funcs: map[fnKey]int32{}, byFrame: map[*symbolizecodec.Frame]int32{}}
}}

func (m *maps) release() {
	if len(m.strings) > maxPooledEntries || len(m.funcs) > maxPooledEntries || len(m.byFrame) > maxPooledEntries {
		return
	}
	// Cleared so no request's strings or frames stay reachable.
	clear(m.strings)
	clear(m.funcs)
	clear(m.byFrame)
	mapPool.Put(m)
}

func (in *interner) str(s string) int32 {
	if s == "" {
		return 0
	}
	st := in.d.StringTable()
	if !in.stringsSeeded {
		in.stringsSeeded = true
		for i := 1; i < st.Len(); i++ {
			if _, ok := in.strings[st.At(i)]; !ok {
				in.strings[st.At(i)] = int32(i)
			}
		}
	}
	if i, ok := in.strings[s]; ok {
		return i
	}
	i := int32(st.Len())
	st.Append(s)
	in.strings[s] = i
	in.stats.Strings++
	return i
}

func (in *interner) function(f *symbolizecodec.Frame) int32 {
	if i, ok := in.byFrame[f]; ok {
		return i
	}
	i := in.intern(f)
	in.byFrame[f] = i
	return i
}

func (in *interner) intern(f *symbolizecodec.Frame) int32 {
	system := f.LinkageName
	if system == "" {
		system = f.Function
	}
	k := fnKey{in.str(f.Function), in.str(system), in.str(f.File), int64(f.StartLine)}
	ft := in.d.FunctionTable()
	if !in.funcsSeeded {
		in.funcsSeeded = true
		for i := 1; i < ft.Len(); i++ {
			e := ft.At(i)
			ek := fnKey{e.NameStrindex(), e.SystemNameStrindex(), e.FilenameStrindex(), e.StartLine()}
			if _, ok := in.funcs[ek]; !ok {
				in.funcs[ek] = int32(i)
			}
		}
	}
	if i, ok := in.funcs[k]; ok {
		return i
	}
	i := int32(ft.Len())
	e := ft.AppendEmpty()
	e.SetNameStrindex(k.name)
	e.SetSystemNameStrindex(k.system)
	e.SetFilenameStrindex(k.file)
	e.SetStartLine(k.start)
	in.funcs[k] = i
	in.stats.Functions++
	return i
}

func (in *interner) boolAttr(key string) int32 {
	k := attrKey{in.str(key), true}
	at := in.d.AttributeTable()
	if in.attrs == nil {
		in.attrs = make(map[attrKey]int32)
		for i := 1; i < at.Len(); i++ {
			e := at.At(i)
			if e.Value().Type() == pcommon.ValueTypeBool && e.UnitStrindex() == 0 {
				ek := attrKey{e.KeyStrindex(), e.Value().Bool()}
				if _, ok := in.attrs[ek]; !ok {
					in.attrs[ek] = int32(i)
				}
			}
		}
	}
	if i, ok := in.attrs[k]; ok {
		return i
	}
	i := int32(at.Len())
	e := at.AppendEmpty()
	e.SetKeyStrindex(k.key)
	e.Value().SetBool(true)
	in.attrs[k] = i
	return i
}

// seed gives every table the zero entry at index 0 that OTLP requires before anything is
// appended: a table that was empty gets one, so appended entries never land on index 0.
func seed(d pprofile.ProfilesDictionary) {
	if d.StringTable().Len() == 0 {
		d.StringTable().Append("")
	}
	if d.FunctionTable().Len() == 0 {
		d.FunctionTable().AppendEmpty()
	}
	if d.AttributeTable().Len() == 0 {
		d.AttributeTable().AppendEmpty()
	}
}

// AddSymbols gives each location locs names (locs[i] holds the frames of location_table[i],
// innermost first; nil for none) its lines, and each mapping in mappings (mapping_table
// index -> fidelity reached) the pprof.mapping.has_* attributes that fidelity makes true.
// Locations that already have lines, the zero entries at index 0, or indices outside the
// tables are left alone. The request must have passed validation. Frames are taken by
// address: frames shared between locations (answers for one address, or from the
// symbolizer's cache) are interned once. AddSymbols then compacts the dictionary, which renumbers
// its indices: locs and mappings name indices as they were before the call.
func AddSymbols(pd pprofile.Profiles, locs [][]symbolizecodec.Frame, mappings map[int32]symbolizerv1.Fidelity) SymbolStats {
	stats := add(pd, locs, mappings)
	stats.Compacted = Compact(pd)
	return stats
}

func add(pd pprofile.Profiles, locs [][]symbolizecodec.Frame, mappings map[int32]symbolizerv1.Fidelity) SymbolStats {
	var stats SymbolStats
	n := 0
	for _, frames := range locs {
		if len(frames) > 0 {
			n++
		}
	}
	if n == 0 && len(mappings) == 0 {
		return stats
	}
	d := pd.Dictionary()
	seed(d)
	m := mapPool.Get().(*maps)
	defer m.release()
	in := &interner{d: d, stats: &stats, hint: 2 * n, maps: m}
	// Grow the tables once rather than append by append.
	d.FunctionTable().EnsureCapacity(d.FunctionTable().Len() + in.hint)
	d.StringTable().EnsureCapacity(d.StringTable().Len() + 2*in.hint)

	// In index order, so the same request always yields the same dictionary.
	for li, frames := range locs {
		if len(frames) == 0 || li == 0 {
			continue
		}
		loc, ok := Location(d, int32(li))
		if !ok || loc.Lines().Len() > 0 {
			continue
		}
		lines := loc.Lines()
		lines.EnsureCapacity(len(frames))
		for k := range frames {
			f := &frames[k]
			l := lines.AppendEmpty()
			l.SetFunctionIndex(in.function(f))
			l.SetLine(int64(f.Line))
			l.SetColumn(int64(f.Column))
		}
		stats.Locations++
		stats.Lines += len(frames)
	}

	mkeys := make([]int32, 0, len(mappings))
	for k := range mappings {
		mkeys = append(mkeys, k)
	}
	slices.Sort(mkeys)
	for _, mi := range mkeys {
		m, ok := Mapping(d, mi)
		if !ok || mi == 0 {
			continue
		}
		for _, key := range HasKeys(mappings[mi]) {
			if HasAttr(d, m.AttributeIndices(), key) {
				continue
			}
			m.AttributeIndices().Append(in.boolAttr(key))
			stats.MappingAttributes++
		}
	}
	return stats
}

// HasKeys lists the pprof.mapping.has_* attributes that are true at a fidelity.
func HasKeys(f symbolizerv1.Fidelity) []string {
	switch f {
	case symbolizerv1.Fidelity_FIDELITY_FULL:
		return []string{otlpattr.MappingHasFunctions, otlpattr.MappingHasFilenames, otlpattr.MappingHasLineNumbers, otlpattr.MappingHasInlineFrames}
	case symbolizerv1.Fidelity_FIDELITY_LINES:
		return []string{otlpattr.MappingHasFunctions, otlpattr.MappingHasFilenames, otlpattr.MappingHasLineNumbers}
	case symbolizerv1.Fidelity_FIDELITY_SYMBOLS:
		return []string{otlpattr.MappingHasFunctions}
	}
	return nil
}
