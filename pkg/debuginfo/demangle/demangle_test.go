package demangle

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

type tableCase struct {
	symbol, llvm, want, reason string
}

// loadCases reads testdata/cases.tsv, which testdata/gen.sh makes from compiled programs
// and LLVM 14's demangler.
func loadCases(t testing.TB) []tableCase {
	t.Helper()
	f, err := os.Open("testdata/cases.tsv")
	if err != nil {
		t.Fatalf("open cases: %v", err)
	}
	defer f.Close()
	var cases []tableCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		cols := strings.Split(text, "\t")
		if len(cols) != 4 {
			t.Fatalf("cases.tsv:%d: %d columns, want 4", line, len(cols))
		}
		c := tableCase{symbol: cols[0], llvm: cols[1], want: cols[2], reason: cols[3]}
		if c.want == "" {
			c.want = c.llvm
		} else if c.reason == "" {
			t.Fatalf("cases.tsv:%d: an expectation that differs from LLVM needs a reason", line)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read cases: %v", err)
	}
	if len(cases) < 300 {
		t.Fatalf("only %d cases", len(cases))
	}
	return cases
}

func TestTable(t *testing.T) {
	cases := loadCases(t)
	sameAsLLVM, exceptions := 0, map[string]int{}
	for _, c := range cases {
		got := Name(c.symbol)
		if got != c.want {
			t.Errorf("Name(%q)\n got  %q\n want %q", c.symbol, got, c.want)
		}
		if got == c.llvm {
			sameAsLLVM++
		} else {
			exceptions[c.reason]++
		}
	}
	t.Logf("%d cases: %d (%.1f%%) as LLVM 14 prints them", len(cases), sameAsLLVM, 100*float64(sameAsLLVM)/float64(len(cases)))
	for r, n := range exceptions {
		t.Logf("  %d deliberate differences: %s", n, r)
	}
}

