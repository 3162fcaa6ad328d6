package binaryid

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(string) bool
		in   string
		want bool
	}{
		{"hex", ValidHex, "00ff", true},
		{"hex odd", ValidHex, "a", false},
		{"hex upper", ValidHex, "AB", false},
		{"hex not hex", ValidHex, "0g", false},
		{"gnu sha1", ValidGNU, "93ac61ec5a8eb1396f9fbd350e3169a558528a40", true},
		{"gnu upper case", ValidGNU, "93AC61EC", false},
		{"gnu odd length", ValidGNU, "abc", false},
		{"gnu empty", ValidGNU, "", false},
		{"gnu too long", ValidGNU, strings.Repeat("ab", MaxGNUDigits/2+1), false},
		{"htlhash", ValidHTLHash, "8c4fd857b9bbbb4e6559cad46d7c8fad", true},
		{"htlhash short", ValidHTLHash, "8c4fd857", false},
		{"go 4 parts", ValidGo, "Gd4_Z8E4H1Ch5DDY6VBG/aqxs3gn_EI7_1r-M4bKL/n0SXzy0n4qILwgfHGC8J/JoqUqoQ0K9qDoVqdB0Sk", true},
		{"go 2 parts", ValidGo, "a/b", true},
		{"go 1 part", ValidGo, "abc", true},
		{"go 5 parts", ValidGo, "a/b/c/d/e", false},
		{"go empty part", ValidGo, "a//b", false},
		{"go leading slash", ValidGo, "/a", false},
		{"go trailing slash", ValidGo, "a/", false},
		{"go markup", ValidGo, "<script>", false},
		{"go newline", ValidGo, "a/b\n", false},
		{"go space", ValidGo, "a b", false},
		{"go part too long", ValidGo, strings.Repeat("a", 65), false},
		{"go too long", ValidGo, strings.Repeat("a", 257), false},
	} {
		if got := tc.fn(tc.in); got != tc.want {
			t.Errorf("%s: %q = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
}
