package plainencoding

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// msg encodes a length-delimited field.
func msg(num protowire.Number, body []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}

func str(num protowire.Number, s string) []byte { return msg(num, []byte(s)) }

func varint(num protowire.Number, v uint64) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// resourceWithKeyRef is a ResourceProfiles whose resource has one attribute keyed by
// string_table[i] with a string value.
func resourceWithKeyRef(i uint64) []byte {
	kv := cat(varint(3, i), msg(2, str(1, "v")))
	return msg(1, msg(1, msg(1, kv)))
}

func TestPlainAttributesBadInput(t *testing.T) {
	dict := msg(2, cat(str(5, ""), str(5, "a"), str(5, "k")))
	for _, tc := range []struct {
		name, want string
		b          []byte
		keep       int
	}{
		{"two dictionaries", "2 dictionary fields", cat(resourceWithKeyRef(2), dict, dict), 2},
		{"truncated", "unexpected EOF", cat(resourceWithKeyRef(2), dict)[:10], 2},
		{"reference past the table", "string index 9 outside the string table of 3 entries", cat(resourceWithKeyRef(9), dict), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plainAttributes(tc.b, tc.keep)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPlainAttributesRewrites(t *testing.T) {
	in := cat(resourceWithKeyRef(2), resourceWithKeyRef(1), msg(2, cat(str(5, ""), str(5, "a"), str(5, "k"))))
	got, err := plainAttributes(in, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The reference to the appended "k" becomes a plain key; the one to "a" stays; "k" leaves
	// the string table.
	kvPlain := cat(str(1, "k"), msg(2, str(1, "v")))
	want := cat(msg(1, msg(1, msg(1, kvPlain))), resourceWithKeyRef(1), msg(2, cat(str(5, ""), str(5, "a"))))
	if string(got) != string(want) {
		t.Fatalf("got  %x\nwant %x", got, want)
	}
}
