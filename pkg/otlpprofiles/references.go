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
	// through the wire format resolves every reference, nested ones included. Only the string
	// table and the resource and scope attributes make the trip (copies keep references as
	// they are): the whole request would cost 35 times as much (1.3 ms against 40 µs on the
	// 500-location benchmark request, BenchmarkResolveReferences). The strings the marshaler
	// appends for plain attributes stay in the copy's table.
	attrs := pprofile.NewProfiles()
	pd.Dictionary().StringTable().CopyTo(attrs.Dictionary().StringTable())
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		rp := attrs.ResourceProfiles().AppendEmpty()
		rps.At(i).Resource().CopyTo(rp.Resource())
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			sps.At(j).Scope().CopyTo(rp.ScopeProfiles().AppendEmpty().Scope())
		}
	}
	b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(attrs)
	if err != nil {
		return fmt.Errorf("resolve attribute references: %w", err)
	}
	out, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
	if err != nil {
		return fmt.Errorf("resolve attribute references: %w", err)
	}
	if out.ResourceProfiles().Len() != rps.Len() {
		return fmt.Errorf("resolve attribute references: %d resource profiles came back of %d", out.ResourceProfiles().Len(), rps.Len())
	}
	for i := 0; i < rps.Len(); i++ {
		orp := out.ResourceProfiles().At(i)
		orp.Resource().CopyTo(rps.At(i).Resource())
		sps := rps.At(i).ScopeProfiles()
		if orp.ScopeProfiles().Len() != sps.Len() {
			return fmt.Errorf("resolve attribute references: resource_profiles[%d]: %d scope profiles came back of %d", i, orp.ScopeProfiles().Len(), sps.Len())
		}
		for j := 0; j < sps.Len(); j++ {
			orp.ScopeProfiles().At(j).Scope().CopyTo(sps.At(j).Scope())
		}
	}
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
