package otlpprofiles

import (
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// marks records which entries of each dictionary table are reachable from the profiles of a
// request: samples reach stacks, links and attributes; stacks reach locations; locations reach
// mappings, functions and attributes; mappings, functions, attributes and profiles reach
// strings. Index 0, the zero entry OTLP requires, always counts as reachable. Resource and
// scope attributes reach nothing: pdata holds them as plain strings, and the Profiling SIG's
// profcheck does not count the string-table references a marshaler gives them either.
type marks struct {
	str, attr, mapping, fn, loc, stack, link []bool
	// outOfRange is set when some index points outside its table; nothing may be renumbered
	// then, since a later table entry could take that index's place.
	outOfRange bool
}

func newMarks(n int) []bool {
	m := make([]bool, n)
	if n > 0 {
		m[0] = true
	}
	return m
}

func (m *marks) set(t []bool, i int32) bool {
	if i < 0 || int(i) >= len(t) {
		if i != 0 {
			m.outOfRange = true
		}
		return false
	}
	if t[i] {
		return false
	}
	t[i] = true
	return true
}

func (m *marks) attrs(idx pcommon.Int32Slice) {
	for i := 0; i < idx.Len(); i++ {
		m.set(m.attr, idx.At(i))
	}
}

func mark(pd pprofile.Profiles) *marks {
	d := pd.Dictionary()
	st, at, mt, ft, lt, stt, lkt := d.StringTable(), d.AttributeTable(), d.MappingTable(), d.FunctionTable(), d.LocationTable(), d.StackTable(), d.LinkTable()
	m := &marks{
		str: newMarks(st.Len()), attr: newMarks(at.Len()), mapping: newMarks(mt.Len()), fn: newMarks(ft.Len()),
		loc: newMarks(lt.Len()), stack: newMarks(stt.Len()), link: newMarks(lkt.Len()),
	}
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			ps := sps.At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				p := ps.At(k)
				m.set(m.str, p.SampleType().TypeStrindex())
				m.set(m.str, p.SampleType().UnitStrindex())
				m.set(m.str, p.PeriodType().TypeStrindex())
				m.set(m.str, p.PeriodType().UnitStrindex())
				m.attrs(p.AttributeIndices())
				ss := p.Samples()
				for n := 0; n < ss.Len(); n++ {
					s := ss.At(n)
					m.set(m.stack, s.StackIndex())
					m.set(m.link, s.LinkIndex())
					m.attrs(s.AttributeIndices())
				}
			}
		}
	}
	// Every table is walked whole, reachable entries only (index 0 included: a malformed
	// but accepted zero entry keeps what it names), so each entry is visited once.
	for i := 0; i < stt.Len(); i++ {
		if !m.stack[i] {
			continue
		}
		li := stt.At(i).LocationIndices()
		for j := 0; j < li.Len(); j++ {
			m.set(m.loc, li.At(j))
		}
	}
	for i := 0; i < lt.Len(); i++ {
		if !m.loc[i] {
			continue
		}
		l := lt.At(i)
		m.set(m.mapping, l.MappingIndex())
		m.attrs(l.AttributeIndices())
		lines := l.Lines()
		for j := 0; j < lines.Len(); j++ {
			m.set(m.fn, lines.At(j).FunctionIndex())
		}
	}
	for i := 0; i < mt.Len(); i++ {
		if !m.mapping[i] {
			continue
		}
		mp := mt.At(i)
		m.set(m.str, mp.FilenameStrindex())
		m.attrs(mp.AttributeIndices())
	}
	for i := 0; i < ft.Len(); i++ {
		if !m.fn[i] {
			continue
		}
		f := ft.At(i)
		m.set(m.str, f.NameStrindex())
		m.set(m.str, f.SystemNameStrindex())
		m.set(m.str, f.FilenameStrindex())
	}
	for i := 0; i < at.Len(); i++ {
		if !m.attr[i] {
			continue
		}
		kv := at.At(i)
		m.set(m.str, kv.KeyStrindex())
		m.set(m.str, kv.UnitStrindex())
	}
	return m
}

