package otlpprofiles

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Str returns string_table[i], or "" when i is outside the table.
func Str(d pprofile.ProfilesDictionary, i int32) string {
	st := d.StringTable()
	if i <= 0 || int(i) >= st.Len() {
		return ""
	}
	return st.At(int(i))
}

// Attr calls fn with the key and value of every attribute the indices reference; indices outside
// the attribute table are skipped.
func Attr(d pprofile.ProfilesDictionary, indices pcommon.Int32Slice, fn func(key string, kv pprofile.KeyValueAndUnit)) {
	at := d.AttributeTable()
	for i := 0; i < indices.Len(); i++ {
		ix := indices.At(i)
		if ix < 0 || int(ix) >= at.Len() {
			continue
		}
		kv := at.At(int(ix))
		fn(Str(d, kv.KeyStrindex()), kv)
	}
}

// AttrStr returns the string value of the first attribute named key, or "".
func AttrStr(d pprofile.ProfilesDictionary, indices pcommon.Int32Slice, key string) string {
	// A plain loop: this runs for every location of every request.
	at := d.AttributeTable()
	for i := 0; i < indices.Len(); i++ {
		ix := indices.At(i)
		if ix < 0 || int(ix) >= at.Len() {
			continue
		}
		kv := at.At(int(ix))
		if Str(d, kv.KeyStrindex()) == key && kv.Value().Type() == pcommon.ValueTypeStr {
			return kv.Value().Str()
		}
	}
	return ""
}

// HasAttr reports whether an attribute named key is among the indices.
func HasAttr(d pprofile.ProfilesDictionary, indices pcommon.Int32Slice, key string) bool {
	found := false
	Attr(d, indices, func(k string, _ pprofile.KeyValueAndUnit) {
		if k == key {
			found = true
		}
	})
	return found
}

// Mapping returns mapping_table[i] and whether it exists.
func Mapping(d pprofile.ProfilesDictionary, i int32) (pprofile.Mapping, bool) {
	t := d.MappingTable()
	if i < 0 || int(i) >= t.Len() {
		return pprofile.Mapping{}, false
	}
	return t.At(int(i)), true
}

// Location returns location_table[i] and whether it exists.
func Location(d pprofile.ProfilesDictionary, i int32) (pprofile.Location, bool) {
	t := d.LocationTable()
	if i < 0 || int(i) >= t.Len() {
		return pprofile.Location{}, false
	}
	return t.At(int(i)), true
}

// Function returns function_table[i] and whether it exists.
func Function(d pprofile.ProfilesDictionary, i int32) (pprofile.Function, bool) {
	t := d.FunctionTable()
	if i < 0 || int(i) >= t.Len() {
		return pprofile.Function{}, false
	}
	return t.At(int(i)), true
}

// Stack returns the location indices of stack_table[i]; nil when it does not exist.
func Stack(d pprofile.ProfilesDictionary, i int32) []int32 {
	t := d.StackTable()
	if i < 0 || int(i) >= t.Len() {
		return nil
	}
	return t.At(int(i)).LocationIndices().AsRaw()
}
