package debuginfo_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
)

// TestNoSearchDebuglink: a stripped binary whose .gnu_debuglink names a debug file beside it
// gets it by default, as gdb and llvm-symbolizer find it, and not with NoSearch, which a server
// indexing uploaded files sets (a debuglink name is the uploader's to choose: "../../x" would
// make the server checksum a file of its own).
func TestNoSearchDebuglink(t *testing.T) {
	elfxtest.Need(t, "gcc", "objcopy")
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	if err := os.WriteFile(src, []byte("int f(int x) { return x * 3; }\nint main(void) { return f(2); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	full, bin, dbg := filepath.Join(dir, "full"), filepath.Join(dir, "p"), filepath.Join(dir, "p.debug")
	elfxtest.Run(t, "gcc", "-O1", "-g", "-Wl,--build-id", "-o", full, src)
	elfxtest.Run(t, "objcopy", "--only-keep-debug", full, dbg)
	elfxtest.Run(t, "objcopy", "--strip-all", "--add-gnu-debuglink="+dbg, full, bin)

	for _, c := range []struct {
		opts      debuginfo.Options
		debugFile string
	}{
		{debuginfo.Options{}, dbg},
		{debuginfo.Options{NoSearch: true}, ""},
		{debuginfo.Options{NoSearch: true, DebugFile: dbg}, dbg},
	} {
		b, err := debuginfo.Open(bin, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Info().DebugFile; got != c.debugFile {
			t.Errorf("NoSearch %v, DebugFile %q: debug file %q, want %q", c.opts.NoSearch, c.opts.DebugFile, got, c.debugFile)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
