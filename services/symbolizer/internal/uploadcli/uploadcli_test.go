package uploadcli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/testsupport"
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

// A DWARF package has no build ID: it goes under --package-of, else the build ID of the
// executable beside it, and anything else is a clear error before any upload.
func TestPackageOf(t *testing.T) {
	exe := testsupport.CompileC(t, "int main(void) { return 0; }\n", "-Wl,--build-id")
	ids, err := buildid.FromFile(exe)
	if err != nil || ids.GNU == "" {
		t.Fatalf("build ID of the test program: %q, %v", ids.GNU, err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name, packageOf, path, want, wantErr string
	}{
		{"flag", "abcd", filepath.Join(dir, "any.dwp"), "abcd", ""},
		{"flag not hex", "ABCD", filepath.Join(dir, "any.dwp"), "", "not a GNU build ID"},
		{"executable beside", "", exe + ".dwp", ids.GNU, ""},
		{"no executable beside", "", filepath.Join(dir, "gone.dwp"), "", "cannot be read"},
		{"not named .dwp", "", filepath.Join(dir, "pkg"), "", "name it after its executable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := (&UploadCmd{PackageOf: c.packageOf}).packageOf(c.path)
			if got != c.want || (c.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("packageOf(%s) = %q, %v; want %q, error with %q", c.path, got, err, c.want, c.wantErr)
			}
		})
	}
}

func TestPrintRecordCompanions(t *testing.T) {
	d := &debuginfov1.Debuginfo{BuildId: "ab", Companions: []*debuginfov1.Companion{
		{Kind: debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY, Id: "12", State: debuginfov1.CompanionState_COMPANION_STATE_MISSING},
		{Kind: debuginfov1.CompanionKind_COMPANION_KIND_DWARF_PACKAGE, Id: "ab", State: debuginfov1.CompanionState_COMPANION_STATE_AVAILABLE},
	}}
	var out bytes.Buffer
	printRecord(&out, d, false)
	if want := " supplementary=12:missing dwarf_package=ab:available\n"; !strings.HasSuffix(out.String(), want) {
		t.Errorf("record line %q, want it to end in %q", out.String(), want)
	}
}

// An executable and its debug file go in one group, the debug file first, whatever their
// names' order; a file without a build ID is a group of its own.
func TestGroupByIDSendsDWARFFirst(t *testing.T) {
	exe := testsupport.CompileC(t, "int main(void) { return 0; }\n", "-g", "-Wl,--build-id")
	dir := t.TempDir()
	stripped := filepath.Join(dir, "app")
	debug := filepath.Join(dir, "app.debug")
	other := filepath.Join(dir, "notes")
	testsupport.NeedTools(t, "objcopy")
	for _, args := range [][]string{{"--only-keep-debug", exe, debug}, {"--strip-all", exe, stripped}} {
		if out, err := exec.CommandContext(t.Context(), "objcopy", args...).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %v: %v\n%s", args, err, out)
		}
	}
	if err := os.WriteFile(other, []byte("not elf"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := []fileRef{{stripped, true}, {debug, true}, {other, true}}
	got := groupByID(files)
	want := [][]int{{1, 0}, {2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("groupByID = %v, want %v (app.debug before app, notes alone)", got, want)
	}
}