// Orphans reports every dictionary entry of pd, other than the zero entry at index 0, that
// nothing in pd reaches (see marks for what reaches what), one line per table. It is the
// Profiling SIG's profcheck -check-orphans, made transitive: an entry that only an orphan
// references is an orphan too. Applied to a request decoded from the wire, it also sees the
// strings a marshaler moved into the string table for resource or scope attributes, which
// decoding turns back into plain strings and leaves unreferenced.
func Orphans(pd pprofile.Profiles) error {
	m := mark(pd)
	var errs []error
	for _, t := range []struct {
		name string
		refs []bool
	}{
		{"string_table", m.str}, {"attribute_table", m.attr}, {"mapping_table", m.mapping},
		{"function_table", m.fn}, {"location_table", m.loc}, {"stack_table", m.stack}, {"link_table", m.link},
	} {
		var idx []string
		for i, ok := range t.refs {
			if ok {
				continue
			}
			if t.name == "string_table" {
				idx = append(idx, fmt.Sprintf("%d %q", i, pd.Dictionary().StringTable().At(i)))
			} else {
				idx = append(idx, fmt.Sprint(i))
			}
		}
		if n := len(idx); n > 0 {
			if n > 20 {
				idx = append(idx[:20], fmt.Sprintf("and %d more", n-20))
			}
			errs = append(errs, fmt.Errorf("%s: %d unreferenced entries: %s", t.name, n, strings.Join(idx, ", ")))
		}
	}
	if m.outOfRange {
		errs = append(errs, errors.New("some index points outside its table"))
	}
	return errors.Join(errs...)
}

// renumber returns the new index of every entry kept (-1 for those dropped), in table order,
// and how many are kept.
func renumber(keep []bool) ([]int32, int) {
	to := make([]int32, len(keep))
	n := 0
	for i, k := range keep {
		if k {
			to[i] = int32(n)
			n++
		} else {
			to[i] = -1
		}
	}
	return to, n
}

// remap gives an index its new value; indices outside the table do not occur (Compact does
// nothing when any does).
func remap(to []int32, i int32) int32 {
	if i <= 0 || int(i) >= len(to) {
		return i
	}
	return to[i]
}

func remapSlice(to []int32, s pcommon.Int32Slice) {
	for i := 0; i < s.Len(); i++ {
		s.SetAt(i, remap(to, s.At(i)))
	}
}

// hiddenStrings reports whether a reachable attribute value may reference the string table
// in a way pdata does not show: a string_value_strindex reads as an empty value and a
// key_strindex in a nested map as an empty key. Renumbering strings would break such a
// reference, so the string table is then left as it is.
func hiddenStrings(at pprofile.KeyValueAndUnitSlice, reach []bool) bool {
	var hidden func(v pcommon.Value) bool
	hidden = func(v pcommon.Value) bool {
		switch v.Type() {
		case pcommon.ValueTypeEmpty:
			return true
		case pcommon.ValueTypeMap:
			for k, e := range v.Map().All() {
				if k == "" || hidden(e) {
					return true
				}
			}
		case pcommon.ValueTypeSlice:
			s := v.Slice()
			for i := 0; i < s.Len(); i++ {
				if hidden(s.At(i)) {
					return true
				}
			}
		}
		return false
	}
	for i := 1; i < at.Len(); i++ {
		if reach[i] && hidden(at.At(i).Value()) {
			return true
		}
	}
	return false
}

// CompactStats says how many entries Compact dropped per table.
type CompactStats struct {
	Strings, Attributes, Mappings, Functions, Locations, Stacks, Links int
	// StringsKept is set when the string table was left whole because an attribute value
	// may reference it out of pdata's sight (see hiddenStrings).
	StringsKept bool
}

