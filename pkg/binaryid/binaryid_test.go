package binaryid

import (
	"os"
	"os/exec"
	"path/filepath"
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
		// What `go tool buildid` printed (go1.26.8, linux/amd64): an executable (go build),
		// one built with -trimpath, one for arm64, the go command itself, a package archive
		// (go list -export fmt).
		{"go executable", ValidGo, "R_xq7A4rr6FFFC00K88Z/N3jBBEk3KkKjQIs5el8L/sz7Et-XzzldFksYGF4ga/cXj8Ncj3MyKN901yVmOx", true},
		{"go -trimpath", ValidGo, "jLn6XlO7GhTZfNxKfi8J/EVx4Ql8Tr95EPlBbPChp/y95I_E2tuiIMpomKUa2x/ZyzGqVEJP9VJGG9bRV_C", true},
		{"go arm64", ValidGo, "C65zKBej2mdQbolibKqs/W6YkIMrx77XgLRWQAFgA/cpDQfhcUboKII78MDlcg/iaYMvMkPDImmrllV7DD9", true},
		{"go command", ValidGo, "ZjAV_SGJC4YaxbNL_-Ml/9FOayDG_oYalDt536ipy/fvTK8NKclO6lamVdkANl/bR2WdkE_tosTc8RqaLXK", true},
		{"go package archive", ValidGo, "Wr8o8Tui11nJFtYVqaau/tPe8Sv5R8f5F7l3LcDzy", true},
		// -ldflags=-buildid=hello and -buildid= print "hello" and nothing; Bazel's rules_go
		// links with -buildid=redacted. Not IDs.
		{"go custom", ValidGo, "hello", false},
		{"go empty", ValidGo, "", false},
		{"go redacted", ValidGo, "redacted", false},
		{"go 1 part of 20", ValidGo, "R_xq7A4rr6FFFC00K88Z", false},
		{"go 3 parts", ValidGo, "R_xq7A4rr6FFFC00K88Z/N3jBBEk3KkKjQIs5el8L/sz7Et-XzzldFksYGF4ga", false},
		{"go 5 parts", ValidGo, strings.Repeat("R_xq7A4rr6FFFC00K88Z/", 4) + "R_xq7A4rr6FFFC00K88Z", false},
		{"go short parts", ValidGo, "a/b", false},
		{"go part of 19 and 21", ValidGo, "R_xq7A4rr6FFFC00K88/ZN3jBBEk3KkKjQIs5el8L", false},
		{"go trailing slash", ValidGo, "Wr8o8Tui11nJFtYVqaau/tPe8Sv5R8f5F7l3LcDzy/", false},
		{"go markup", ValidGo, "<script>alert(1)</s/cript>window.x=1;//", false},
		{"go newline", ValidGo, "Wr8o8Tui11nJFtYVqaau/tPe8Sv5R8f5F7l3LcDz\n", false},
		{"go space", ValidGo, "Wr8o8Tui11nJFtYVqaau/tPe8Sv5R8f5F7l3L Dzy", false},
		{"go non-ASCII", ValidGo, "Wr8o8Tui11nJFtYVqaau/tPe8Sv5R8f5F7l3\xc3\xa9zy", false},
		{"go base64 padding", ValidGo, "Wr8o8Tui11nJFtYVqaa=/tPe8Sv5R8f5F7l3LcDzy", false},
		{"go standard base64", ValidGo, "Wr8o8Tui11nJFtYVqaa+/tPe8Sv5R8f5F7l3LcDzy", false},
		{"go too long", ValidGo, strings.Repeat("a", 257), false},
	} {
		if got := tc.fn(tc.in); got != tc.want {
			t.Errorf("%s: %q = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
}

// Every ID the go command of this machine writes is accepted, and a hand-chosen one is not:
// build a program, a -trimpath build and one with -ldflags=-buildid=..., and read each back
// with `go tool buildid`.
func TestValidGoAgainstGoToolBuildID(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go programs")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"go.mod":  "module buildidcheck\n\ngo 1.22\n",
		"main.go": "package main\n\nfunc main() { println(\"hi\") }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), goCmd, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct {
		flags []string
		want  bool
	}{
		{nil, true},
		{[]string{"-trimpath"}, true},
		{[]string{"-ldflags=-s -w"}, true},
		{[]string{"-ldflags=-buildid=plantedMessageOfTwen/plantedMessageOfTwen"}, true}, // shaped like a hash: indistinguishable
		{[]string{"-ldflags=-buildid=<b>planted</b>"}, false},
		{[]string{"-ldflags=-buildid=redacted"}, false},
	} {
		bin := filepath.Join(dir, "prog")
		run(append(append([]string{"build", "-o", bin}, tc.flags...), ".")...)
		id := run("tool", "buildid", bin)
		if got := ValidGo(id); got != tc.want {
			t.Errorf("go build %v: go tool buildid = %q, ValidGo = %v, want %v", tc.flags, id, got, tc.want)
		}
	}
	if id := run("tool", "buildid", run("list", "-export", "-f", "{{.Export}}", "fmt")); !ValidGo(id) {
		t.Errorf("package archive of fmt: go tool buildid = %q, not accepted", id)
	}
}
