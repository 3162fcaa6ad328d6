package profilebuilder

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Validate checks a request the way a strict receiver would: index 0 of every dictionary
// table is the zero value, every reference is in range, every sample's values match its
// timestamps, and the timestamps lie inside the profile's time range.
func Validate(p pprofile.Profiles) error {
	d := p.Dictionary()
	st, mt, lt, ft, at, kt := d.StringTable(), d.MappingTable(), d.LocationTable(), d.FunctionTable(), d.AttributeTable(), d.StackTable()
	for name, n := range map[string]int{"string": st.Len(), "mapping": mt.Len(), "location": lt.Len(),
		"function": ft.Len(), "link": d.LinkTable().Len(), "attribute": at.Len(), "stack": kt.Len()} {
		if n == 0 {
			return fmt.Errorf("%s table is empty: index 0 must hold the zero value", name)
		}
	}
	if st.At(0) != "" {
		return errors.New("string table index 0 is not empty")
	}
	if m := mt.At(0); m.MemoryStart() != 0 || m.MemoryLimit() != 0 || m.FileOffset() != 0 || m.FilenameStrindex() != 0 || m.AttributeIndices().Len() != 0 {
		return errors.New("mapping table index 0 is not the zero mapping")
	}
	if l := lt.At(0); l.Address() != 0 || l.MappingIndex() != 0 || l.Lines().Len() != 0 || l.AttributeIndices().Len() != 0 {
		return errors.New("location table index 0 is not the zero location")
	}
	if kt.At(0).LocationIndices().Len() != 0 {
		return errors.New("stack table index 0 is not empty")
	}
	inRange := func(what string, i int32, n int) error {
		if i < 0 || int(i) >= n {
			return fmt.Errorf("%s index %d out of range [0, %d)", what, i, n)
		}
		return nil
	}
	attrs := func(what string, s interface {
		Len() int
		At(int) int32
	}) error {
		for j := 0; j < s.Len(); j++ {
			if err := inRange(what+" attribute", s.At(j), at.Len()); err != nil {
				return err
			}
		}
		return nil
	}
	for i := 1; i < at.Len(); i++ {
		if err := inRange(fmt.Sprintf("attribute %d key", i), at.At(i).KeyStrindex(), st.Len()); err != nil {
			return err
		}
	}
	for i := 1; i < ft.Len(); i++ {
		f := ft.At(i)
		for _, s := range []int32{f.NameStrindex(), f.SystemNameStrindex(), f.FilenameStrindex()} {
			if err := inRange(fmt.Sprintf("function %d string", i), s, st.Len()); err != nil {
				return err
			}
		}
	}
	for i := 1; i < mt.Len(); i++ {
		m := mt.At(i)
		if err := inRange(fmt.Sprintf("mapping %d filename", i), m.FilenameStrindex(), st.Len()); err != nil {
			return err
		}
		if m.MemoryLimit() < m.MemoryStart() {
			return fmt.Errorf("mapping %d: limit %#x below start %#x", i, m.MemoryLimit(), m.MemoryStart())
		}
		if err := attrs(fmt.Sprintf("mapping %d", i), m.AttributeIndices()); err != nil {
			return err
		}
	}
	for i := 1; i < lt.Len(); i++ {
		l := lt.At(i)
		if err := inRange(fmt.Sprintf("location %d mapping", i), l.MappingIndex(), mt.Len()); err != nil {
			return err
		}
		if mi := l.MappingIndex(); mi > 0 {
			m := mt.At(int(mi))
			if m.MemoryLimit() != 0 && (l.Address() < m.MemoryStart() || l.Address() >= m.MemoryLimit()) {
				return fmt.Errorf("location %d: address %#x outside its mapping [%#x, %#x)", i, l.Address(), m.MemoryStart(), m.MemoryLimit())
			}
		}
		for j := 0; j < l.Lines().Len(); j++ {
			if err := inRange(fmt.Sprintf("location %d line function", i), l.Lines().At(j).FunctionIndex(), ft.Len()); err != nil {
				return err
			}
		}
		if err := attrs(fmt.Sprintf("location %d", i), l.AttributeIndices()); err != nil {
			return err
		}
	}
	for i := 1; i < kt.Len(); i++ {
		li := kt.At(i).LocationIndices()
		for j := 0; j < li.Len(); j++ {
			if err := inRange(fmt.Sprintf("stack %d location", i), li.At(j), lt.Len()); err != nil {
				return err
			}
		}
	}
	rps := p.ResourceProfiles()
	for r := 0; r < rps.Len(); r++ {
		sps := rps.At(r).ScopeProfiles()
		for s := 0; s < sps.Len(); s++ {
			profs := sps.At(s).Profiles()
			for k := 0; k < profs.Len(); k++ {
				prof := profs.At(k)
				where := fmt.Sprintf("resource %d scope %d profile %d", r, s, k)
				for _, x := range []int32{prof.SampleType().TypeStrindex(), prof.SampleType().UnitStrindex(),
					prof.PeriodType().TypeStrindex(), prof.PeriodType().UnitStrindex()} {
					if err := inRange(where+" value type string", x, st.Len()); err != nil {
						return err
					}
				}
				start := uint64(prof.Time())
				end := start + prof.DurationNano()
				for j := 0; j < prof.Samples().Len(); j++ {
					smp := prof.Samples().At(j)
					if err := inRange(fmt.Sprintf("%s sample %d stack", where, j), smp.StackIndex(), kt.Len()); err != nil {
						return err
					}
					if err := attrs(fmt.Sprintf("%s sample %d", where, j), smp.AttributeIndices()); err != nil {
						return err
					}
					ts := smp.TimestampsUnixNano()
					if ts.Len() > 0 && smp.Values().Len() != 0 && smp.Values().Len() != ts.Len() {
						return fmt.Errorf("%s sample %d: %d values for %d timestamps", where, j, smp.Values().Len(), ts.Len())
					}
					for t := 0; t < ts.Len(); t++ {
						if ts.At(t) < start || ts.At(t) >= end {
							return fmt.Errorf("%s sample %d: timestamp %d outside [%d, %d)", where, j, ts.At(t), start, end)
						}
					}
				}
			}
		}
	}
	return nil
}
