package tenant

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/profsym/profsym/services/symbolizer/internal/auth"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

func TestKey(t *testing.T) {
	if got := Key("", "records/gnu/ab/record.json"); got != "records/gnu/ab/record.json" {
		t.Errorf("default tenant's key = %q", got)
	}
	if got := Key("team-a", "psym:v3:ab@t:1"); got != "tenants/team-a/psym:v3:ab@t:1" {
		t.Errorf("tenant's key = %q", got)
	}
	for _, bad := range []string{"", "default", "Team", "-a", "a/b", "a.b", strings.Repeat("a", 64)} {
		if Valid(bad) == nil {
			t.Errorf("Valid(%q) = nil", bad)
		}
	}
	if err := Valid("team-a1"); err != nil {
		t.Error(err)
	}
}

// A tenant's view of a real folder store reads, writes and lists its own keys only.
func TestStoreView(t *testing.T) {
	ctx := context.Background()
	root, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b := Store(root, "a"), Store(root, "b")
	if Store(root, "") != root {
		t.Error("the default tenant's view is not the store itself")
	}
	put := func(s store.Store, key, v string) {
		t.Helper()
		if err := s.Put(ctx, key, strings.NewReader(v), int64(len(v))); err != nil {
			t.Fatal(err)
		}
	}
	put(a, "records/x/record.json", "A")
	put(b, "records/y/record.json", "B")
	put(root, "records/z/record.json", "D")
	if keys, err := a.List(ctx, "records/"); err != nil || !slices.Equal(keys, []string{"records/x/record.json"}) {
		t.Errorf("a lists %v, %v", keys, err)
	}
	if keys, err := root.List(ctx, "records/"); err != nil || !slices.Equal(keys, []string{"records/z/record.json"}) {
		t.Errorf("the default tenant lists %v, %v", keys, err)
	}
	if _, err := b.Size(ctx, "records/x/record.json"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("b sees a's object: %v", err)
	}
	if _, err := root.Size(ctx, "tenants/a/records/x/record.json"); err != nil {
		t.Errorf("a's object is not under tenants/a/: %v", err)
	}
	if err := a.Copy(ctx, "records/x/record.json", "records/x2/record.json"); err != nil {
		t.Fatal(err)
	}
	p, err := a.(store.Localer).LocalPath("records/x2/record.json")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "A" {
		t.Errorf("local path of a's copy: %q, %v", got, err)
	}
	if err := b.Delete(ctx, "records/x/record.json"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Size(ctx, "records/x/record.json"); err != nil {
		t.Errorf("b's delete removed a's object: %v", err)
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tenants")
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestTokensFile(t *testing.T) {
	for body, want := range map[string]string{
		"a\n":                     "line 1: want TENANT upload|read TOKEN",
		"A upload x\n":            `line 1: tenant "A": only a-z`,
		"a write x\n":             `line 1: role "write"`,
		"a upload x\nb read x\n":  "line 2: this token is already given to tenant a",
		"a quota bytes=lots\n":    `line 1: quota "bytes=lots": want a whole number`,
		"a quota files=3\n":       `line 1: quota "files=3": want bytes=N or uploads-per-day=M`,
		"# c\n\na upload x y\n":   "line 3: want TENANT upload TOKEN",
		"default upload secret\n": "reserved for the default tenant",
	} {
		_, err := LoadTokens(writeFile(t, body), Quota{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
	f := writeFile(t, "a upload au\na read ar\nb upload bu\nb quota bytes=100\n")
	tok, err := LoadTokens(f, Quota{UploadsPerDay: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tok.Names(), []string{"a", "b"}) || tok.Quota("a") != (Quota{UploadsPerDay: 5}) || tok.Quota("b") != (Quota{Bytes: 100, UploadsPerDay: 5}) {
		t.Errorf("names %v, quotas %v %v", tok.Names(), tok.Quota("a"), tok.Quota("b"))
	}
	// A broken file leaves the tokens in force.
	if err := os.WriteFile(f, []byte("a upload\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok.Reload() == nil || !tok.Known("b") {
		t.Error("a broken reload replaced the tokens")
	}

	writers, err := auth.New("", []string{"op"})
	if err != nil {
		t.Fatal(err)
	}
	readers, err := auth.New("", []string{"op", "op-read"})
	if err != nil {
		t.Fatal(err)
	}
	a := &Access{Tenants: tok, Writers: writers, Readers: readers}
	h := func(token, tenant string) http.Header {
		hd := http.Header{}
		if token != "" {
			hd.Set("Authorization", "Bearer "+token)
		}
		if tenant != "" {
			hd.Set(Header, tenant)
		}
		return hd
	}
	for _, c := range []struct {
		token, named string
		write        bool
		want         string
		err          error
	}{
		{"au", "", true, "a", nil},
		{"ar", "", false, "a", nil},
		{"ar", "", true, "", ErrReadOnly},
		{"au", "a", true, "a", nil},
		{"au", "b", false, "", ErrOtherTenant},
		{"op", "", true, "", nil},
		{"op", "b", true, "b", nil},
		{"op-read", "b", false, "b", nil},
		{"op-read", "b", true, "", auth.ErrRejected},
		{"op", "c", false, "", ErrUnknown},
		{"op", "../x", false, "", ErrUnknown},
		{"", "", false, "", auth.ErrMissing},
		{"", "a", false, "", auth.ErrMissing},
		{"nope", "", false, "", auth.ErrRejected},
	} {
		got, err := a.Resolve(h(c.token, c.named), c.write)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("token %q naming %q (write %v): %q, %v; want %q, %v", c.token, c.named, c.write, got, err, c.want, c.err)
		}
	}
}

// The limiter counts from the store, adds what it admitted, and starts a new count each UTC
// day.
func TestLimiter(t *testing.T) {
	now := time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)
	tallies := 0
	stored := uint64(0)
	l := &Limiter{Tenant: "a", Quota: func() Quota { return Quota{Bytes: 1000, UploadsPerDay: 2} }, Now: func() time.Time { return now }, MaxAge: time.Hour,
		Tally: func(ctx context.Context, since time.Time) (uint64, int, error) {
			tallies++
			if !since.Equal(time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)) {
				t.Errorf("tally since %v at %v", since, now)
			}
			return stored, 0, nil
		}}
	ctx := context.Background()
	if err := l.Admit(ctx, 400); err != nil {
		t.Fatal(err)
	}
	if err := l.Admit(ctx, 700); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "400 bytes stored and 700 more would pass its 1000 bytes") {
		t.Fatalf("over the bytes: %v", err)
	}
	if err := l.Admit(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if err := l.Admit(ctx, 1); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "2 uploads started today (UTC) of 2 a day") {
		t.Fatalf("over the uploads: %v", err)
	}
	now = now.Add(2 * time.Minute) // the next day
	stored = 500
	if err := l.Admit(ctx, 500); err != nil {
		t.Fatal(err)
	}
	if err := l.Admit(ctx, 1); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "1000 bytes stored") {
		t.Fatalf("after the day turned: %v", err)
	}
	if tallies != 2 {
		t.Errorf("%d tallies, want 2 (one a day within MaxAge)", tallies)
	}
}
