package cfi

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// needTools skips the test when a tool is missing on a developer machine, and fails it when
// CI is set: .ci/install-deps installs them, and a pipeline must not pass by skipping.
func needTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is required (bash .ci/install-deps installs it): %v", tool, err)
			}
			t.Skipf("%s not installed", tool)
		}
	}
}

// checkBuildAArch64 checks that Build reads path as an AArch64 file, with the rows
// ParseSectionWith gives for its section.
func checkBuildAArch64(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tb, err := Build(f)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Arch != elf.EM_AARCH64 || tb.CheckArch(elf.EM_AARCH64) != nil || tb.CheckArch(elf.EM_X86_64) == nil {
		t.Fatalf("%s: table for %v", path, tb.Arch)
	}
	s := f.Section(tb.Source)
	data, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	kind := EHFrame
	if tb.Source == ".debug_frame" {
		kind = DebugFrame
	}
	direct, err := ParseSectionWith(data, s.Addr, kind, Options{Arch: elf.EM_AARCH64})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tb.Rows, direct.Rows) {
		t.Errorf("%s: Build's rows differ from ParseSectionWith's", path)
	}
}

// TestReadelfAArch64Compiled compares cross-compiled AArch64 programs with readelf, row by
// row: with and without frame pointers, with return address signing (pac-ret, whose
// DW_CFA_AARCH64_negate_ra_state readelf's frames-interp does not show; it is compared with
// the raw instructions instead), with the B key, and C++ with its personality routines and
// landing pads.
func TestReadelfAArch64Compiled(t *testing.T) {
	needTools(t, "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "readelf")
	dir := t.TempDir()
	for _, b := range []struct {
		name   string
		cxx    bool
		flags  []string
		signed bool // rows with a signed return address are expected
		bKey   bool // a CIE with the 'B' augmentation is expected
	}{
		{name: "O2", flags: []string{"-O2"}},
		{name: "O2-nofp", flags: []string{"-O2", "-fomit-frame-pointer"}},
		{name: "O2-fp", flags: []string{"-O2", "-fno-omit-frame-pointer"}},
		{name: "O0", flags: []string{"-O0"}},
		{name: "O2-pac", flags: []string{"-O2", "-mbranch-protection=standard"}, signed: true},
		{name: "O2-pac-all", flags: []string{"-O2", "-mbranch-protection=pac-ret+leaf"}, signed: true},
		{name: "O2-pac-bkey", flags: []string{"-O2", "-mbranch-protection=pac-ret+b-key"}, signed: true, bKey: true},
		// AArch64's GCC writes unwind tables unless -fno-unwind-tables too; the C
		// runtime's objects still bring .eh_frame, so both sections are compared.
		{name: "debugframe", flags: []string{"-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-fno-exceptions"}},
		{name: "gxx-O2", cxx: true, flags: []string{"-O2"}},
		{name: "gxx-O2-pac", cxx: true, flags: []string{"-O2", "-mbranch-protection=standard"}, signed: true},
	} {
		t.Run(b.name, func(t *testing.T) {
			var files []string
			if b.cxx {
				src := filepath.Join(dir, b.name+".cc")
				if err := os.WriteFile(src, []byte(testCXXProgram), 0o644); err != nil {
					t.Fatal(err)
				}
				exe := filepath.Join(dir, b.name)
				args := append(append([]string{}, b.flags...), "-o", exe, src)
				if out, err := exec.CommandContext(t.Context(), "aarch64-linux-gnu-g++", args...).CombinedOutput(); err != nil {
					t.Fatalf("aarch64-linux-gnu-g++ %v: %v\n%s", args, err, out)
				}
				files = []string{exe}
			} else {
				lib, exe := ccBuild(t, "aarch64-linux-gnu-gcc", dir, b.name, b.flags...)
				files = []string{lib, exe}
			}
			var st diffStats
			for _, p := range files {
				s := diffFile(t, p)
				st.rows += s.rows
				st.raSigned += s.raSigned
				checkBuildAArch64(t, p)
			}
			t.Logf("%s: %d rows compared, %d with a signed return address", b.name, st.rows, st.raSigned)
			if b.signed != (st.raSigned > 0) {
				t.Errorf("%d rows with a signed return address, want some: %v", st.raSigned, b.signed)
			}
			if b.bKey {
				out, err := exec.CommandContext(t.Context(), "readelf", "--debug-dump=frames", files[0]).Output()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(out, []byte(`Augmentation:          "zRB"`)) {
					t.Errorf("no CIE with the B augmentation in %s", files[0])
				}
			}
		})
	}
}

// TestReadelfAArch64Libraries compares Debian's arm64 C library, dynamic loader and C++
// library, fetched as packages by testdata/fetch-arm64-libs.sh into the user's cache
// directory.
func TestReadelfAArch64Libraries(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads packages")
	}
	needTools(t, "apt-get", "apt-cache", "dpkg-deb", "readelf", "bash")
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	cache = filepath.Join(cache, "profsym", "cfi-arm64")
	cmd := exec.CommandContext(t.Context(), "bash", filepath.Join("testdata", "fetch-arm64-libs.sh"), cache)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := "fetch-arm64-libs.sh: " + err.Error() + "\n" + stderr.String()
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	root := lines[len(lines)-1]
	for _, rel := range []string{"lib/aarch64-linux-gnu/libc.so.6", "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
		"usr/lib/aarch64-linux-gnu/libstdc++.so.6"} {
		t.Run(filepath.Base(rel), func(t *testing.T) {
			p, err := filepath.EvalSymlinks(filepath.Join(root, rel))
			if err != nil {
				t.Fatal(err)
			}
			st := diffFile(t, p)
			checkBuildAArch64(t, p)
			t.Logf("%s: %d rows compared (%d end of stack, %d with a signed return address)", rel, st.rows, st.endOfStack, st.raSigned)
		})
	}
}

