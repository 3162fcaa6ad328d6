package demangle

import (
	"strings"
	"testing"

	"github.com/ianlancetaylor/demangle"
)

// TestV0Rewrite checks the spellings v0Rewrite changes, that backrefs follow their targets,
// and the demangled result; the first two are rustc's (rust-v0 in the corpus, where
// llvm-cxxfilt-14 and rustc-demangle print the want).
func TestV0Rewrite(t *testing.T) {
	for _, c := range []struct{ what, name, rewritten, want string }{
		{
			"empty identifiers followed by an identifier",
			"_RNCNCNCNvNtCsjrHSEGnQ3l9_3std2rt19lang_start_internal00s_0B9_",
			"_RNCNCNCNvNtCsjrHSEGnQ3l9_3std2rt19lang_start_internal0_0s_0B9_",
			"std::rt::lang_start_internal::{closure#0}::{closure#0}::{closure#1}",
		},
		{
			"empty identifier followed by a length",
			"_RNvNCNKNvNtNtCsjrHSEGnQ3l9_3std2io5stdio14OUTPUT_CAPTURE0023___RUST_STD_INTERNAL_VAL",
			"_RNvNCNKNvNtNtCsjrHSEGnQ3l9_3std2io5stdio14OUTPUT_CAPTURE0_0_23___RUST_STD_INTERNAL_VAL",
			"std::io::stdio::OUTPUT_CAPTURE::{K#0}::{closure#0}::__RUST_STD_INTERNAL_VAL",
		},
		{
			"a backref past the inserted separator moves with its target",
			"_RINvNCNvC3foo3bar05FIRSTNvC3foo3quxBm_E",
			"_RINvNCNvC3foo3bar0_5FIRSTNvC3foo3quxBn_E",
			"foo::bar::{closure#0}::FIRST::<foo::qux, foo::qux>",
		},
		{
			"an internal namespace with no name is its path",
			"_RINvC3foo3barNcNvC3foo3qux0E",
			"_RINvC3foo3barNvC3foo3quxE",
			"foo::bar::<foo::qux>",
		},
		{
			"a vendor suffix stays",
			"_RNvC3foo3bar.llvm.123",
			"_RNvC3foo3bar.llvm.123",
			"foo::bar (.llvm.123)",
		},
	} {
		t.Run(c.what, func(t *testing.T) {
			got, ok := v0Rewrite(c.name)
			if !ok || got != c.rewritten {
				t.Errorf("v0Rewrite(%q)\n got  %q, %v\n want %q", c.name, got, ok, c.rewritten)
			}
			if got := Name(c.name); got != c.want {
				t.Errorf("Name(%q)\n got  %q\n want %q", c.name, got, c.want)
			}
		})
	}
	// The module alone reads "0023..." as one number and fails.
	if _, err := demangle.ToString("_RNvNCNKNvNtNtCsjrHSEGnQ3l9_3std2io5stdio14OUTPUT_CAPTURE0023___RUST_STD_INTERNAL_VAL", opts...); err == nil {
		t.Error("the module alone demangles the OUTPUT_CAPTURE name")
	}
}

// TestV0RewriteRefuses: names the rewrite does not pass to the module.
func TestV0RewriteRefuses(t *testing.T) {
	doubling := "INvC1a1f"
	prev := len(doubling)
	doubling += "l"
	for i := 0; i < 20; i++ {
		cur := len(doubling)
		doubling += "TB" + base62(prev) + "B" + base62(prev) + "E"
		prev = cur
	}
	for _, c := range []struct{ what, name string }{
		{"backref into the middle of an identifier", "_RINvC3foo3barB4_E"},
		{"backref forward", "_RINvC3foo3barB1a_E"},
		{"backref to the path it is in", "_RIB_E"},
		{"2^20 backref expansions", "_R" + doubling + "E"},
		{"nesting past the bound", "_RINvC1a1f" + strings.Repeat("S", maxV0Depth) + "lE"},
		{"identifier longer than the name", "_RNvC3foo9bar"},
		{"encoding version", "_R0NvC3foo3bar"},
		{"trailing bytes", "_RNvC3foo3barX"},
		{"bad basic type", "_RINvC3foo3barwE"},
		{"bad constant", "_RINvC3foo3barKjxE"},
	} {
		if got, ok := v0Rewrite(c.name); ok {
			t.Errorf("%s: v0Rewrite(%q) = %q, want it refused", c.what, c.name, got)
		}
		if got := Name(c.name); got != c.name {
			t.Errorf("%s: Name(%q) = %q, want it unchanged", c.what, c.name, got)
		}
	}
	// Just inside both bounds: accepted.
	for _, name := range []string{
		"_RINvC1a1f" + strings.Repeat("S", maxV0Depth-4) + "lE",
		"_RINvC1a1f" + strings.Repeat("B0_", 100) + "E",
	} {
		if _, ok := v0Rewrite(name); !ok {
			t.Errorf("v0Rewrite refused %.60q", name)
		}
	}
}

func TestBase62String(t *testing.T) {
	for n, want := range map[int]string{0: "_", 1: "0_", 10: "9_", 11: "a_", 62: "Z_", 63: "10_", 3844: "ZZ_", 3845: "100_"} {
		if got := base62String(n); got != want {
			t.Errorf("base62String(%d) = %q, want %q", n, got, want)
		}
		if got := base62(n); got != want {
			t.Errorf("the test's base62(%d) = %q, want %q", n, got, want)
		}
	}
}

// FuzzV0Rewrite: whatever the rewrite accepts, it accepts again unchanged (its output is in
// the form it writes), and Name never panics on it.
func FuzzV0Rewrite(f *testing.F) {
	for _, s := range []string{
		"_RNvC3foo3bar",
		"_RNCNCNCNvNtCsjrHSEGnQ3l9_3std2rt19lang_start_internal00s_0B9_",
		"_RINvNCNvC3foo3bar05FIRSTNvC3foo3quxBm_E",
		"_RINvC3foo3barNcNvC3foo3qux0E",
		"_RINvMNtCsgEmfK2I1SDS_4core6resultINtB3_6ResultNtNtNtNtCsjrHSEGnQ3l9_3std3sys2fs4unix8FileAttrNtNtNtBQ_2io5error5ErrorE3mapNtNtBQ_2fs8MetadataNcB1W_0EBQ_",
		"_RINvC1a1fFG0_KCRL0_hEuDNvC1a1bEL_AKj1f_KbKc41_Kanff_E",
		"_RINvC1a1fTB7_B7_EE.llvm.1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !strings.HasPrefix(s, "_R") {
			s = "_R" + s
		}
		out, ok := v0Rewrite(s)
		_ = Name(s)
		if !ok {
			return
		}
		again, ok := v0Rewrite(out)
		if !ok || again != out {
			t.Fatalf("v0Rewrite(%q) = %q, which rewrites to %q, %v", s, out, again, ok)
		}
	})
}
