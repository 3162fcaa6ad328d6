package symbolizecmd

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/testsupport"
)

// TestMain keeps the tests' indexes out of the user's cache directory: a Cmd made without the
// flag parser has caching on, in the default directory.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "symbolizecmd-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.Setenv("XDG_CACHE_HOME", dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

func cacheEntries(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+cacheSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// symbolizeOut runs c and returns its output; it fails on any warning.
func symbolizeOut(t *testing.T, c *Cmd) string {
	t.Helper()
	return symbolizeWarned(t, c, "")
}

// symbolizeWarned runs c and returns its output; it fails unless the warnings contain warn
// (and on any warning when warn is empty).
func symbolizeWarned(t *testing.T, c *Cmd, warn string) string {
	t.Helper()
	var out, errb bytes.Buffer
	c.Stderr = &errb
	if err := c.run(strings.NewReader(""), &out); err != nil {
		t.Fatal(err)
	}
	if warn == "" && errb.Len() > 0 {
		t.Fatalf("warnings: %s", errb.String())
	}
	if !strings.Contains(errb.String(), warn) {
		t.Fatalf("warnings %q do not say %q", errb.String(), warn)
	}
	return out.String()
}

func TestIndexCache(t *testing.T) {
	bin, addrs := build(t)
	dir := filepath.Join(t.TempDir(), "cache")
	cmd := func() *Cmd {
		return &Cmd{Obj: bin, OutputStyle: "JSON", Inlines: true, Addresses: addrs, CacheDir: dir, CacheSize: 1 << 30}
	}
	want := symbolizeOut(t, &Cmd{Obj: bin, OutputStyle: "JSON", Inlines: true, Addresses: addrs, NoCache: true})
	if n := len(cacheEntries(t, dir)); n != 0 {
		t.Fatalf("--no-cache wrote %d entries", n)
	}

	if got := symbolizeOut(t, cmd()); got != want {
		t.Fatal("first cached run answers differently")
	}
	entries := cacheEntries(t, dir)
	if len(entries) != 1 {
		t.Fatalf("%d cache entries after one binary, want 1", len(entries))
	}
	// The second run answers from the entry: made unreadable as an index, the entry would be
	// replaced, so first check that a run leaves a good entry alone.
	before, err := os.ReadFile(entries[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := symbolizeOut(t, cmd()); got != want {
		t.Fatal("run from the cache answers differently")
	}
	after, err := os.ReadFile(entries[0])
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the cached index was rewritten by a run that should have read it (%v)", err)
	}

	// A torn entry is not trusted: the index is built again and the entry replaced.
	if err := os.WriteFile(entries[0], before[:len(before)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if got := symbolizeOut(t, cmd()); got != want {
		t.Fatal("run with a torn cache entry answers differently")
	}
	if fixed, err := os.ReadFile(entries[0]); err != nil || !bytes.Equal(fixed, before) {
		t.Fatalf("torn entry not replaced by the rebuilt index (%v)", err)
	}

	// A stripped copy of the same build is another entry, and answers from its own index.
	stripped := filepath.Join(t.TempDir(), "stripped")
	if out, err := exec.CommandContext(t.Context(), "objcopy", "--strip-debug", bin, stripped).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	c := cmd()
	c.Obj = stripped
	// Both runs, the one that builds the index and the one that loads it, say why the answers
	// have no lines.
	const symbolsOnly = "answers name functions from its symbol table"
	wantStripped := symbolizeWarned(t, &Cmd{Obj: stripped, OutputStyle: "JSON", Inlines: true, Addresses: addrs, NoCache: true}, symbolsOnly)
	if got := symbolizeWarned(t, c, symbolsOnly); got != wantStripped || got == want {
		t.Fatal("the stripped copy was answered from the unstripped file's index")
	}
	if n := len(cacheEntries(t, dir)); n != 2 {
		t.Fatalf("%d cache entries after two files, want 2", n)
	}

	// Beyond its size the cache drops the least recently used entry.
	c = cmd()
	c.CacheSize = int64(len(before)) + 1
	symbolizeOut(t, c)
	left := cacheEntries(t, dir)
	if len(left) != 1 || left[0] != entries[0] {
		t.Fatalf("after eviction: %v, want only %s", left, entries[0])
	}
}

// TestCacheEvictsFetchedFiles: --cache-size bounds the files fetched from debuginfod with the
// indexes, least recently used first; a file used again is recent; expired misses and
// abandoned downloads are removed, a fresh miss and a download under way are not.
func TestCacheEvictsFetchedFiles(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	write := func(rel string, size int, age time.Duration) string {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{p, filepath.Dir(p)} {
			if err := os.Chtimes(q, now.Add(-age), now.Add(-age)); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	oldest := write("debuginfod/aa01/debuginfo", 600, 5*time.Hour)
	reused := write("debuginfod/aa02/debuginfo", 600, 4*time.Hour)
	index := write("aa03-0123456789abcdef"+cacheSuffix, 100, 3*time.Hour)
	expiredMiss := write("debuginfod/aa04/miss", 0, missTTL+time.Minute)
	freshMiss := write("debuginfod/aa05/miss", 0, time.Minute)
	underWay := write("debuginfod/aa06/.download-1", 50, 10*time.Second)
	abandoned := write("debuginfod/aa07/.download-2", 50, debuginfodTimeout+time.Minute)

	// Using a kept file makes it the most recent entry.
	got, err := fromDebuginfod{}.fetch(filepath.Join(dir, debuginfodDir), "aa02", nil)
	if err != nil || got != reused {
		t.Fatalf("fetch of a kept file: %q, %v; want %q", got, err, reused)
	}
	c := &indexCache{dir: dir, maxBytes: 650}
	if err := c.evict(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		kept bool
	}{
		{oldest, false}, {reused, true}, {index, false}, {expiredMiss, false}, {freshMiss, true}, {underWay, true}, {abandoned, false},
	} {
		_, err := os.Stat(tt.path)
		if kept := err == nil; kept != tt.kept {
			t.Errorf("%s: kept %v, want %v", strings.TrimPrefix(tt.path, dir), kept, tt.kept)
		}
	}
}

// TestCachedRunWarns: a run that loads the index from the cache says what the build skipped,
// as the run that built it did: its answers lack the same.
func TestCachedRunWarns(t *testing.T) {
	bin := testsupport.CompileC(t, debuginfodProgram(0), "-g", "-gsplit-dwarf", "-O2")
	dwos, err := filepath.Glob(filepath.Join(filepath.Dir(bin), "*.dwo"))
	if err != nil || len(dwos) == 0 {
		t.Fatalf("no .dwo beside %s (%v)", bin, err)
	}
	for _, p := range dwos {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	const skipped = "skeleton units whose functions were not read"
	first := symbolizeWarned(t, &Cmd{Obj: bin, OutputStyle: "JSON", Inlines: true, Addresses: []string{"0x1000"}, CacheDir: dir, CacheSize: 1 << 30}, skipped)
	if n := len(cacheEntries(t, dir)); n != 1 {
		t.Fatalf("%d cache entries, want 1", n)
	}
	if again := symbolizeWarned(t, &Cmd{Obj: bin, OutputStyle: "JSON", Inlines: true, Addresses: []string{"0x1000"}, CacheDir: dir, CacheSize: 1 << 30}, skipped); again != first {
		t.Fatalf("the cached run answers %q, the first %q", again, first)
	}
}

// FuzzDecodeEntry: a cache entry is a file on disk that anything may have written: reading
// one fails or succeeds, never panics.
func FuzzDecodeEntry(f *testing.F) {
	b := index.NewBuilder()
	n := b.AddNode(index.Node{Name: b.String("f"), Parent: index.NoParent})
	b.AddRange(0x1000, 0x1100, n)
	b.AddLine(0x1000, b.String("a.c"), 3, 0)
	ix, err := b.Build()
	if err != nil {
		f.Fatal(err)
	}
	c := &indexCache{dir: f.TempDir()}
	if err := c.store("seed"+cacheSuffix, ix, []string{"a warning"}); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(filepath.Join(c.dir, "seed"+cacheSuffix))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(entryMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, _, err := decodeEntry(data)
		if err == nil {
			ix.Lookup(0x1000)
		}
	})
}
