package testsupport

import (
	"debug/elf"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestFreePort(t *testing.T) {
	seen := map[int]bool{}
	for range 5 {
		p := FreePort(t)
		if p <= 0 || p > 65535 {
			t.Fatalf("FreePort = %d", p)
		}
		seen[p] = true
		var lc net.ListenConfig
		l, err := lc.Listen(t.Context(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("FreePort %d is not bindable: %v", p, err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("close listener on %d: %v", p, err)
		}
	}
	if len(seen) < 2 {
		t.Fatalf("FreePort returned the same port 5 times: %v", seen)
	}
}

func TestCompileC(t *testing.T) {
	t.Parallel()
	bin := CompileC(t, "#include <stdio.h>\nint main(void){puts(\"fixture\");return 0;}\n", "-g", "-O2", "-Wl,--build-id")
	out, err := exec.CommandContext(t.Context(), bin).Output()
	if err != nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	if string(out) != "fixture\n" {
		t.Fatalf("output %q", out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("open ELF: %v", err)
	}
	defer f.Close()
	if f.Section(".debug_info") == nil {
		t.Fatalf("-g did not reach gcc: no .debug_info")
	}
	if _, err := gnuBuildID(f); err != nil {
		t.Fatalf("-Wl,--build-id did not reach the linker: %v", err)
	}
	// Linker inputs after the source work (-lm resolves sqrt).
	CompileC(t, "#include <math.h>\nvolatile double x = 2;\nint main(void){return (int)sqrt(x);}\n", "-lm")
}

func TestShellQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"--port", "--port"},
		{"", "''"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"/tmp/x/db.sqlite", "/tmp/x/db.sqlite"},
	}
	for _, tt := range tests {
		if got := shellQuote(tt.in); got != tt.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\nc\n", 5, "a\nb\nc"},
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 1, "c"},
	}
	for _, tt := range tests {
		if got := lastLines([]byte(tt.in), tt.n); got != tt.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// fatalRecorder captures Fatalf and ends the calling goroutine like the
// real testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// A missing binary fails the test with the command that installs it.
func TestMissingBinaryNamesInstallCommand(t *testing.T) {
	empty := t.TempDir()
	tests := []struct {
		name  string
		env   map[string]string
		start func(testing.TB)
		want  []string
	}{
		{"redis", nil, func(tb testing.TB) { StartRedis(tb) }, []string{"redis-server", "apt-get install -y redis-server", ".ci/install-deps"}},
		{"debuginfod", nil, func(tb testing.TB) { StartDebuginfod(tb) }, []string{"debuginfod", "apt-get install -y debuginfod"}},
		{"gcc", nil, func(tb testing.TB) { CompileC(tb, "int main(void){return 0;}") }, []string{"apt-get install -y gcc"}},
		{"minio from PATH", map[string]string{"PROFSYM_TOOLS": empty}, func(tb testing.TB) { StartMinIO(tb) }, []string{"minio", ".ci/install-deps", ".ci/pins"}},
		{"minio from PROFSYM_MINIO", map[string]string{"PROFSYM_MINIO": filepath.Join(empty, "nope")}, func(tb testing.TB) { StartMinIO(tb) }, []string{"PROFSYM_MINIO=", ".ci/install-deps"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PATH", empty)
			t.Setenv("PROFSYM_MINIO", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			rec := &fatalRecorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				tt.start(rec)
			}()
			<-done
			if rec.msg == "" {
				t.Fatalf("no Fatalf with an empty PATH")
			}
			for _, w := range tt.want {
				if !strings.Contains(rec.msg, w) {
					t.Errorf("message %q lacks %q", rec.msg, w)
				}
			}
		})
	}
	if _, err := os.Stat(empty); err != nil {
		t.Fatal(err)
	}
}
