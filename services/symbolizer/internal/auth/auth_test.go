package auth

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(file, []byte("# ci\nalpha\n\n  beta  \n"), 0o600)
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
		if err := tok.Check(tc.header); !errors.Is(err, tc.want) && !(err == nil && tc.want == nil) {
			t.Errorf("Check(%q) = %v, want %v", tc.header, err, tc.want)
		}
	}
	os.WriteFile(file, []byte("delta\n"), 0o600)
	if err := tok.Reload(); err != nil {
		t.Fatal(err)
	}
	if tok.Check("Bearer alpha") == nil || tok.Check("Bearer delta") != nil {
		t.Fatal("reload did not replace the tokens")
	}
	os.Remove(file)
	if err := tok.Reload(); err == nil {
		t.Fatal("reload of a missing file succeeded")
	}
	if tok.Check("Bearer delta") != nil {
		t.Fatal("a failed reload dropped the tokens")
	}
}
