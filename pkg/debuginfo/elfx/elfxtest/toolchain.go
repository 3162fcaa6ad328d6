package elfxtest

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Toolchain compiles and edits ELF files of one architecture: the host's gcc and binutils, or
// a GNU cross toolchain whose tools carry a target prefix (aarch64-linux-gnu-gcc, ...).
type Toolchain struct {
	// Arch is the architecture as Go spells it (GOARCH).
	Arch string
	// Machine is the e_machine of what the toolchain makes.
	Machine elf.Machine
	// Prefix is prepended to each tool's name: "" for the host's.
	Prefix string
}

// Host is the machine's own gcc and binutils: what its gcc makes, which is not the test's own
// architecture when the test runs under user emulation (an arm64 test binary under
// qemu-aarch64-static on an x86-64 machine).
var Host = hostToolchain()

// hostToolchain asks gcc which machine it targets (-dumpmachine), and takes the test's own
// architecture where gcc does not answer.
func hostToolchain() Toolchain {
	arch := runtime.GOARCH
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "gcc", "-dumpmachine").Output(); err == nil {
		switch m := strings.TrimSpace(string(out)); {
		case strings.HasPrefix(m, "x86_64-"):
			arch = "amd64"
		case strings.HasPrefix(m, "aarch64-"):
			arch = "arm64"
		}
	}
	return Toolchain{Arch: arch, Machine: machineOf[arch]}
}

// ARM64 is the AArch64 cross toolchain (Debian's gcc-aarch64-linux-gnu and
// g++-aarch64-linux-gnu).
var ARM64 = Toolchain{Arch: "arm64", Machine: elf.EM_AARCH64, Prefix: "aarch64-linux-gnu-"}

var machineOf = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "riscv64": elf.EM_RISCV}

// Tool is the name of one of the toolchain's tools (gcc, objcopy, strip, readelf...).
func (tc Toolchain) Tool(name string) string { return tc.Prefix + name }

// Run runs one of the toolchain's tools, failing the test with its output when it fails.
func (tc Toolchain) Run(tb testing.TB, tool string, args ...string) []byte {
	tb.Helper()
	return Run(tb, tc.Tool(tool), args...)
}

// CC is CC with the toolchain's gcc.
func (tc Toolchain) CC(tb testing.TB, dir, name, src string, args ...string) string {
	tb.Helper()
	Need(tb, tc.Tool("gcc"))
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(dir, name)
	Run(tb, tc.Tool("gcc"), append([]string{"-o", out, c}, args...)...)
	return out
}

// Toolchains returns the host's toolchain and, on another machine than arm64, the arm64 cross
// toolchain when its gcc, objcopy and strip are installed. Without them the arm64 cases are
// left out with a note, unless CI is set: a pipeline (.ci/install-deps installs them) fails.
func Toolchains(tb testing.TB) []Toolchain {
	tb.Helper()
	out := []Toolchain{Host}
	if Host.Arch == ARM64.Arch {
		return out
	}
	for _, tool := range []string{"gcc", "objcopy", "strip"} {
		if _, err := exec.LookPath(ARM64.Tool(tool)); err != nil {
			if os.Getenv("CI") != "" {
				tb.Fatalf("%s is required (bash .ci/install-deps installs it): %v", ARM64.Tool(tool), err)
			}
			tb.Logf("arm64 cases left out: %s not in PATH (apt-get install gcc-aarch64-linux-gnu)", ARM64.Tool(tool))
			return out
		}
	}
	return append(out, ARM64)
}

// Machine returns the e_machine of the ELF file at path.
func Machine(tb testing.TB, path string) elf.Machine {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	return f.Machine
}
