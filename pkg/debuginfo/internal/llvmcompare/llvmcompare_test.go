package llvmcompare

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseJSON(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Result
		wantErr string
	}{
		{
			name: "inline chain and unknown",
			in: `{"Address":"0x1139","ModuleName":"m","Symbol":[{"Column":3,"Discriminator":0,"FileName":"/a.c","FunctionName":"leaf","Line":5,"StartFileName":"","StartLine":4},{"Column":0,"FileName":"/a.c","FunctionName":"main","Line":9,"StartLine":8}]}
{"Address":"0x0","ModuleName":"m","Symbol":[{"Column":0,"FileName":"","FunctionName":"","Line":0,"StartLine":0}]}
{"Address":"0x10","ModuleName":"m","Symbol":[{"Column":0,"FileName":"??","FunctionName":"??","Line":0,"StartLine":0}]}
`,
			want: []Result{
				{Address: 0x1139, Frames: []Frame{{Function: "leaf", File: "/a.c", Line: 5, Column: 3}, {Function: "main", File: "/a.c", Line: 9}}},
				{Address: 0},
				{Address: 0x10},
			},
		},
		{name: "error line", in: `{"Error":{"Message":"unable to parse arguments: zzz"},"ModuleName":"m"}`, wantErr: "symbolizer error"},
		{name: "not JSON", in: "garbage\n", wantErr: "JSON line 1"},
		{name: "bad address", in: `{"Address":"0xzz","Symbol":[]}`, wantErr: "address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseJSON(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseAddr2line(t *testing.T) {
	out := "0x0000000000001139\ninner\n/a.c:5 (discriminator 2)\nmain\n/a.c:9\n0x0000000000000040\n??\n??:0\n"
	got, err := parseAddr2line([]byte(out), 2)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]Frame{{{Function: "inner", File: "/a.c", Line: 5}, {Function: "main", File: "/a.c", Line: 9}}, nil}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := parseAddr2line([]byte(out), 3); err == nil {
		t.Fatal("want an error for a missing answer")
	}
}

func TestCompare(t *testing.T) {
	f := func(fn, file string, line uint32) Frame { return Frame{Function: fn, File: file, Line: line} }
	addrs := []uint64{1, 2, 3, 4, 5, 6}
	ref := [][]Frame{
		{f("a", "/x.c", 1), f("main", "/x.c", 9)},
		{f("a", "/x.c", 1)},
		{f("f.cold", "/x.c", 3)},
		{f("g", "x.c", 0)}, // STT_FILE name, no line: still held
		nil,
		{f("h", "/x.c", 7)},
	}
	ours := [][]Frame{
		{f("a", "/x.c", 1), f("main", "/x.c", 9)},
		{f("a", "/y.c", 1)},
		{f("f", "/x.c", 3)},
		{f("g", "", 0)},
		nil,
		{f("h", "/x.c", 8)},
	}
	rep, err := Compare(addrs, ours, ref, ModeFull, Known...)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Addresses != 6 || rep.ChainAgree != 5 || rep.ChainKnown != 1 {
		t.Errorf("chains: %+v", rep)
	}
	if rep.LineCompared != 5 || rep.LineAgree != 2 {
		t.Errorf("lines: compared %d agree %d, want 5 and 2", rep.LineCompared, rep.LineAgree)
	}
	if n := len(rep.Unexplained()); n != 3 {
		t.Errorf("unexplained = %d, want 3: %+v", n, rep.Unexplained())
	}
	if _, err := Compare(addrs[:1], ours, ref, ModeFull); err == nil {
		t.Error("want an error for mismatched lengths")
	}
	sym, _ := Compare(addrs, ours, ref, ModeSymbols, Known...)
	if sym.LineCompared != 0 || sym.ChainAgree+sym.ChainKnown != 6 {
		t.Errorf("symbols mode: %+v", sym)
	}
}

