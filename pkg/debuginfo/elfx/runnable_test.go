package elfx

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/profsym/profsym/pkg/testsupport"
)

func TestRunnable(t *testing.T) {
	full := testsupport.CompileC(t, "int main(void) { return 0; }\n", "-g", "-O2")
	dir := t.TempDir()
	files := map[string]bool{full: true}
	for name, args := range map[string][]string{
		"debug":    {"--only-keep-debug"},
		"stripped": {"--strip-all"},
	} {
		out := filepath.Join(dir, name)
		cmd := exec.CommandContext(t.Context(), "objcopy", append(args, full, out)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("objcopy %v: %v\n%s", args, err, b)
		}
		files[out] = name != "debug"
	}
	for path, want := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		ef, err := Open(f, st.Size(), DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		if got := ef.Runnable(); got != want {
			t.Errorf("%s: Runnable = %v, want %v", filepath.Base(path), got, want)
		}
		f.Close()
	}
}
