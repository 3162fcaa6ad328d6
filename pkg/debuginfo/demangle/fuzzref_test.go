package demangle

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// FuzzNameReference holds Name to the references on fuzzed names: where GNU c++filt and
// llvm-cxxfilt 14 demangle a name and print the same (after classify's spelling
// normalizations), Name must too.
// The two tools run once per fuzzing process and demangle a name a line, so a name costs two
// pipe round trips (a few tens of microseconds), not two process starts. Inputs the tools would
// split into several tokens (spaces, punctuation) and names past the length the bounds let
// through unparsed are not compared. It is skipped where either tool is missing.
//
// It runs only with DEMANGLE_FUZZ_REFERENCE=1 (go test -fuzz FuzzNameReference): it finds
// contrived names on which the module's parser and the references part within seconds (an
// "sr" qualifier inside a type's template arguments, _ZN1A2A0EZ9A00000000Isr9A00000000IEEEN8A0000000IS1_EE),
// which would stop `make fuzz` and, kept under testdata/fuzz, fail every later test run. The
// names compilers emit are held to the references by TestDifferential and bench/demangle.
func FuzzNameReference(f *testing.F) {
	if os.Getenv("DEMANGLE_FUZZ_REFERENCE") != "1" {
		f.Skip("DEMANGLE_FUZZ_REFERENCE=1 not set")
	}
	for _, s := range []string{
		"_Z3foov", "_ZN1AIiE1fIcEEvT_", "_Z1fIXadL_Z1gvEEEvv",
		"_ZSt11__addressofIZSt9call_onceIZ4workRSt6vectorIiSaIiEEEUlvE_JEEvRSt9once_flagOT_DpOT0_EUlvE_EPS8_RS8_",
		"_ZNSt9once_flag18_Prepare_executionC1IZSt9call_onceIZ4workRSt6vectorIiSaIiEEEUlvE_JEEvRS_OT_DpOT0_EUlvE_EERS9_",
		"_ZN4llvm10checkedAddIiEENSt9enable_ifIXsr3std9is_signedIT_EE5valueENS_8OptionalIS2_EEE4typeES2_S2_",
	} {
		f.Add(s)
	}
	gnu, llvm := startReference(f, "c++filt"), startReference(f, "llvm-cxxfilt-14")
	decisions := loadDecisions(f)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > shortName || !isToken(s) || kind(s) == plain {
			return
		}
		ours := Name(s)
		g, l := gnu.demangle(t, s), llvm.demangle(t, s)
		if g == s {
			return // not a name the references demangle: what we make of it is not held to them
		}
		if class, ok := classify(s, ours, g, l, decisions); !ok && class == classDisagreeRefOK {
			t.Fatalf("%s\n  ours %s\n  gnu  %s\n  llvm %s", s, ours, g, l)
		}
	})
}

// isToken says whether s is one token of the characters of a mangled name, clone suffixes
// (".cold") left out: a "." the references read as part of an identifier (_Z3.00) is a suffix
// to us, on purpose.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// A reference is a demangler process reading names on stdin, one a line.
type reference struct {
	mu  sync.Mutex
	in  io.Writer
	out *bufio.Reader
}

func startReference(f *testing.F, tool string) *reference {
	f.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		f.Skipf("%s not installed", tool)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	if strings.HasPrefix(tool, "llvm-cxxfilt") {
		out, err := exec.CommandContext(ctx, path, "--version").Output()
		if err != nil || !strings.Contains(string(out), "version 14.") {
			f.Skipf("%s is not LLVM 14's", path)
		}
	}
	// GNU c++filt buffers its output on a pipe unless told otherwise.
	argv := []string{path}
	if stdbuf, err := exec.LookPath("stdbuf"); err == nil {
		argv = []string{stdbuf, "-oL", path}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	in, err := cmd.StdinPipe()
	if err != nil {
		f.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	return &reference{in: in, out: bufio.NewReaderSize(out, 1<<16)}
}

func (r *reference) demangle(t *testing.T, name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := fmt.Fprintln(r.in, name); err != nil {
		t.Fatalf("write to reference: %v", err)
	}
	line, err := r.out.ReadString('\n')
	if err != nil {
		t.Fatalf("read from reference: %v", err)
	}
	return strings.TrimSuffix(line, "\n")
}
