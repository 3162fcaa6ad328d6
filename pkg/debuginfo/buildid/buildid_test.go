package buildid

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/binaryid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
)

// referenceHTLHash follows the OTel eBPF profiler's FileIDFromExecutableReader step by step
// on an io.ReadSeeker, to check the ReaderAt version against it.
func referenceHTLHash(t *testing.T, r io.ReadSeeker) string {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(r, 4096)); err != nil {
		t.Fatalf("reference hash: read head: %v", err)
	}
	size, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatalf("reference hash: seek end: %v", err)
	}
	tail := min(size, 4096)
	if _, err := r.Seek(-tail, io.SeekEnd); err != nil {
		t.Fatalf("reference hash: seek tail: %v", err)
	}
	if _, err := io.Copy(h, r); err != nil {
		t.Fatalf("reference hash: read tail: %v", err)
	}
	var l [8]byte
	binary.BigEndian.PutUint64(l[:], uint64(size))
	h.Write(l[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func TestHTLHashMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, n := range []int{0, 1, 100, 4095, 4096, 4097, 8191, 8192, 8193, 100000} {
		data := make([]byte, n)
		rng.Read(data)
		got, err := HTLHash(bytes.NewReader(data), int64(n))
		if err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if want := referenceHTLHash(t, bytes.NewReader(data)); got != want {
			t.Errorf("size %d: %s, reference %s", n, got, want)
		}
		if !binaryid.ValidHex(got) || len(got) != 32 {
			t.Errorf("size %d: %q is not 32 hex digits", n, got)
		}
	}
	// Pinned vector: empty file = SHA-256 of eight zero bytes, first 16 bytes.
	if got, _ := HTLHash(bytes.NewReader(nil), 0); got != "af5570f5a1810b7af78caf4bc70a660f" {
		t.Errorf("empty file: %s", got)
	}
	// A short read surfaces as an error, not a wrong hash.
	if _, err := HTLHash(bytes.NewReader(make([]byte, 10)), 20); err == nil {
		t.Error("size beyond data: no error")
	}
}

var readelfID = regexp.MustCompile(`Build ID: ([0-9a-f]+)`)

// readelfGNU returns the GNU build ID readelf -n prints, "" when none.
func readelfGNU(t *testing.T, path string) string {
	out := string(elfxtest.Run(t, "readelf", "-n", path))
	if m := readelfID.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// TestGNUBuildIDAgainstReadelf: the GNU build ID of executables and shared libraries made by
// the host's toolchain and by the arm64 cross toolchain is readelf's, and survives strip.
func TestGNUBuildIDAgainstReadelf(t *testing.T) {
	elfxtest.Need(t, "gcc", "readelf", "strip")
	for _, tc := range elfxtest.Toolchains(t) {
		t.Run(tc.Arch, func(t *testing.T) {
			dir := t.TempDir()
			cases := []struct {
				name   string
				args   []string
				wantID bool
			}{
				{"sha1", []string{"-Wl,--build-id=sha1"}, true},
				{"md5", []string{"-Wl,--build-id=md5"}, true},
				{"hex", []string{"-Wl,--build-id=0xdeadbeef00112233"}, true},
				{"none", []string{"-Wl,--build-id=none"}, false},
				{"shared", []string{"-shared", "-fPIC", "-Wl,--build-id"}, true},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					p := tc.CC(t, dir, c.name, elfxtest.Hello, c.args...)
					if m := elfxtest.Machine(t, p); m != tc.Machine {
						t.Fatalf("%s made a %v file, want %v", tc.Tool("gcc"), m, tc.Machine)
					}
					want := readelfGNU(t, p)
					if (want != "") != c.wantID {
						t.Fatalf("readelf build ID %q, want one: %v", want, c.wantID)
					}
					ids, err := FromFile(p)
					if err != nil {
						t.Fatal(err)
					}
					if ids.GNU != want {
						t.Errorf("GNU = %q, readelf %q", ids.GNU, want)
					}
					if ids.Go != "" {
						t.Errorf("Go = %q in a C binary", ids.Go)
					}
					h, _ := HTLHash(bytes.NewReader(elfxtest.Read(t, p)), int64(len(elfxtest.Read(t, p))))
					if ids.HTLHash != h {
						t.Errorf("HTLHash = %q, want %q", ids.HTLHash, h)
					}
					// strip keeps the note; the ID must survive.
					s := p + ".stripped"
					tc.Run(t, "strip", "-o", s, p)
					if sid, _ := FromFile(s); sid.GNU != want {
						t.Errorf("stripped: GNU = %q, want %q", sid.GNU, want)
					}
				})
			}
			if got := readelfGNU(t, filepath.Join(dir, "hex")); got != "deadbeef00112233" {
				t.Errorf("readelf saw %q for the explicit ID", got)
			}
		})
	}
}

