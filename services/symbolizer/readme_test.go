package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/testsupport"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := testsupport.RemoveFixtures(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// The values the README's examples show, replaced by the test's own.
const (
	exampleServer  = "http://127.0.0.1:7070"
	exampleBuildID = "5d2c8e1f0a9b8c7d6e5f40312a1b0c9d8e7f6a5b"
	exampleVaddr   = `"4512"`
	exampleStart   = "MemoryStart: 0x555555555000"
	exampleLimit   = "MemoryLimit: 0x555555556000"
	exampleOffset  = "FileOffset:  0x1000"
	exampleAddress = "[]uint64{0x5555555551a0}"
)

// snippets returns the README's fenced blocks that follow a `<!-- tested: NAME -->` line, by
// name.
func snippets(t *testing.T, readme string) map[string]string {
	t.Helper()
	out := map[string]string{}
	marker := regexp.MustCompile(`^<!-- tested: ([a-z-]+) -->$`)
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("README line %d: %q is not followed by a fenced block", i+1, lines[i])
		}
		var body []string
		j := i + 2
		for ; j < len(lines) && lines[j] != "```"; j++ {
			body = append(body, lines[j])
		}
		if j == len(lines) {
			t.Fatalf("README line %d: the block of %q never ends", i+2, m[1])
		}
		if _, dup := out[m[1]]; dup {
			t.Fatalf("README: two blocks tested as %q", m[1])
		}
		out[m[1]] = strings.Join(body, "\n") + "\n"
		i = j
	}
	return out
}

// apiProgram has one function that is not inlined, to ask about.
const apiProgram = `#include <stdio.h>

__attribute__((noinline)) unsigned parse_record(const char *s) {
	unsigned h = 0;
	while (*s)
		h = h * 31 + (unsigned char)*s++;
	return h;
}

int main(int argc, char **argv) {
	printf("%u\n", parse_record(argc > 1 ? argv[1] : "record"));
	return 0;
}
`

// TestReadmeSnippets runs the README's examples of the Symbolize API (curl, buf curl, a Go
// program) exactly as written, against a real symbolizer whose store holds a test binary
// (uploaded with the real client, reads guarded by a token), with the server's address, the
// binary's build ID and addresses in place of the examples'. Each must print the function and
// file:line that llvm-symbolizer gives for that address.
func TestReadmeSnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a symbolizer")
	}
	testsupport.RequireTools(t, "gcc", "llvm-symbolizer", "curl", "jq", "bash")
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := snippets(t, string(readme))
	for _, name := range []string{"curl", "buf-curl", "go"} {
		if blocks[name] == "" {
			t.Fatalf("README has no block tested as %q", name)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}

	bin := testsupport.CompileC(t, apiProgram, "-O2", "-g", "-Wl,--build-id")
	ids, err := buildid.FromFile(bin)
	if err != nil || ids.GNU == "" {
		t.Fatalf("build ID: %v %+v", err, ids)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	var vaddr uint64
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == "parse_record" {
			vaddr = s.Value + 4
		}
	}
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	f.Close()
	if vaddr == 0 || text == nil {
		t.Fatal("no parse_record or no executable segment")
	}
	const bias, page = 0x555555554000, 0x1000
	start := bias + text.Vaddr&^(page-1)
	limit := bias + (text.Vaddr+text.Memsz+page-1)&^(page-1)
	offset := text.Off &^ (page - 1)

	out, err := exec.CommandContext(t.Context(), "llvm-symbolizer", "--obj="+bin, fmt.Sprintf("%#x", vaddr)).Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	var fn, loc string
	if sc.Scan() {
		fn = sc.Text()
	}
	if sc.Scan() {
		loc = sc.Text()
	}
	parts := strings.Split(loc, ":")
	if fn != "parse_record" || len(parts) < 3 {
		t.Fatalf("llvm-symbolizer says %q", out)
	}
	want := fmt.Sprintf("parse_record %s:%s", strings.Join(parts[:len(parts)-2], ":"), parts[len(parts)-2])

	s := testsupport.StartSymbolizer(t, "", "--require-read-token")
	s.Upload(t, bin)
	fill := strings.NewReplacer(
		exampleServer, s.URL(),
		exampleBuildID, ids.GNU,
		exampleVaddr, strconv.Quote(strconv.FormatUint(vaddr, 10)),
		exampleStart, fmt.Sprintf("MemoryStart: %#x", start),
		exampleLimit, fmt.Sprintf("MemoryLimit: %#x", limit),
		exampleOffset, fmt.Sprintf("FileOffset:  %#x", offset),
		exampleAddress, fmt.Sprintf("[]uint64{%#x}", bias+vaddr),
	)
	env := append(os.Environ(), "SYMBOLIZER_TOKEN="+s.Token, "GOWORK=off")

	for _, name := range []string{"curl", "buf-curl", "go"} {
		t.Run(name, func(t *testing.T) {
			code := fill.Replace(blocks[name])
			if code == blocks[name] {
				t.Fatal("none of the example's values was replaced: the README and the test disagree on them")
			}
			var cmd *exec.Cmd
			if name == "go" {
				dir := t.TempDir()
				gomod := fmt.Sprintf("module example.com/symbolize\n\ngo 1.26\n\nrequire github.com/profsym/profsym v0.0.0\n\nreplace github.com/profsym/profsym => %s\n", root)
				for file, body := range map[string]string{"go.mod": gomod, "main.go": code} {
					if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				tidy := exec.CommandContext(t.Context(), "go", "mod", "tidy")
				tidy.Dir, tidy.Env = dir, env
				if b, err := tidy.CombinedOutput(); err != nil {
					t.Fatalf("go mod tidy: %v\n%s", err, b)
				}
				cmd = exec.CommandContext(t.Context(), "go", "run", ".")
				cmd.Dir = dir
			} else {
				cmd = exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", code)
				cmd.Dir = root
			}
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			got, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s\nsnippet:\n%s", err, got, stderr.String(), code)
			}
			if !strings.Contains(string(got), want) {
				t.Errorf("output does not name %q:\n%s", want, got)
			}
			t.Logf("%s", got)
		})
	}
}