// Compact drops every dictionary entry that nothing in pd reaches (index 0 excepted) and
// renumbers every index in pd to match, so that each sample means what it meant: same
// stack, frames, mappings, functions, strings, attributes and links. A request with an index
// outside its table is left alone. It runs once per request, after the rewrite: the inputs
// of the rewrite (what producers sent, and strings that decoding freed from resource and
// scope attributes) are where unreferenced entries come from.
func Compact(pd pprofile.Profiles) CompactStats {
	var cs CompactStats
	m := mark(pd)
	if m.outOfRange {
		return cs
	}
	d := pd.Dictionary()
	if hiddenStrings(d.AttributeTable(), m.attr) {
		cs.StringsKept = true
		for i := range m.str {
			m.str[i] = true
		}
	}
	strTo, nStr := renumber(m.str)
	attrTo, nAttr := renumber(m.attr)
	mapTo, nMap := renumber(m.mapping)
	fnTo, nFn := renumber(m.fn)
	locTo, nLoc := renumber(m.loc)
	stackTo, nStack := renumber(m.stack)
	linkTo, nLink := renumber(m.link)
	cs = CompactStats{
		Strings: len(m.str) - nStr, Attributes: len(m.attr) - nAttr, Mappings: len(m.mapping) - nMap,
		Functions: len(m.fn) - nFn, Locations: len(m.loc) - nLoc, Stacks: len(m.stack) - nStack,
		Links: len(m.link) - nLink, StringsKept: cs.StringsKept,
	}
	if cs.Strings+cs.Attributes+cs.Mappings+cs.Functions+cs.Locations+cs.Stacks+cs.Links == 0 {
		return cs
	}

	if cs.Strings > 0 {
		st := d.StringTable()
		kept := make([]string, 0, nStr)
		for i := 0; i < st.Len(); i++ {
			if m.str[i] {
				kept = append(kept, st.At(i))
			}
		}
		st.FromRaw(kept)
	}
	i := 0
	d.AttributeTable().RemoveIf(func(pprofile.KeyValueAndUnit) bool { i++; return !m.attr[i-1] })
	i = 0
	d.MappingTable().RemoveIf(func(pprofile.Mapping) bool { i++; return !m.mapping[i-1] })
	i = 0
	d.FunctionTable().RemoveIf(func(pprofile.Function) bool { i++; return !m.fn[i-1] })
	i = 0
	d.LocationTable().RemoveIf(func(pprofile.Location) bool { i++; return !m.loc[i-1] })
	i = 0
	d.StackTable().RemoveIf(func(pprofile.Stack) bool { i++; return !m.stack[i-1] })
	i = 0
	d.LinkTable().RemoveIf(func(pprofile.Link) bool { i++; return !m.link[i-1] })

	at := d.AttributeTable()
	for i := 0; i < at.Len(); i++ {
		kv := at.At(i)
		kv.SetKeyStrindex(remap(strTo, kv.KeyStrindex()))
		kv.SetUnitStrindex(remap(strTo, kv.UnitStrindex()))
	}
	mt := d.MappingTable()
	for i := 0; i < mt.Len(); i++ {
		mp := mt.At(i)
		mp.SetFilenameStrindex(remap(strTo, mp.FilenameStrindex()))
		remapSlice(attrTo, mp.AttributeIndices())
	}
	ft := d.FunctionTable()
	for i := 0; i < ft.Len(); i++ {
		f := ft.At(i)
		f.SetNameStrindex(remap(strTo, f.NameStrindex()))
		f.SetSystemNameStrindex(remap(strTo, f.SystemNameStrindex()))
		f.SetFilenameStrindex(remap(strTo, f.FilenameStrindex()))
	}
	lt := d.LocationTable()
	for i := 0; i < lt.Len(); i++ {
		l := lt.At(i)
		l.SetMappingIndex(remap(mapTo, l.MappingIndex()))
		remapSlice(attrTo, l.AttributeIndices())
		lines := l.Lines()
		for j := 0; j < lines.Len(); j++ {
			lines.At(j).SetFunctionIndex(remap(fnTo, lines.At(j).FunctionIndex()))
		}
	}
	stt := d.StackTable()
	for i := 0; i < stt.Len(); i++ {
		remapSlice(locTo, stt.At(i).LocationIndices())
	}
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			ps := sps.At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				p := ps.At(k)
				for _, vt := range []pprofile.ValueType{p.SampleType(), p.PeriodType()} {
					vt.SetTypeStrindex(remap(strTo, vt.TypeStrindex()))
					vt.SetUnitStrindex(remap(strTo, vt.UnitStrindex()))
				}
				remapSlice(attrTo, p.AttributeIndices())
				ss := p.Samples()
				for n := 0; n < ss.Len(); n++ {
					s := ss.At(n)
					s.SetStackIndex(remap(stackTo, s.StackIndex()))
					s.SetLinkIndex(remap(linkTo, s.LinkIndex()))
					remapSlice(attrTo, s.AttributeIndices())
				}
			}
		}
	}
	return cs
}
