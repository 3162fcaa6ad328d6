package replica

import (
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	first, again := Name(), Name()
	if first != again {
		t.Fatalf("two names in one process: %q, %q", first, again)
	}
	host, suffix, ok := strings.Cut(Name(), "-")
	for ok && strings.Contains(suffix, "-") {
		var h string
		h, suffix, _ = strings.Cut(suffix, "-")
		host += "-" + h
	}
	if len(suffix) != 12 {
		t.Errorf("Name() = %q: want the host name and 12 hex digits", Name())
	}
	for _, tc := range []struct{ in, want string }{
		{"node-1.example.org", "node-1_example_org"},
		{"-pod-", "pod"},
		{"a/b c", "a_b_c"},
	} {
		if got := Sanitize(tc.in); got != tc.want {
			t.Errorf("Sanitize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
