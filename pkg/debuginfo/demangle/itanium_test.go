package demangle

import (
	"strings"
	"testing"

	"github.com/ianlancetaylor/demangle"
)

// TestItaniumCorrections checks each correction on names from the corpus (GCC's libLLVM,
// g++ and clang++ programs), where LLVM 14 and GNU c++filt agree and the module alone prints
// something else: the want is llvm-cxxfilt-14's output.
func TestItaniumCorrections(t *testing.T) {
	for _, c := range []struct{ what, name, want string }{
		{
			"sr qualifier with template arguments is no substitution candidate",
			"_ZN4llvm4yaml7yamlizeI12SwiftVersionEENSt9enable_ifIXsr16has_ScalarTraitsIT_EE5valueEvE4typeERNS0_2IOERS4_bRNS0_12EmptyContextE",
			"std::enable_if<has_ScalarTraits<SwiftVersion>::value, void>::type llvm::yaml::yamlize<SwiftVersion>(llvm::yaml::IO&, SwiftVersion&, bool, llvm::yaml::EmptyContext&)",
		},
		{
			"sr with a plain qualifier before the templated one",
			"_ZN4llvm10checkedAddIiEENSt9enable_ifIXsr3std9is_signedIT_EE5valueENS_8OptionalIS2_EEE4typeES2_S2_",
			"std::enable_if<std::is_signed<int>::value, llvm::Optional<int> >::type llvm::checkedAdd<int>(int, int)",
		},
		{
			"address of a function with its parameters",
			"_ZN3lib8internal6applyNIXadL_ZNS0_3incEiEELi3EEEii",
			"int lib::internal::applyN<&(lib::internal::inc(int)), 3>(int)",
		},
		{
			"address of a const member function",
			"_ZN3lib8internal10callMemberINS0_6RegexpEXadL_ZNKS2_4sizeEvEEEEiRKT_",
			"int lib::internal::callMember<lib::internal::Regexp, &(lib::internal::Regexp::size() const)>(lib::internal::Regexp const&)",
		},
		{
			"a substitution repeating call_once's parameter in _Prepare_execution's signature (g++ 12)",
			"_ZNSt9once_flag18_Prepare_executionC1IZSt9call_onceIZ4workRSt6vectorIiSaIiEEEUlvE_JEEvRS_OT_DpOT0_EUlvE_EERS9_",
			"std::once_flag::_Prepare_execution::_Prepare_execution<void std::call_once<work(std::vector<int, std::allocator<int> >&)::'lambda'()>(std::once_flag&, work(std::vector<int, std::allocator<int> >&)::'lambda'()&&)::'lambda'()>(work(std::vector<int, std::allocator<int> >&)::'lambda'()&)",
		},
		{
			"a substitution repeating call_once's parameter in __addressof's signature (g++ 12)",
			"_ZSt11__addressofIZSt9call_onceIZ4workRSt6vectorIiSaIiEEEUlvE_JEEvRSt9once_flagOT_DpOT0_EUlvE_EPS8_RS8_",
			"work(std::vector<int, std::allocator<int> >&)::'lambda'()* std::__addressof<void std::call_once<work(std::vector<int, std::allocator<int> >&)::'lambda'()>(std::once_flag&, work(std::vector<int, std::allocator<int> >&)::'lambda'()&&)::'lambda'()>(work(std::vector<int, std::allocator<int> >&)::'lambda'()&)",
		},
		{
			"call_once's callable in once_flag::_Prepare_execution (g++)",
			"_ZZNSt9once_flag18_Prepare_executionC4IZSt9call_onceIZ4mainEUlvE_JEEvRS_OT_DpOT0_EUlvE_EERS5_ENUlvE_4_FUNEv",
			"std::once_flag::_Prepare_execution::_Prepare_execution<void std::call_once<main::'lambda'()>(std::once_flag&, main::'lambda'()&&)::'lambda'()>(main::'lambda'()&)::'lambda'()::_FUN()",
		},
		{
			"call_once's callable in once_flag::_Prepare_execution (clang++)",
			"_ZZNSt9once_flag18_Prepare_executionC1IZSt9call_onceIZ4mainE3$_3JEEvRS_OT_DpOT0_EUlvE_EERS5_ENUlvE_8__invokeEv",
			"std::once_flag::_Prepare_execution::_Prepare_execution<void std::call_once<main::$_3>(std::once_flag&, main::$_3&&)::'lambda'()>(main::$_3&)::'lambda'()::__invoke()",
		},
		{
			"call_once's callable a function reference: F& collapses to F",
			"_ZZNSt9once_flag18_Prepare_executionC4IZSt9call_onceIRFviRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEEJRiS8_EEvRS_OT_DpOT0_EUlvE_EERSF_ENUlvE_4_FUNEv",
			"std::once_flag::_Prepare_execution::_Prepare_execution<void std::call_once<void (&)(int, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&), int&, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >(std::once_flag&, void (&)(int, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&), int&, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >&&)::'lambda'()>(void (&)(int, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&))::'lambda'()::_FUN()",
		},
	} {
		t.Run(c.what, func(t *testing.T) {
			if got := Name(c.name); got != c.want {
				t.Errorf("Name(%q)\n got  %q\n want %q", c.name, got, c.want)
			}
			// The correction is needed: the module alone prints something else.
			if plain, err := demangle.ToString(c.name, opts...); err == nil && llvmAngles(plain) == c.want {
				t.Errorf("the module alone already prints %q", plain)
			}
		})
	}
}

