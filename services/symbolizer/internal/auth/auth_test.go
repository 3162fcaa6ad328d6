package auth

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# ci\nalpha\n\n  beta  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := New(file, []string{"gamma"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		header string
		want   error
	}{
		{"Bearer alpha", nil},
		{"Bearer beta", nil},
		{"Bearer gamma", nil},
		{"Bearer delta", ErrRejected},
		{"", ErrMissing},
		{"Basic alpha", ErrMissing},
		{"Bearer ", ErrMissing},
		{"Bearer # ci", ErrRejected},
	} {
		// errors.Is(nil, nil) holds, so this covers the accepted tokens too.
		if err := tok.Check(tc.header); !errors.Is(err, tc.want) {
			t.Errorf("Check(%q) = %v, want %v", tc.header, err, tc.want)
		}
	}
	if err := os.WriteFile(file, []byte("delta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tok.Reload(); err != nil {
		t.Fatal(err)
	}
	if tok.Check("Bearer alpha") == nil || tok.Check("Bearer delta") != nil {
		t.Fatal("reload did not replace the tokens")
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := tok.Reload(); err == nil {
		t.Fatal("reload of a missing file succeeded")
	}
	if tok.Check("Bearer delta") != nil {
		t.Fatal("a failed reload dropped the tokens")
	}
}
