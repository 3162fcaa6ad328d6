package debugfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
)

// split builds prog with DWARF using tc, splits it with objcopy --only-keep-debug, strips the
// binary and links it to the debug file with --add-gnu-debuglink (tc's binutils, which know
// its architecture). Returns binary and debug paths.
func split(t *testing.T, tc elfxtest.Toolchain, dir, name string, gccArgs ...string) (bin, dbg string) {
	t.Helper()
	elfxtest.Need(t, tc.Tool("gcc"), tc.Tool("objcopy"), tc.Tool("strip"))
	full := tc.CC(t, dir, name+".full", elfxtest.Hello, append([]string{"-g"}, gccArgs...)...)
	if m := elfxtest.Machine(t, full); m != tc.Machine {
		t.Fatalf("%s made a %v file, want %v", tc.Tool("gcc"), m, tc.Machine)
	}
	dbg = filepath.Join(dir, name+".debug")
	bin = filepath.Join(dir, name)
	tc.Run(t, "objcopy", "--only-keep-debug", full, dbg)
	tc.Run(t, "strip", "--strip-debug", "--strip-unneeded", "-o", bin, full)
	tc.Run(t, "objcopy", "--add-gnu-debuglink="+dbg, bin)
	if err := os.Remove(full); err != nil {
		t.Fatal(err)
	}
	return bin, dbg
}

func open(t *testing.T, path string) (*elfx.File, buildid.IDs) {
	t.Helper()
	f, c, err := elfx.OpenPath(path, elfx.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ids, err := buildid.FromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return f, ids
}

func place(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, elfxtest.Read(t, src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFind finds separate debug files by build ID and by .gnu_debuglink, for binaries of the
// host's architecture and for arm64 binaries split by the cross binutils.
func TestFind(t *testing.T) {
	for _, tc := range elfxtest.Toolchains(t) {
		t.Run(tc.Arch, func(t *testing.T) { testFind(t, tc) })
	}
}

func testFind(t *testing.T, tc elfxtest.Toolchain) {
	root := t.TempDir()
	global := filepath.Join(root, "usr", "lib", "debug")

	t.Run("build-id", func(t *testing.T) {
		dir := filepath.Join(root, "bid")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bin, dbg := split(t, tc, dir, "prog", "-Wl,--build-id=sha1")
		f, ids := open(t, bin)
		if ids.GNU == "" {
			t.Fatal("no build ID")
		}
		want := filepath.Join(global, ".build-id", ids.GNU[:2], ids.GNU[2:]+".debug")
		place(t, dbg, want)
		if err := os.Remove(dbg); err != nil {
			t.Fatal(err)
		}
		got, how, err := Find(f, ids, bin, []string{filepath.Join(root, "empty"), global})
		if err != nil || got != want || how != HowBuildID {
			t.Fatalf("Find = %q %q %v, want %q", got, how, err, want)
		}
		df, _ := open(t, got)
		if !df.HasDWARF() {
			t.Error("debug file has no DWARF")
		}
	})

	t.Run("build-id file of another binary is refused", func(t *testing.T) {
		dir := filepath.Join(root, "bidwrong")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bin, _ := split(t, tc, dir, "prog", "-Wl,--build-id=sha1")
		_, other := split(t, tc, dir, "other", "-Wl,--build-id=md5")
		if err := os.Remove(filepath.Join(dir, "prog.debug")); err != nil {
			t.Fatal(err)
		}
		f, ids := open(t, bin)
		gdir := filepath.Join(root, "g2")
		place(t, other, filepath.Join(gdir, ".build-id", ids.GNU[:2], ids.GNU[2:]+".debug"))
		if got, _, err := Find(f, ids, bin, []string{gdir}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Find = %q, %v; want ErrNotFound", got, err)
		}
	})

	cases := []struct {
		name  string
		where func(binDir string) string // where the debug file goes
	}{
		{"debuglink beside the binary", func(d string) string { return filepath.Join(d, "prog.debug") }},
		{"debuglink in .debug/", func(d string) string { return filepath.Join(d, ".debug", "prog.debug") }},
		{"debuglink under the global dir", func(d string) string { return filepath.Join(global, d, "prog.debug") }},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(root, "dl", string(rune('a'+i)))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			bin, dbg := split(t, tc, dir, "prog", "-Wl,--build-id=none")
			want := c.where(dir)
			if want != dbg {
				place(t, dbg, want)
				if err := os.Remove(dbg); err != nil {
					t.Fatal(err)
				}
			}
			f, ids := open(t, bin)
			if ids.GNU != "" {
				t.Fatal("built with a build ID")
			}
			got, how, err := Find(f, ids, bin, []string{global})
			if err != nil || got != want || how != HowDebugLink {
				t.Fatalf("Find = %q %q %v, want %q", got, how, err, want)
			}
		})
	}

	t.Run("wrong CRC is not chosen", func(t *testing.T) {
		dir := filepath.Join(root, "crc")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bin, dbg := split(t, tc, dir, "prog", "-Wl,--build-id=none")
		// A rebuilt debug file with the same name but different content sits beside the
		// binary; the right one sits in .debug/.
		right := filepath.Join(dir, ".debug", "prog.debug")
		place(t, dbg, right)
		_, other := split(t, tc, filepath.Join(root, "crc"), "prog2", "-Wl,--build-id=none", "-O2")
		place(t, other, dbg)
		f, ids := open(t, bin)
		link, ok := ReadDebuglink(f)
		if !ok || link.Name != "prog.debug" {
			t.Fatalf("debuglink %+v %v", link, ok)
		}
		if crc, _ := CRC(dbg); crc == link.CRC {
			t.Fatal("test setup: the impostor has the right CRC")
		}
		got, _, err := Find(f, ids, bin, nil)
		if err != nil || got != right {
			t.Fatalf("Find = %q %v, want %q", got, err, right)
		}
		if err := os.Remove(right); err != nil {
			t.Fatal(err)
		}
		if got, _, err := Find(f, ids, bin, nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("only a wrong-CRC file: Find = %q %v", got, err)
		}
	})

	t.Run("no debuglink, no build ID", func(t *testing.T) {
		dir := filepath.Join(root, "none")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := tc.CC(t, dir, "plain", elfxtest.Hello, "-Wl,--build-id=none")
		f, ids := open(t, p)
		if _, _, err := Find(f, ids, p, []string{global}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	})
}
