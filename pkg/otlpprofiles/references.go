package otlpprofiles

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// ResolveReferences turns resource and scope attributes that arrived as string-table
// references (key_strindex, string_value_strindex) into plain attributes, as pdata's
// ProtoUnmarshaler gives them. pdata's OTLP/gRPC server at the Collector line profsym builds on
// (pprofile v0.162.0) leaves them as references, which the pdata API shows as attributes with
// an empty key and no value, and which point at string-table indices that compaction
// renumbers: they must be plain before the dictionary is rewritten. pd must be mutable.
// Requests whose attributes are plain, the usual case, are not touched. An error names a
// reference outside the string table.
func ResolveReferences(pd pprofile.Profiles) error {
	if !unresolved(pd) {
		return nil
	}
	// pdata exposes its reference resolution only through its unmarshalers: a round trip
	// through the wire format resolves every reference, nested ones included. The marshaler
	// appends the strings of plain attributes to the string table; once every attribute is
	// plain again nothing references them, so the table is cut back to what it was.
	keep := pd.Dictionary().StringTable().Len()
	b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		return fmt.Errorf("resolve attribute references: %w", err)
	}
	out, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
	if err != nil {
		return fmt.Errorf("resolve attribute references: %w", err)
	}
	out.MoveTo(pd)
	if st := pd.Dictionary().StringTable(); st.Len() > keep {
		st.FromRaw(st.AsRaw()[:keep])
	}
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		if emptyKey(rps.At(i).Resource().Attributes()) {
			return fmt.Errorf("resource_profiles[%d].resource.attributes: key_strindex outside string_table", i)
		}
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			if emptyKey(sps.At(j).Scope().Attributes()) {
				return fmt.Errorf("resource_profiles[%d].scope_profiles[%d].scope.attributes: key_strindex outside string_table", i, j)
			}
		}
	}
	return nil
}

// errFound stops a walk early.
var errFound = errors.New("found")

// unresolved reports whether some resource or scope attribute looks like a reference: an
// empty key, or a value of no type (what a string_value_strindex reads as).
func unresolved(pd pprofile.Profiles) bool {
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		if walk(rps.At(i).Resource().Attributes()) != nil {
			return true
		}
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			if walk(sps.At(j).Scope().Attributes()) != nil {
				return true
			}
		}
	}
	return false
}

func walk(m pcommon.Map) error {
	for k, v := range m.All() {
		if k == "" {
			return errFound
		}
		if err := walkValue(v); err != nil {
			return err
		}
	}
	return nil
}

func walkValue(v pcommon.Value) error {
	switch v.Type() {
	case pcommon.ValueTypeEmpty:
		return errFound
	case pcommon.ValueTypeMap:
		return walk(v.Map())
	case pcommon.ValueTypeSlice:
		s := v.Slice()
		for i := 0; i < s.Len(); i++ {
			if err := walkValue(s.At(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func emptyKey(m pcommon.Map) bool {
	for k := range m.All() {
		if k == "" {
			return true
		}
	}
	return false
}
