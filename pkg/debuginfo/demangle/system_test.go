package demangle

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestSystemLibraryNames demangles every mangled name in the dynamic symbol tables of large
// installed C++ libraries and compares with llvm-cxxfilt (LLVM 14's demangler, the one
// llvm-symbolizer uses). It reports the agreement and the differing names; the known
// classes of difference are the ones cases.tsv records.
func TestSystemLibraryNames(t *testing.T) {
	cxxfilt, err := exec.LookPath("llvm-cxxfilt")
	if err != nil {
		t.Skip("llvm-cxxfilt not installed")
	}
	if testing.Short() {
		t.Skip("short")
	}
	for _, path := range []string{
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
		"/usr/lib/llvm-14/lib/libLLVM-14.so.1",
	} {
		f, err := elf.Open(path)
		if err != nil {
			continue
		}
		syms, err := f.DynamicSymbols()
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		set := map[string]bool{}
		for _, s := range syms {
			if kind(s.Name) != plain {
				set[s.Name] = true
			}
		}
		names := make([]string, 0, len(set))
		for n := range set {
			names = append(names, n)
		}
		sort.Strings(names)
		cmd := exec.CommandContext(t.Context(), cxxfilt)
		cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("llvm-cxxfilt: %v", err)
		}
		want := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(want) != len(names) {
			t.Fatalf("llvm-cxxfilt gave %d lines for %d names", len(want), len(names))
		}
		same, llvmFailed := 0, 0
		var diffs bytes.Buffer
		for i, n := range names {
			got := Name(n)
			if got == want[i] {
				same++
				continue
			}
			if want[i] == n {
				// LLVM 14 could not demangle it (transactional-memory clones, some
				// conversion operators); a demangled name is the better answer.
				llvmFailed++
			}
			diffs.WriteString(n + "\n  ours " + got + "\n  llvm " + want[i] + "\n")
		}
		rate := float64(same) / float64(len(names)-llvmFailed)
		t.Logf("%s: %d mangled names, %d as LLVM 14 prints them; %d LLVM 14 cannot demangle; %.3f%% agreement on the rest",
			filepath.Base(path), len(names), same, llvmFailed, 100*rate)
		if dir := os.Getenv("DEMANGLE_DIFFS"); dir != "" {
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)+".diff"), diffs.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if rate < 0.995 {
			t.Errorf("agreement %.3f%% below 99.5%%", 100*rate)
		}
	}
}