// TestUnresolvedQualifiersLeavesOthers: an "sr<n><name>I" inside a source name, or a name
// without "sr", is left alone.
func TestUnresolvedQualifiersLeavesOthers(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"_Z8xsr1aIbcv", "xsr1aIbc()"},
		{"_ZN3usr2srEv", "usr::sr()"},
		{"_Z1fIiEvT_", "void f<int>(int)"},
	} {
		got, ok := unresolvedQualifiers(c.name)
		if !ok || got != c.name {
			t.Errorf("unresolvedQualifiers(%q) = %q, %v; want it unchanged", c.name, got, ok)
		}
		if got := Name(c.name); got != c.want {
			t.Errorf("Name(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestSeqIndex(t *testing.T) {
	for k, want := range map[int]string{0: "S_", 1: "S0_", 10: "S9_", 11: "SA_", 36: "SZ_", 37: "S10_"} {
		if got := seqString(k); got != want {
			t.Errorf("seqString(%d) = %q, want %q", k, got, want)
		}
		if back, ok := seqIndex(want[1 : len(want)-1]); !ok || back != k {
			t.Errorf("seqIndex(%q) = %d, %v; want %d", want, back, ok, k)
		}
	}
	if _, ok := seqIndex("ZZZZZZZ"); ok {
		t.Error("seqIndex accepted a 7-digit seq-id")
	}
}

// TestItaniumBounds: names built to take the module's printer quadratic time in their nesting,
// or unresolvedQualifiers many partial parses, come back undemangled.
func TestItaniumBounds(t *testing.T) {
	for _, c := range []struct{ what, name string }{
		{"pointer chain", "_Z1f" + strings.Repeat("P", 8000) + "i"},
		{"const pointer chain", "_Z1f" + strings.Repeat("PK", 4000) + "i"},
		{"array chain", "_Z1f" + strings.Repeat("A1_", 3000) + "i"},
		{"function pointer chain", "_Z1f" + strings.Repeat("PFv", 3000) + "i" + strings.Repeat("E", 3000)},
		{"template nesting", "_Z1fI" + strings.Repeat("1aI", 3000) + "i" + strings.Repeat("E", 3000) + "Ev"},
		{"sr qualifiers", "_Z1fI" + strings.Repeat("IXsr1aI", 3000) + "i"},
		{"too long", "_Z1f" + strings.Repeat("i", maxInput)},
	} {
		if got := Name(c.name); got != c.name {
			t.Errorf("%s: Name demangled a %d-byte name to %d bytes", c.what, len(c.name), len(got))
		}
	}
	// Just under the depth bound: still demangled.
	name := "_Z1f" + strings.Repeat("P", maxDepth-8) + "i" + strings.Repeat("i", shortName)
	if got := Name(name); got == name || !strings.HasPrefix(got, "f(int*") {
		t.Errorf("a %d-byte name %d pointers deep was not demangled: %.40q", len(name), maxDepth-8, got)
	}
}