func TestPlainNamesUntouched(t *testing.T) {
	for _, s := range []string{"", "_", "main", "_start", "__libc_start_main", "_Zfoo", "__", "_R", "__x_Z", "memcpy@GLIBC_2.14"} {
		if got := Name(s); got != s {
			t.Errorf("Name(%q) = %q, want it unchanged", s, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Name("__libc_start_main") }); n != 0 {
		t.Errorf("plain name: %v allocations, want 0", n)
	}
}

func TestLLVMAngles(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a<b<c>>", "a<b<c> >"},
		{"a<b<c<d>>>", "a<b<c<d> > >"},
		{"operator>>(int)", "operator>>(int)"},
		{"operator>>=(int)", "operator>>=(int)"},
		{"f<(1) >> (2)>", "f<(1) >> (2)>"},
		{"x", "x"},
	} {
		if got := llvmAngles(c.in); got != c.want {
			t.Errorf("llvmAngles(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzName: Name never panics (a panic inside the module is recovered as "not demangled",
// anything else fails here) and its output stays bounded.
func FuzzName(f *testing.F) {
	for _, s := range []string{
		"_Z3foov", "_ZN1AIiE1fIcEEvT_", "_RNvCs1234_7mycrate3foo", "_ZN3std2rt10lang_start17h0123456789abcdefE.llvm.1", "_Z1fIXadL_Z1gvEEEvv",
		"_ZN4llvm10checkedAddIiEENSt9enable_ifIXsr3std9is_signedIT_EE5valueENS_8OptionalIS2_EEE4typeES2_S2_",
		"_ZN3lib8internal6applyNIXadL_ZNS0_3incEiEELi3EEEii",
		"_ZZNSt9once_flag18_Prepare_executionC4IZSt9call_onceIZ4mainEUlvE_JEEvRS_OT_DpOT0_EUlvE_EERS5_ENUlvE_4_FUNEv",
		"_RNvNCNKNvNtNtCsjrHSEGnQ3l9_3std2io5stdio14OUTPUT_CAPTURE0023___RUST_STD_INTERNAL_VAL",
		"_RINvC3foo3barNcNvC3foo3qux0E",
		"_Z1fPPPPPPPPPPPPPPPPi",
		"_ZSt11__addressofIZSt9call_onceIZ4workRSt6vectorIiSaIiEEEUlvE_JEEvRSt9once_flagOT_DpOT0_EUlvE_EPS8_RS8_",
		"_ZGRZ1fvE1x_",
		// C++20: a coroutine frame's source name with a '.', a class-type template argument
		// from a string literal, a new-expression in a decltype.
		"_ZN5probe7counterEPZNS_7counterEiE25_ZN5probe7counterEi.Frame.actor",
		"_ZN5probe3tagIXtlNS_5fixedILm6EEEtlA6_cLc104ELc101ELc108ELc108ELc111EEEEE4nameEv",
		"_ZSt12construct_atIiJRKiEEDTgsnwcvPvLi0E_T_pispcl7declvalIT0_EEEEPS3_DpOS4_",
	} {
		f.Add(s)
	}
	// Many repetitions of a local name's template parameter: the corrections' probes and
	// walks are bounded (maxMarkerProbeBytes, maxNodes).
	f.Add("_Z1hIZ1fIiEvT_E1xEv" + strings.Repeat("PT_", 3000))
	f.Add("_Z1hIZ1fIiEvT_E1xEv" + strings.Repeat("PS1_", 8000))
	f.Fuzz(func(t *testing.T, s string) {
		out := Name(s)
		if len(out) > maxOutput+len(s)+3 {
			t.Fatalf("Name(%q) is %d bytes long", s, len(out))
		}
	})
}

// BenchmarkName runs over the table's names by scheme; the ns/op figures are per name.
func BenchmarkName(b *testing.B) {
	groups := map[string][]string{}
	for _, c := range loadCases(b) {
		k := "plain"
		switch kind(c.symbol) {
		case itanium:
			k = "itanium"
			if _, _, _, ok := legacyRust(c.symbol); ok {
				k = "rust-legacy"
			}
		case rustV0Name:
			k = "rust-v0"
		}
		groups[k] = append(groups[k], c.symbol)
	}
	for _, k := range []string{"itanium", "rust-legacy", "rust-v0"} {
		names := groups[k]
		b.Run(k, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_ = Name(names[i%len(names)])
			}
		})
	}
}

func BenchmarkNamePlain(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = Name("__libc_start_main")
	}
}

// base62 encodes n as a v0 <base-62-number>.
func base62(n int) string {
	if n == 0 {
		return "_"
	}
	n--
	const digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var s []byte
	for {
		s = append([]byte{digits[n%62]}, s...)
		n /= 62
		if n == 0 {
			break
		}
	}
	return string(s) + "_"
}

// TestHostileNamesBounded builds names whose expansion doubles with every level (v0 tuple
// backrefs, Itanium substitutions): they must come back bounded in length, the v0 one
// refused by its expansion count.
func TestHostileNamesBounded(t *testing.T) {
	// _R I Nv C1a 1f <type> E, where each type level is a tuple of two backrefs to the one
	// before it.
	v0 := "INvC1a1f"
	prev := len(v0)
	v0 += "l"
	for i := 0; i < 40; i++ {
		cur := len(v0)
		v0 += "TB" + base62(prev) + "B" + base62(prev) + "E"
		prev = cur
	}
	v0 = "_R" + v0 + "E"

	// Itanium: each template argument list repeats the previous substitution twice.
	var it strings.Builder
	it.WriteString("_Z1fI")
	it.WriteString("1A")
	for i := 0; i < 40; i++ {
		it.WriteString("St4pairIS")
		if i > 0 {
			it.WriteString(base36(i - 1))
		}
		it.WriteString("_S")
		if i > 0 {
			it.WriteString(base36(i - 1))
		}
		it.WriteString("_E")
	}
	it.WriteString("EvT_")

	// The v0 name's 2^40 expansions are past maxBackrefs: not demangled.
	if out := Name(v0); out != v0 {
		t.Errorf("Name demangled the %d-byte v0 name to %d bytes", len(v0), len(out))
	}
	for _, name := range []string{v0, it.String()} {
		start := time.Now()
		out := Name(name)
		t.Logf("%d-byte name: %d bytes out in %v", len(name), len(out), time.Since(start))
		if len(out) > 2*maxOutput {
			t.Errorf("Name returned %d bytes", len(out))
		}
	}
}

func base36(n int) string { return strings.ToUpper(strconv.FormatInt(int64(n), 36)) }

// TestRustV0EmptyInternalNamespace: rustc names a tuple struct's constructor with an
// implementation-internal namespace and no identifier ("Nc...0"); rustc-demangle and LLVM print
// nothing for it, where a stray "::" used to leave "Metadata::>".
func TestRustV0EmptyInternalNamespace(t *testing.T) {
	const sym = "_RINvMNtCsgEmfK2I1SDS_4core6resultINtB3_6ResultNtNtNtNtCsjrHSEGnQ3l9_3std3sys2fs4unix8FileAttrNtNtNtBQ_2io5error5ErrorE3mapNtNtBQ_2fs8MetadataNcB1W_0EBQ_"
	const want = "<core::result::Result<std::sys::fs::unix::FileAttr, std::io::error::Error>>::map::<std::fs::Metadata, std::fs::Metadata>"
	if got := Name(sym); got != want {
		t.Errorf("Name = %q, want %q", got, want)
	}
}
