package symbolizecmd

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const program = `#include <stdio.h>
static inline __attribute__((always_inline)) int leaf(int x) { return x * 3 + 1; }
static inline __attribute__((always_inline)) int mid(int x) { return leaf(x) + leaf(x + 1); }
__attribute__((noinline)) int top(int x) { return mid(x) * 2; }
__attribute__((noinline)) int other(int x) { return top(x) - 7; }
int main(int c, char **v) { (void)v; printf("%d\n", other(c)); return 0; }
`

// build compiles the test program and returns its path and addresses inside its functions.
func build(t *testing.T) (string, []string) {
	t.Helper()
	for _, tool := range []string{"gcc", "llvm-symbolizer"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (apt-get install -y gcc llvm): %v", tool, err)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.c")
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(src, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	// DWARF 4: with DWARF 5 gcc writes some DW_AT_decl_file values as DW_FORM_implicit_const,
	// which llvm-symbolizer 14 cannot read (it prints an empty StartFileName where we print the
	// file); TestLLVMQuirks pins that difference.
	if out, err := exec.CommandContext(t.Context(), "gcc", "-O2", "-gdwarf-4", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Size == 0 {
			continue
		}
		for off := uint64(0); off < s.Size; off += 3 {
			addrs = append(addrs, fmt.Sprintf("0x%x", s.Value+off))
		}
	}
	// Decimal, unknown and unparsable input as llvm-symbolizer reads them.
	addrs = append(addrs, "4096", "0x0", "zzz")
	return bin, addrs
}

// TestMatchesLLVMSymbolizer runs the command and llvm-symbolizer 14 on the same addresses in
// every output style and input mode, and compares them byte for byte.
func TestMatchesLLVMSymbolizer(t *testing.T) {
	bin, addrs := build(t)
	tests := []struct {
		name    string
		style   string
		inlines bool
		stdin   bool
		llvm    []string
	}{
		{"LLVM args", "LLVM", true, false, nil},
		{"LLVM stdin", "LLVM", true, true, nil},
		{"JSON args", "JSON", true, false, []string{"--output-style=JSON"}},
		{"JSON stdin", "JSON", true, true, []string{"--output-style=JSON"}},
		{"no inlines", "LLVM", false, true, []string{"--no-inlines"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--obj=" + bin}, tt.llvm...)
			c := &Cmd{Obj: bin, OutputStyle: tt.style, Inlines: tt.inlines}
			var in string
			if tt.stdin {
				in = strings.Join(addrs, "\n") + "\n"
			} else {
				// "zzz" as an argument makes llvm-symbolizer stop; keep arguments numeric.
				c.Addresses = addrs[:len(addrs)-1]
				args = append(args, c.Addresses...)
			}
			cmd := exec.CommandContext(t.Context(), "llvm-symbolizer", args...)
			cmd.Stdin = strings.NewReader(in)
			want, err := cmd.Output()
			if err != nil {
				t.Fatalf("llvm-symbolizer: %v", err)
			}
			var got bytes.Buffer
			if err := c.run(strings.NewReader(in), &got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
				for i := range max(len(gl), len(wl)) {
					var g, w string
					if i < len(gl) {
						g = gl[i]
					}
					if i < len(wl) {
						w = wl[i]
					}
					if g != w {
						t.Fatalf("line %d differs:\n ours: %s\n llvm: %s", i+1, g, w)
					}
				}
			}
		})
	}
}

// TestLLVMQuirks pins the two places where llvm-symbolizer 14 is wrong and we deliberately
// differ: past the last function it extends the zero-sized "_end" symbol over the whole address
// space, and it cannot read DW_FORM_implicit_const declaration files (gcc's DWARF 5).
func TestLLVMQuirks(t *testing.T) {
	bin, _ := build(t)
	c := &Cmd{Obj: bin, OutputStyle: "JSON", Inlines: true, Addresses: []string{"0xffffffffffff"}}
	var got bytes.Buffer
	if err := c.run(strings.NewReader(""), &got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.String(), `"FunctionName":""`) {
		t.Errorf("an address past every function must resolve to nothing, got %s", got.String())
	}

	dir := t.TempDir()
	src, bin5 := filepath.Join(dir, "p.c"), filepath.Join(dir, "p5")
	if err := os.WriteFile(src, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), "gcc", "-O2", "-gdwarf-5", "-o", bin5, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := elf.Open(bin5)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := f.Symbols()
	f.Close()
	var other string
	for _, s := range syms {
		if s.Name == "other" {
			other = fmt.Sprintf("0x%x", s.Value)
		}
	}
	c = &Cmd{Obj: bin5, OutputStyle: "JSON", Inlines: true, Addresses: []string{other}}
	got.Reset()
	if err := c.run(strings.NewReader(""), &got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.String(), `"StartFileName":"`+src+`"`) {
		t.Errorf("want the declaration file %s for other(), got %s", src, got.String())
	}
}

func TestParseAddress(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0x1160", 0x1160, true},
		{"0X1160", 0x1160, true},
		{"4448", 4448, true},
		{"0x", 0, false},
		{"-1", 0, false},
		{"0x1ffffffffffffffff", 0, false},
		{"main", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseAddress(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("ParseAddress(%q) = %#x, %v; want %#x, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	c := &Cmd{Obj: filepath.Join(t.TempDir(), "missing"), OutputStyle: "LLVM", Inlines: true, Addresses: []string{"0x1"}}
	var out bytes.Buffer
	err := c.run(strings.NewReader(""), &out)
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("err = %v, want a missing-file error", err)
	}
}

// TestInteractive drives the command the way go tool pprof drives llvm-symbolizer: one
// address, then wait for its answer before sending the next.
func TestInteractive(t *testing.T) {
	bin, addrs := build(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &Cmd{Obj: bin, OutputStyle: "JSON", Inlines: true}
	done := make(chan error, 1)
	go func() {
		err := c.run(inR, outW)
		// Closing a pipe's writer never fails; it ends the reader's stream.
		_ = outW.Close()
		done <- err
	}()
	lines := bufio.NewReader(outR)
	for _, a := range addrs[:5] {
		if _, err := io.WriteString(inW, a+"\n"); err != nil {
			t.Fatal(err)
		}
		answer := make(chan string, 1)
		go func() { l, _ := lines.ReadString('\n'); answer <- l }()
		select {
		case l := <-answer:
			if !strings.Contains(l, `"Address":"`+a+`"`) {
				t.Fatalf("answer to %s: %s", a, l)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer to %s within 10 s: output is not flushed per request", a)
		}
	}
	if err := inW.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestAppendJSONString: every byte value, at every position of strings long enough for the
// 8-byte steps and their tail, is quoted as encoding/json quotes it (without HTML escaping).
func TestAppendJSONString(t *testing.T) {
	want := func(s string) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
	for n := 1; n <= 19; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				s := []byte(strings.Repeat("a/b_", 5)[:n])
				s[pos] = byte(c)
				if got, w := string(appendJSONString(nil, string(s))), want(string(s)); got != w {
					t.Fatalf("byte %#x at %d of %d: %s, want %s", c, pos, n, got, w)
				}
			}
		}
	}
}

// TestSystemDebugDir: a stripped distribution library is answered from the debug file its
// -dbg package installed under /usr/lib/debug without being told where, as llvm-symbolizer
// and GDB do; with an empty --debug-dir the command says that only a symbol table answers and how
// to give it the debug file, instead of printing ?? without a word.
func TestSystemDebugDir(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(libc)
	if err != nil {
		t.Fatalf("open Debian's libc: %v", err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var malloc uint64
	for _, s := range syms {
		if s.Name == "malloc" && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			malloc = s.Value
		}
	}
	if malloc == 0 {
		t.Fatal("libc exports no malloc")
	}
	if f.Section(".debug_info") != nil {
		t.Fatalf("%s carries DWARF: it should be Debian's stripped library", libc)
	}
	addr := fmt.Sprintf("0x%x", malloc+4)
	cases := []struct {
		name      string
		dirs      []string
		debugFile string
		wantLine  string // a substring of the file:line line
		wantWarn  string // a substring of stderr; empty means none
	}{
		{"default", nil, "", "malloc.c:", ""},
		{"given", []string{"/usr/lib/debug"}, "", "malloc.c:", ""},
		{"none", []string{""}, "", "??:0:0", "give the debug file with --debug-file or its directory with --debug-dir"},
		{"a debug file without DWARF", nil, libc, "??:0:0", "nor its debug file " + libc + " has DWARF"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, stderr bytes.Buffer
			c := &Cmd{Obj: libc, DebugDir: tc.dirs, DebugFile: tc.debugFile, OutputStyle: "LLVM", Inlines: true, NoCache: true, Addresses: []string{addr}, Stderr: &stderr}
			if err := c.run(strings.NewReader(""), &out); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(out.String(), "\n")
			if len(lines) < 2 || !strings.Contains(lines[len(lines)-3], tc.wantLine) {
				t.Errorf("answer for malloc+4:\n%s\nwant a last frame at %q (apt-get install libc6-dbg; .ci/install-deps does)", out.String(), tc.wantLine)
			}
			if tc.wantWarn == "" && stderr.Len() > 0 {
				t.Errorf("warnings: %s", stderr.String())
			}
			if tc.wantWarn != "" && !strings.Contains(stderr.String(), tc.wantWarn) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tc.wantWarn)
			}
		})
	}
}