func TestKnown(t *testing.T) {
	tests := []struct {
		name       string
		ours, ref  []Frame
		wantReason string
	}{
		{"C cold part", []Frame{{Function: "vec_push"}}, []Frame{{Function: "vec_push.cold"}}, ReasonCloneSuffix},
		{"C++ constprop cold", []Frame{{Function: "in"}, {Function: "f(int)"}}, []Frame{{Function: "in"}, {Function: "f(int) (.constprop.0.cold)"}}, ReasonCloneSuffix},
		{"clone suffix on an inner frame is not a symbol-table name", []Frame{{Function: "f"}, {Function: "m"}}, []Frame{{Function: "f.cold"}, {Function: "m"}}, ""},
		{
			"lambda T_ scope",
			[]Frame{{Function: "It std::transform<It, Out, conv<int>()::'lambda'(int)>(It, It, Out)", LinkageName: "_ZSt9transformIUliE_E"}},
			[]Frame{{Function: "It std::transform<It, Out, conv<int>()::'lambda'(int)>(int, int, Out)"}},
			ReasonLambdaTemplateParam,
		},
		{"params differ without a lambda", []Frame{{Function: "f(int)", LinkageName: "_Z1fi"}}, []Frame{{Function: "f(long)"}}, ""},
		{"undemangled", []Frame{{Function: "std::swap<int>(int&, int&)", LinkageName: "_ZSt4swapIiEvRT_S1_"}}, []Frame{{Function: "_ZSt4swapIiEvRT_S1_"}}, ReasonLLVMUndemangled},
		{"rust legacy", []Frame{{Function: "<T as core::fmt::Display>::fmt::h0123456789abcdef"}}, []Frame{{Function: "_$LT$T$u20$as$u20$core..fmt..Display$GT$::fmt::h0123456789abcdef"}}, ReasonRustLegacy},
		{"rust legacy with promoted-local suffix", []Frame{{Function: "std::rt::lang_start::{{closure}}::h0123456789abcdef"}}, []Frame{{Function: "std::rt::lang_start::_$u7b$$u7b$closure$u7d$$u7d$::h0123456789abcdef (.llvm.12997989893297118871)"}}, ReasonRustLegacy},
		{"rust legacy closure", []Frame{{Function: "main::f::{{closure}}::h0123456789abcdef"}}, []Frame{{Function: "main::f::_$u7b$$u7b$closure$u7d$$u7d$::h0123456789abcdef"}}, ReasonRustLegacy},
		{"go abi0", []Frame{{Function: "internal/cpu.cpuid"}}, []Frame{{Function: "internal/cpu.cpuid.abi0"}}, ReasonCloneSuffix},
		{"llvm promoted local", []Frame{{Function: "f"}}, []Frame{{Function: "f (.llvm.13199646800437872091)"}}, ReasonCloneSuffix},
		{"rust legacy plain path", []Frame{{Function: "std::rt::lang_start"}}, []Frame{{Function: "std::rt::lang_start::h0123456789abcdef"}}, ReasonRustLegacy},
		{"go hashed symbol", []Frame{{Function: "type:.eq.k8s.io/api/core/v1.Pod"}}, []Frame{{Function: "type:.X3fAUo7p"}}, ReasonGoHashedSymbol},
		{"go hashed symbol only outermost", []Frame{{Function: "type:.eq.a.T"}, {Function: "m"}}, []Frame{{Function: "type:.X3fAUo7p"}, {Function: "m"}}, ""},
		{"go hashed symbol of another function", []Frame{{Function: "main.f"}}, []Frame{{Function: "type:.X3fAUo7p"}}, ""},
		{"go middle dot", []Frame{{Function: "mime/multipart.(*writerOnly·1).Write"}, {Function: "m"}}, []Frame{{Function: "mime/multipart.(*writerOnly.1).Write"}, {Function: "m"}}, ReasonGoMiddleDot},
		{"go middle dot elsewhere", []Frame{{Function: "a·1"}}, []Frame{{Function: "b.1"}}, ""},
		{"go section symbol", []Frame{{Function: "crosscall1"}}, []Frame{{Function: "runtime/cgo(.text)"}}, ReasonGoSectionSymbol},
		{"go section symbol only outermost", []Frame{{Function: "f"}, {Function: "m"}}, []Frame{{Function: "runtime/cgo(.text)"}, {Function: "m"}}, ""},
		{"go section symbol where ours has none", []Frame{{}}, []Frame{{Function: "net(.text)"}}, ""},
		{"different functions", []Frame{{Function: "a"}}, []Frame{{Function: "b"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Diff{Kind: KindChain, Ours: tt.ours, Ref: tt.ref}
			got := classify(d, Known)
			if got != tt.wantReason {
				t.Fatalf("reason = %q, want %q", got, tt.wantReason)
			}
		})
	}
}

func TestSampleDeterministic(t *testing.T) {
	funcs := []Func{{Name: "a", Addr: 0x1000, Size: 0x40}, {Name: "b", Addr: 0x2000, Size: 1}, {Name: "c", Addr: 0x3000, Size: 0x100}}
	a := Sample(funcs, PerFunc(20, len(funcs)), 15, 7)
	b := Sample(funcs, PerFunc(20, len(funcs)), 15, 7)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different samples")
	}
	if len(a) != 15 {
		t.Fatalf("len = %d, want 15", len(a))
	}
	for i, x := range a {
		in := false
		for _, f := range funcs {
			in = in || (x >= f.Addr && x < f.Addr+f.Size)
		}
		if !in || (i > 0 && a[i-1] >= x) {
			t.Fatalf("address 0x%x out of functions or out of order", x)
		}
	}
}

// TestLLVMAgainstItself runs the whole harness on a compiled program with llvm-symbolizer on
// both sides: every address must agree.
func TestLLVMAgainstItself(t *testing.T) {
	for _, tool := range []string{"llvm-symbolizer", "gcc", "addr2line"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	bin := filepath.Join(dir, "p")
	prog := `static inline __attribute__((always_inline)) int sq(int x) { return x * x; }
static inline __attribute__((always_inline)) int f(int x) { return sq(x) + 1; }
__attribute__((noinline)) int g(int x) { return f(x) * 3; }
int main(int argc, char **argv) { (void)argv; return g(argc); }
`
	if err := writeFile(src, prog); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), "gcc", "-O2", "-g", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	funcs, err := FunctionSymbols(bin)
	if err != nil {
		t.Fatal(err)
	}
	addrs := Sample(funcs, 20, 0, 1)
	ctx := context.Background()
	a, err := Tool{}.Symbolize(ctx, bin, addrs)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Compare(addrs, a, a, ModeFull)
	if err != nil {
		t.Fatal(err)
	}
	if rep.RawChainRate() != 1 || rep.RawLineRate() != 1 || rep.LineCompared == 0 {
		t.Fatalf("llvm against itself: %+v", rep)
	}
	third, err := AddrToLine(ctx, bin, addrs)
	if err != nil {
		t.Fatal(err)
	}
	if len(third) != len(addrs) {
		t.Fatalf("addr2line: %d answers for %d addresses", len(third), len(addrs))
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
