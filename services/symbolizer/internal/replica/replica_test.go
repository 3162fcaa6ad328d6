package replica

import (
	"os"
	"regexp"
	"testing"
)

func TestNew(t *testing.T) {
	first, second := New(), New()
	if first == second {
		t.Fatalf("two servers named alike: %q", first)
	}
	host, _ := os.Hostname()
	want := regexp.MustCompile("^" + regexp.QuoteMeta(Sanitize(host)) + "-[0-9a-f]{12}$")
	if !want.MatchString(first) {
		t.Errorf("New() = %q: want the host name %q and 12 hex digits", first, Sanitize(host))
	}
}

func TestSanitize(t *testing.T) {
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