// TestNotesFromProgramHeaders drops the section header table, as sstrip does: the IDs
// must still be found through PT_NOTE, on every architecture's layout.
func TestNotesFromProgramHeaders(t *testing.T) {
	for _, tc := range elfxtest.Toolchains(t) {
		t.Run(tc.Arch, func(t *testing.T) {
			p := tc.CC(t, t.TempDir(), "prog", elfxtest.Hello, "-Wl,--build-id=sha1")
			want := readelfGNU(t, p)
			b := elfxtest.Read(t, p)
			binary.LittleEndian.PutUint64(b[40:], 0) // e_shoff
			binary.LittleEndian.PutUint16(b[60:], 0) // e_shnum
			binary.LittleEndian.PutUint16(b[62:], 0) // e_shstrndx
			ids, err := Compute(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			if ids.GNU != want || want == "" {
				t.Errorf("GNU = %q, want %q", ids.GNU, want)
			}
		})
	}
}

func TestGoBuildID(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain in PATH")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { println(\"hi\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type goCase struct {
		name, arch string
		flags      []string
	}
	var cases []goCase
	for _, arch := range []string{runtime.GOARCH, "arm64"} {
		for _, c := range []goCase{
			{"default", arch, nil},
			{"stripped", arch, []string{"-ldflags=-s -w"}},
			{"gnu note", arch, []string{"-ldflags=-B gobuildid"}},
		} {
			c.name = arch + "/" + c.name
			cases = append(cases, c)
		}
		if runtime.GOARCH == "arm64" {
			break
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.NewReplacer(" ", "_", "/", "-").Replace(c.name))
			cmd := exec.CommandContext(t.Context(), goBin, append(append([]string{"build", "-o", out}, c.flags...), ".")...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off", "GOARCH="+c.arch)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, b)
			}
			want := strings.TrimSpace(string(elfxtest.Run(t, goBin, "tool", "buildid", out)))
			ids, err := FromFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if ids.Go != want || !binaryid.ValidGo(want) {
				t.Errorf("Go = %q, go tool buildid %q", ids.Go, want)
			}
			if gnu := readelfGNU(t, out); ids.GNU != gnu {
				t.Errorf("GNU = %q, readelf %q", ids.GNU, gnu)
			}
			if strings.HasSuffix(c.name, "gnu note") && ids.GNU == "" {
				t.Error("-B gobuildid: no GNU build ID")
			}
			typ, id := ids.Primary()
			if ids.GNU == "" && (typ != TypeGo || id != want) {
				t.Errorf("Primary = %s %s", typ, id)
			}
		})
	}
}

func TestComputeNonELFAndCorrupt(t *testing.T) {
	ids, err := Compute(bytes.NewReader([]byte("#!/bin/sh\n")), 10)
	if err != nil || ids.HTLHash == "" || ids.GNU != "" || ids.Go != "" {
		t.Errorf("script: %+v, %v", ids, err)
	}
	bad := append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 40)...)
	ids, err = Compute(bytes.NewReader(bad), int64(len(bad)))
	if !errors.Is(err, ErrCorrupt) || ids.HTLHash == "" {
		t.Errorf("corrupt ELF: %+v, %v", ids, err)
	}
}

func TestPrimaryAndValid(t *testing.T) {
	for _, c := range []struct {
		ids     IDs
		typ, id string
	}{
		{IDs{GNU: "ab", Go: "x/y", HTLHash: "cd"}, TypeGNU, "ab"},
		{IDs{Go: "x/y", HTLHash: "cd"}, TypeGo, "x/y"},
		{IDs{HTLHash: "cd"}, TypeHTLHash, "cd"},
		{IDs{}, "", ""},
	} {
		if typ, id := c.ids.Primary(); typ != c.typ || id != c.id {
			t.Errorf("%+v: %s %s", c.ids, typ, id)
		}
	}
}

func TestForEachNoteMalformed(t *testing.T) {
	le := binary.LittleEndian
	note := func(namesz, descsz, typ uint32, rest []byte) []byte {
		b := make([]byte, 12)
		le.PutUint32(b, namesz)
		le.PutUint32(b[4:], descsz)
		le.PutUint32(b[8:], typ)
		return append(b, rest...)
	}
	for _, data := range [][]byte{
		note(0xffffffff, 0, 3, nil),
		note(4, 0xffffffff, 3, []byte("GNU\x00")),
		note(3, 4, 3, []byte("GNU")),
		{1, 2, 3},
	} {
		n := 0
		forEachNote(data, le, 4, func(string, uint32, []byte) { n++ })
		if n != 0 {
			t.Errorf("%x: %d notes", data, n)
		}
	}
	good := note(4, 2, 3, []byte("GNU\x00\xab\xcd\x00\x00"))
	var got string
	forEachNote(good, le, 4, func(name string, typ uint32, desc []byte) { got = name + hex.EncodeToString(desc) })
	if got != "GNUabcd" {
		t.Errorf("good note: %q", got)
	}
}

func FuzzCompute(f *testing.F) {
	if _, err := exec.LookPath("gcc"); err == nil {
		dir := f.TempDir()
		for _, args := range [][]string{
			{"-Os", "-nostdlib", "-static", "-Wl,--build-id"},
			{"-Os", "-nostdlib", "-static", "-Wl,--build-id=md5", "-g"},
		} {
			p := elfxtest.CC(f, dir, "tiny", elfxtest.Tiny, args...)
			f.Add(elfxtest.Read(f, p))
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ids, err := Compute(bytes.NewReader(data), int64(len(data)))
		if ids.HTLHash == "" {
			t.Fatalf("no htlhash (err %v)", err)
		}
		if ids.GNU != "" && !binaryid.ValidHex(ids.GNU) {
			t.Fatalf("GNU %q not hex", ids.GNU)
		}
		if ids.Go != "" && !binaryid.ValidGo(ids.Go) {
			t.Fatalf("Go %q not valid", ids.Go)
		}
	})
}
