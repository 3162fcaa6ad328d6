package otlpprofiles

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Validate returns nil when every index in pd lands inside its table, or an error naming the
// first one that does not (for example
// "dictionary.location_table[3].mapping_index: 9 outside mapping_table of 4 entries").
//
// Index 0 is accepted on an empty table: OTLP defines it as the zero value and producers
// often leave unused tables empty.
func Validate(pd pprofile.Profiles) error { return validate(pd, false) }

func validate(pd pprofile.Profiles, strict bool) error {
	d := pd.Dictionary()
	v := checker{
		strict:    strict,
		strings:   d.StringTable().Len(),
		attrs:     d.AttributeTable().Len(),
		mappings:  d.MappingTable().Len(),
		locations: d.LocationTable().Len(),
		functions: d.FunctionTable().Len(),
		links:     d.LinkTable().Len(),
		stacks:    d.StackTable().Len(),
	}
	if err := v.dictionary(d); err != nil {
		return err
	}
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			ps := sps.At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				where := pos("resource_profiles[%d].scope_profiles[%d].profiles[%d]", i, j, k)
				if err := v.profile(where, ps.At(k)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

type checker struct {
	strict                                                        bool // ValidateStrict's checks too
	strings, attrs, mappings, locations, functions, links, stacks int
}

// loc names a position in the request; it is only formatted when there is an error to report,
// so valid requests pay neither formatting nor allocation (no interface boxing until then).
type loc struct {
	format  string
	a, b, c int
	n       int // how many of a, b, c the format uses
	parent  *loc
}

func pos(format string, args ...int) loc {
	l := loc{format: format, n: len(args)}
	if len(args) > 0 {
		l.a = args[0]
	}
	if len(args) > 1 {
		l.b = args[1]
	}
	if len(args) > 2 {
		l.c = args[2]
	}
	return l
}

func sub(parent *loc, format string, args ...int) loc {
	l := pos(format, args...)
	l.parent = parent
	return l
}

func (l loc) String() string {
	args := []any{l.a, l.b, l.c}[:l.n]
	s := fmt.Sprintf(l.format, args...)
	if l.parent != nil {
		return l.parent.String() + s
	}
	return s
}

func check(where loc, field string, idx int32, table string, n int) error {
	if idx == 0 || (idx > 0 && int(idx) < n) {
		return nil
	}
	return fmt.Errorf("%s.%s: %d outside %s of %d entries", where, field, idx, table, n)
}

func checkAt(where loc, field string, j int, idx int32, table string, n int) error {
	if idx == 0 || (idx > 0 && int(idx) < n) {
		return nil
	}
	return fmt.Errorf("%s.%s[%d]: %d outside %s of %d entries", where, field, j, idx, table, n)
}

func (v *checker) attrIndices(where loc, s pcommon.Int32Slice) error {
	for i := 0; i < s.Len(); i++ {
		if err := checkAt(where, "attribute_indices", i, s.At(i), "attribute_table", v.attrs); err != nil {
			return err
		}
	}
	return nil
}

func (v *checker) dictionary(d pprofile.ProfilesDictionary) error {
	at := d.AttributeTable()
	for i := 0; i < at.Len(); i++ {
		where := pos("dictionary.attribute_table[%d]", i)
		kv := at.At(i)
		if err := check(where, "key_strindex", kv.KeyStrindex(), "string_table", v.strings); err != nil {
			return err
		}
		if err := check(where, "unit_strindex", kv.UnitStrindex(), "string_table", v.strings); err != nil {
			return err
		}
	}
	mt := d.MappingTable()
	for i := 0; i < mt.Len(); i++ {
		where := pos("dictionary.mapping_table[%d]", i)
		m := mt.At(i)
		if err := check(where, "filename_strindex", m.FilenameStrindex(), "string_table", v.strings); err != nil {
			return err
		}
		if err := v.attrIndices(where, m.AttributeIndices()); err != nil {
			return err
		}
		if v.strict && m.MemoryLimit() < m.MemoryStart() {
			return fmt.Errorf("%s: memory_limit %#x below memory_start %#x", where, m.MemoryLimit(), m.MemoryStart())
		}
	}
	ft := d.FunctionTable()
	for i := 0; i < ft.Len(); i++ {
		where := pos("dictionary.function_table[%d]", i)
		f := ft.At(i)
		for _, c := range []struct {
			field string
			idx   int32
		}{{"name_strindex", f.NameStrindex()}, {"system_name_strindex", f.SystemNameStrindex()}, {"filename_strindex", f.FilenameStrindex()}} {
			if err := check(where, c.field, c.idx, "string_table", v.strings); err != nil {
				return err
			}
		}
	}
	lt := d.LocationTable()
	for i := 0; i < lt.Len(); i++ {
		where := pos("dictionary.location_table[%d]", i)
		l := lt.At(i)
		if err := check(where, "mapping_index", l.MappingIndex(), "mapping_table", v.mappings); err != nil {
			return err
		}
		if err := v.attrIndices(where, l.AttributeIndices()); err != nil {
			return err
		}
		if mi := l.MappingIndex(); v.strict && mi > 0 {
			m := mt.At(int(mi))
			if m.MemoryLimit() != 0 && (l.Address() < m.MemoryStart() || l.Address() >= m.MemoryLimit()) {
				return fmt.Errorf("%s: address %#x outside its mapping [%#x, %#x)", where, l.Address(), m.MemoryStart(), m.MemoryLimit())
			}
		}
		lines := l.Lines()
		for j := 0; j < lines.Len(); j++ {
			fi := lines.At(j).FunctionIndex()
			if fi == 0 || (fi > 0 && int(fi) < v.functions) {
				continue
			}
			// Only a failing location takes where's address: taking it on every location
			// would move every location's where to the heap.
			w := where
			return check(sub(&w, ".lines[%d]", j), "function_index", fi, "function_table", v.functions)
		}
	}
	st := d.StackTable()
	for i := 0; i < st.Len(); i++ {
		where := pos("dictionary.stack_table[%d]", i)
		li := st.At(i).LocationIndices()
		for j := 0; j < li.Len(); j++ {
			if err := checkAt(where, "location_indices", j, li.At(j), "location_table", v.locations); err != nil {
				return err
			}
		}
	}
	return nil
}

func (v *checker) valueType(where loc, vt pprofile.ValueType) error {
	if err := check(where, "type_strindex", vt.TypeStrindex(), "string_table", v.strings); err != nil {
		return err
	}
	return check(where, "unit_strindex", vt.UnitStrindex(), "string_table", v.strings)
}

func (v *checker) profile(where loc, p pprofile.Profile) error {
	if err := v.valueType(sub(&where, ".sample_type"), p.SampleType()); err != nil {
		return err
	}
	if err := v.valueType(sub(&where, ".period_type"), p.PeriodType()); err != nil {
		return err
	}
	if err := v.attrIndices(where, p.AttributeIndices()); err != nil {
		return err
	}
	ss := p.Samples()
	for i := 0; i < ss.Len(); i++ {
		sw := sub(&where, ".samples[%d]", i)
		s := ss.At(i)
		if err := check(sw, "stack_index", s.StackIndex(), "stack_table", v.stacks); err != nil {
			return err
		}
		if err := check(sw, "link_index", s.LinkIndex(), "link_table", v.links); err != nil {
			return err
		}
		if err := v.attrIndices(sw, s.AttributeIndices()); err != nil {
			return err
		}
		if v.strict {
			if err := sampleTimes(sw, s, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// ValidateStrict is Validate plus what a strict receiver also asks of a producer, and what
// the node collector promises for its own output: index 0 of every dictionary table holds
// the zero value (so no table is empty), every mapping's limit is at or above its start,
// every location's address lies inside its mapping, every sample has as many values as
// timestamps, and the timestamps lie inside the profile's time range. Untrusted input is
// checked with Validate: producers may leave unused tables empty.
func ValidateStrict(pd pprofile.Profiles) error {
	if err := zeroEntries(pd.Dictionary()); err != nil {
		return err
	}
	return validate(pd, true)
}

// zeroEntries checks that index 0 of every table exists and holds the zero value.
func zeroEntries(d pprofile.ProfilesDictionary) error {
	for _, t := range []struct {
		name string
		n    int
	}{{"string_table", d.StringTable().Len()}, {"mapping_table", d.MappingTable().Len()}, {"location_table", d.LocationTable().Len()},
		{"function_table", d.FunctionTable().Len()}, {"link_table", d.LinkTable().Len()}, {"attribute_table", d.AttributeTable().Len()},
		{"stack_table", d.StackTable().Len()}} {
		if t.n == 0 {
			return fmt.Errorf("dictionary.%s is empty: index 0 must hold the zero value", t.name)
		}
	}
	if d.StringTable().At(0) != "" {
		return errors.New("dictionary.string_table[0] is not empty")
	}
	if m := d.MappingTable().At(0); m.MemoryStart() != 0 || m.MemoryLimit() != 0 || m.FileOffset() != 0 || m.FilenameStrindex() != 0 || m.AttributeIndices().Len() != 0 {
		return errors.New("dictionary.mapping_table[0] is not the zero mapping")
	}
	if l := d.LocationTable().At(0); l.Address() != 0 || l.MappingIndex() != 0 || l.Lines().Len() != 0 || l.AttributeIndices().Len() != 0 {
		return errors.New("dictionary.location_table[0] is not the zero location")
	}
	if d.StackTable().At(0).LocationIndices().Len() != 0 {
		return errors.New("dictionary.stack_table[0] is not empty")
	}
	return nil
}

// sampleTimes checks that sample s of p has a value per timestamp and timestamps inside p's
// time range.
func sampleTimes(where loc, s pprofile.Sample, p pprofile.Profile) error {
	ts := s.TimestampsUnixNano()
	if ts.Len() > 0 && s.Values().Len() != 0 && s.Values().Len() != ts.Len() {
		return fmt.Errorf("%s: %d values for %d timestamps", where, s.Values().Len(), ts.Len())
	}
	start := uint64(p.Time())
	end := start + p.DurationNano()
	for t := 0; t < ts.Len(); t++ {
		if ts.At(t) < start || ts.At(t) >= end {
			return fmt.Errorf("%s: timestamp %d outside [%d, %d)", where, ts.At(t), start, end)
		}
	}
	return nil
}
