package plainencoding

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"google.golang.org/protobuf/encoding/protowire"
)

// Marshal encodes pd as an OTLP ExportProfilesServiceRequest (the same bytes as a
// ProfilesData) whose string table holds only what the dictionary and the profiles reference.
//
// pdata's marshaler writes every resource and scope attribute as a key_strindex /
// string_value_strindex reference, appending the strings it does not find to the string
// table. Those entries are referenced by nothing but resource and scope attributes, which the
// Profiling SIG's profcheck -check-orphans does not count: an input whose attributes came
// plain fails the check once it has passed through pdata. So the attributes that reference
// an appended entry get their string back in place, and the appended entries are dropped;
// references to strings the dictionary already had stay references. Both forms are valid
// OTLP, and receivers (pdata's among them) accept both.
func Marshal(pd pprofile.Profiles) ([]byte, error) {
	if !pd.IsReadOnly() {
		// The marshaler rewrites a mutable request's attributes in place; the caller's
		// request must come out as it went in.
		cp := pprofile.NewProfiles()
		pd.CopyTo(cp)
		pd = cp
	}
	keep := max(pd.Dictionary().StringTable().Len(), 1)
	b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		return nil, fmt.Errorf("marshal profiles: %w", err)
	}
	out, err := plainAttributes(b, keep)
	if err != nil {
		return nil, fmt.Errorf("marshal profiles: resource and scope attributes: %w", err)
	}
	return out, nil
}

// The OTLP messages plainAttributes walks (opentelemetry-proto, profiles/v1development and
// common/v1), and the fields that lead from one to the next.
type kind int

const (
	request kind = iota
	resourceProfiles
	resource
	scopeProfiles
	scope
	keyValue
	anyValue
	arrayValue
	kvlistValue
)

var children = map[kind]map[protowire.Number]kind{
	request:          {1: resourceProfiles},
	resourceProfiles: {1: resource, 2: scopeProfiles},
	resource:         {1: keyValue}, // attributes
	scopeProfiles:    {1: scope},    // scope
	scope:            {3: keyValue}, // attributes
	keyValue:         {2: anyValue}, // value
	anyValue:         {5: arrayValue, 6: kvlistValue},
	arrayValue:       {1: anyValue}, // values
	kvlistValue:      {1: keyValue}, // values
}

// stringRefs names, per message, the varint field that references the string table and the
// string field that says the same in place: KeyValue.key_strindex / key and
// AnyValue.string_value_strindex / string_value.
var stringRefs = map[kind][2]protowire.Number{
	keyValue: {3, 1},
	anyValue: {8, 1},
}

const (
	requestDictionary = 2
	dictStringTable   = 5
)

// plainAttributes rewrites an encoded request so that no resource or scope attribute
// references a string-table entry at index keep or later, and drops those entries.
func plainAttributes(b []byte, keep int) ([]byte, error) {
	var dict []byte
	dicts := 0
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == requestDictionary && typ == protowire.BytesType {
			dict = v
			dicts++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if dicts > 1 {
		// Parsers merge them; pdata writes one, and one is all this code rewrites.
		return nil, fmt.Errorf("%d dictionary fields", dicts)
	}
	// Only the appended entries are copied out, and the dictionary is copied around them in
	// a few runs: its other strings and tables can be many.
	var appended []string
	var drops [][2]int
	n := 0
	for off := 0; off < len(dict); {
		num, typ, tagLen := protowire.ConsumeTag(dict[off:])
		if tagLen < 0 {
			return nil, protowire.ParseError(tagLen)
		}
		valLen := protowire.ConsumeFieldValue(num, typ, dict[off+tagLen:])
		if valLen < 0 {
			return nil, protowire.ParseError(valLen)
		}
		end := off + tagLen + valLen
		if num == dictStringTable && typ == protowire.BytesType {
			if n >= keep {
				v, _ := protowire.ConsumeBytes(dict[off+tagLen : end])
				appended = append(appended, string(v))
				if k := len(drops) - 1; k >= 0 && drops[k][1] == off {
					drops[k][1] = end
				} else {
					drops = append(drops, [2]int{off, end})
				}
			}
			n++
		}
		off = end
	}
	if len(appended) == 0 {
		return b, nil
	}
	newDict := make([]byte, 0, len(dict))
	prev := 0
	for _, d := range drops {
		newDict = append(newDict, dict[prev:d[0]]...)
		prev = d[1]
	}
	newDict = append(newDict, dict[prev:]...)
	w := &wireRewriter{appended: appended, keep: keep, dict: newDict}
	return w.rewrite(b, request)
}

// eachField calls fn with every field of message b.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		v := b[:n]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

type wireRewriter struct {
	// appended holds the string-table entries from index keep on.
	appended []string
	keep     int
	// dict is the request's dictionary without those entries.
	dict []byte
}

// rewrite copies message b of kind k field by field, descending into the messages that can
// hold attributes, putting strings in place of references to entries from keep on, and
// writing w.dict for the dictionary. Every other field is copied byte for byte.
func (w *wireRewriter) rewrite(b []byte, k kind) ([]byte, error) {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		num, typ, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return nil, protowire.ParseError(tagLen)
		}
		n := protowire.ConsumeFieldValue(num, typ, b[tagLen:])
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		field := b[:tagLen+n]
		b = b[tagLen+n:]
		switch {
		case k == request && num == requestDictionary && typ == protowire.BytesType:
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendBytes(out, w.dict)
			continue
		case typ == protowire.BytesType && children[k][num] != request:
			// request is no one's child: any other kind found leads to attributes or to the
			// string table.
			v, _ := protowire.ConsumeBytes(field[tagLen:])
			m, err := w.rewrite(v, children[k][num])
			if err != nil {
				return nil, err
			}
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendBytes(out, m)
			continue
		case typ == protowire.VarintType && stringRefs[k][0] == num:
			v, _ := protowire.ConsumeVarint(field[tagLen:])
			if int64(v) >= int64(w.keep) {
				i := int64(v) - int64(w.keep)
				if i >= int64(len(w.appended)) {
					return nil, fmt.Errorf("string index %d outside the string table of %d entries", v, w.keep+len(w.appended))
				}
				out = protowire.AppendTag(out, stringRefs[k][1], protowire.BytesType)
				out = protowire.AppendString(out, w.appended[i])
				continue
			}
		}
		out = append(out, field...)
	}
	return out, nil
}
