package uploadcli

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestCollect(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("bin/a", "\x7fELF rest")
	write("bin/readme.txt", "text")
	b := write("lib/sub/b.so", "\x7fELF more")
	if err := os.Symlink(a, filepath.Join(dir, "bin", "link")); err != nil {
		t.Fatal(err)
	}
	explicit := write("notes", "not elf")

	got, err := collect([]string{dir, explicit, a})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range got {
		paths = append(paths, f.path)
	}
	// Directories contribute their ELF files (no symlinks, no duplicates); a file named
	// explicitly is kept even when it is not ELF, so it fails loudly later.
	want := []string{a, b, explicit}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("collect = %v, want %v", paths, want)
	}
	if _, err := collect([]string{filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("a missing path was accepted")
	}
}
