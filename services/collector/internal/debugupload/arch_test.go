package debugupload

import (
	"bytes"
	"debug/elf"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo/debugfile"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// TestARM64Uploads: on an arm64 node the collector uploads what it does on amd64. An arm64
// executable with DWARF is uploaded as it is; a stripped one (split by the cross binutils with
// objcopy --only-keep-debug and --add-gnu-debuglink) has its debug file found by build ID
// below the process's root and uploaded with the executable's program headers. The server
// stores each under its build ID, and what it serves back is the arm64 file with its DWARF.
func TestARM64Uploads(t *testing.T) {
	testsupport.NeedTools(t, testsupport.ARM64Tools...)
	tc := elfxtest.ARM64
	url := startSymbolizer(t)
	dir, root := t.TempDir(), t.TempDir()
	src := func(n int) string {
		return fmt.Sprintf(`#include <stdio.h>
__attribute__((noinline)) int work%d(int x) { return x * %d + 1; }
int main(int argc, char **argv) { printf("%%d\n", work%d(argc)); return 0; }
`, n, n+3, n)
	}
	full := tc.CC(t, dir, "full", src(40), "-O2", "-g", "-Wl,--build-id")
	split := tc.CC(t, dir, "split", src(41), "-O2", "-g", "-Wl,--build-id")
	for _, p := range []string{full, split} {
		if m := elfxtest.Machine(t, p); m != elf.EM_AARCH64 {
			t.Fatalf("%s: machine %v, want EM_AARCH64", p, m)
		}
	}
	splitID := ids(t, split).GNU
	if splitID == "" || ids(t, full).GNU == "" {
		t.Fatal("no GNU build ID")
	}
	debug := debugfile.BuildIDPath(filepath.Join(root, DebugDir), splitID)
	if err := os.MkdirAll(filepath.Dir(debug), 0o755); err != nil {
		t.Fatal(err)
	}
	tc.Run(t, "objcopy", "--only-keep-debug", split, debug)
	stripped := filepath.Join(dir, "split.stripped")
	tc.Run(t, "objcopy", "--strip-all", "--add-gnu-debuglink="+debug, split, stripped)
	if got := ids(t, stripped).GNU; got != splitID {
		t.Fatalf("stripped: build ID %q, want %q", got, splitID)
	}

	u, err := New(Options{SymbolizerURL: url, Token: testToken}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u.Offer(full, full, "", ids(t, full))
	u.Offer(stripped, stripped, root, ids(t, stripped))
	// The full executable; the stripped one's debug file, then its program headers.
	s := runUntil(t, u, func(s map[string]int64) bool { return total(s) >= 3 })
	if s[OutcomeUploaded] != 3 || total(s) != 3 {
		t.Fatalf("stats %v: want 3 uploaded (an executable, a debug file and the stripped executable's headers)", s)
	}
	for _, c := range []struct {
		name, id string
		typ      debuginfov1.DebuginfoType
	}{
		{"executable with DWARF", ids(t, full).GNU, debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE},
		{"stripped executable's debug file", splitID, debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec, err := get(t, url, c.id)
			if err != nil {
				t.Fatalf("Get %s: %v", c.id, err)
			}
			if rec.GetType() != c.typ || rec.GetSource() != debuginfov1.UploadSource_UPLOAD_SOURCE_NODE || !rec.GetHasProgramHeaders() {
				t.Fatalf("record: type %v source %v program headers %v; want %v from the node with program headers",
					rec.GetType(), rec.GetSource(), rec.GetHasProgramHeaders(), c.typ)
			}
			// What the store hands out by build ID is the arm64 file, with its DWARF.
			status, body := testsupport.Get(t, url+"/buildid/"+c.id+"/debuginfo")
			if status != http.StatusOK {
				t.Fatalf("GET /buildid/%s/debuginfo: %d %s", c.id, status, body)
			}
			f, err := elf.NewFile(bytes.NewReader(body))
			if err != nil {
				t.Fatalf("served file: %v", err)
			}
			defer f.Close()
			if f.Machine != elf.EM_AARCH64 || f.Section(".debug_info") == nil {
				t.Fatalf("served file: machine %v, .debug_info %v; want an arm64 file with DWARF", f.Machine, f.Section(".debug_info") != nil)
			}
		})
	}
}
