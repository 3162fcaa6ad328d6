package symbolizecmd

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
)

// TestStrippedGo: a Go binary stripped of its symbol table and DWARF (this test binary) is
// answered from its pclntab, read lazily; the collector settings the lazy read runs under are
// put back when the command is done.
func TestStrippedGo(t *testing.T) {
	if _, err := exec.LookPath("objcopy"); err != nil {
		t.Fatalf("objcopy is needed (apt-get install -y binutils): %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	typ := f.Type
	f.Close()
	if typ != elf.ET_EXEC {
		// A position-independent test binary runs at another address than its file says.
		t.Skipf("the test binary is %v, not a position-dependent executable", typ)
	}
	const want = "github.com/profsym/profsym/services/symbolizer/internal/symbolizecmd.ParseAddress"
	addr := uint64(reflect.ValueOf(ParseAddress).Pointer()) + 4
	stripped := filepath.Join(t.TempDir(), "stripped")
	if out, err := exec.CommandContext(t.Context(), "objcopy", "--strip-all", exe, stripped).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	b, err := debuginfo.Open(stripped, debuginfo.Options{NoSearch: true})
	if err != nil {
		t.Fatal(err)
	}
	_, lazy := b.LazyLookup()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !lazy {
		t.Fatal("the stripped test binary is not read lazily")
	}

	percent := debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	limit := debug.SetMemoryLimit(-1)
	out := symbolizeOut(t, &Cmd{Obj: stripped, OutputStyle: "JSON", Inlines: true, NoCache: true, Addresses: []string{fmt.Sprintf("0x%x", addr)}})
	var answers []struct {
		Symbol []struct{ FunctionName, FileName string }
	}
	if err := json.Unmarshal([]byte(out), &answers); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(answers) != 1 || len(answers[0].Symbol) == 0 {
		t.Fatalf("answers: %s", out)
	}
	outer := answers[0].Symbol[len(answers[0].Symbol)-1]
	if outer.FunctionName != want || !strings.HasSuffix(outer.FileName, "/symbolize.go") {
		t.Errorf("%#x: outermost frame %+v, want %s in symbolize.go", addr, outer, want)
	}
	after := debug.SetGCPercent(percent)
	if after != percent || debug.SetMemoryLimit(-1) != limit {
		t.Errorf("GOGC %d and memory limit %d after the run, %d and %d before", after, debug.SetMemoryLimit(-1), percent, limit)
	}
}