// Signal trampolines as the assembler writes them from .cfi_signal_frame: the arm64 vDSO's
// __kernel_rt_sigreturn (its CFI as in the kernel's sigreturn.S), and an x86-64 one shaped
// like glibc's __restore_rt (the CFA and the return address read from the sigcontext by
// expressions). Both start one instruction early, so that the unwinder's pc-1 lookup of
// the trampoline finds its FDE.
const (
	sigreturnAArch64 = `
	.text
	.globl	__kernel_rt_sigreturn
	.type	__kernel_rt_sigreturn, %function
	.cfi_startproc
	.cfi_signal_frame
	.cfi_def_cfa	x29, 0
	.cfi_offset	x29, 0 * 8
	.cfi_offset	x30, 1 * 8
	nop
__kernel_rt_sigreturn:
	mov	x8, #139
	svc	#0
	.cfi_endproc
	.size	__kernel_rt_sigreturn, .-__kernel_rt_sigreturn
`
	sigreturnX86_64 = `
	.text
	.globl	__restore_rt
	.type	__restore_rt, @function
	.cfi_startproc
	.cfi_signal_frame
	.cfi_escape 0x0f, 0x04, 0x77, 0xa0, 0x01, 0x06
	.cfi_escape 0x10, 0x06, 0x03, 0x77, 0xf8, 0x00
	.cfi_escape 0x10, 0x10, 0x03, 0x77, 0xa8, 0x01
	nop
__restore_rt:
	movq	$15, %rax
	syscall
	.cfi_endproc
	.size	__restore_rt, .-__restore_rt
`
)

// TestReadelfSignalTrampolines checks that a CIE with the 'S' augmentation makes every row
// of its FDEs CFASignalFrame on both machines, where readelf prints the rules the
// trampoline's CFI states.
func TestReadelfSignalTrampolines(t *testing.T) {
	dir := t.TempDir()
	for _, b := range []struct {
		name, cc, src string
		machine       elf.Machine
	}{
		{"x86-64", "gcc", sigreturnX86_64, elf.EM_X86_64},
		{"aarch64", "aarch64-linux-gnu-gcc", sigreturnAArch64, elf.EM_AARCH64},
	} {
		t.Run(b.name, func(t *testing.T) {
			needTools(t, b.cc, "readelf")
			src := filepath.Join(dir, b.name+".S")
			if err := os.WriteFile(src, []byte(b.src), 0o644); err != nil {
				t.Fatal(err)
			}
			lib := filepath.Join(dir, "libsig-"+b.name+".so")
			if out, err := exec.CommandContext(t.Context(), b.cc, "-shared", "-nostdlib", "-o", lib, src).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", b.cc, err, out)
			}
			st := diffFile(t, lib)
			if st.signal == 0 || st.signal != st.rows {
				t.Errorf("%d signal frame rows of %d compared, want all", st.signal, st.rows)
			}
			f, err := elf.Open(lib)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tb, err := Build(f)
			if err != nil {
				t.Fatal(err)
			}
			if tb.Arch != b.machine {
				t.Errorf("Arch = %v, want %v", tb.Arch, b.machine)
			}
			want := []Row{{PC: tb.Rows[0].PC, CFA: CFASignalFrame}, {PC: tb.Rows[0].PC + 12}}
			if b.machine == elf.EM_X86_64 {
				want[1].PC = tb.Rows[0].PC + 1 + 7 + 2 // nop, movq, syscall
			}
			if !reflect.DeepEqual(tb.Rows, want) {
				t.Errorf("rows:\n%s\nwant:\n%s", rowsString(tb.Rows), rowsString(want))
			}
		})
	}
}
