package demangle

import (
	"os"
	"strings"
	"testing"
)

// slowName is Name without the fast path: the module's way, as itaniumName takes it when
// the fast path declines.
func slowName(name string) string {
	fastDisabled = true
	defer func() { fastDisabled = false }()
	return Name(name)
}

// fastPathNames are the names the fast path is compared on: the installed system libraries',
// the tables', the C++20 program's, and DEMANGLE_NAMES's (bench/demangle's distribution set)
// when it is set.
func fastPathNames(t testing.TB) []string {
	t.Helper()
	var names []string
	for _, p := range systemLibraries {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		n, err := mangledNames(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		names = append(names, n...)
	}
	for _, c := range loadCases(t) {
		names = append(names, c.symbol)
	}
	for _, file := range []string{"testdata/callonce.tsv", "testdata/hard-shapes.tsv", "testdata/cxx20.tsv", "testdata/src/decisions.tsv"} {
		for _, r := range readTable(t, file) {
			names = append(names, r[0])
		}
	}
	if file := os.Getenv("DEMANGLE_NAMES"); file != "" {
		n, err := readNames(file)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, n...)
	}
	return names
}

// TestFastPathAgrees: wherever the fast path answers, it answers what the module's way does.
// It also reports how many names the fast path takes.
func TestFastPathAgrees(t *testing.T) {
	names := fastPathNames(t)
	taken, bad := 0, 0
	for _, n := range names {
		if kind(n) != itanium {
			continue
		}
		if _, _, _, ok := legacyRust(n); ok {
			continue
		}
		fast, ok := fastName(n)
		if !ok {
			continue
		}
		taken++
		if slow := slowName(n); fast != slow {
			if bad++; bad <= 30 {
				t.Errorf("%s\n  fast %s\n  slow %s", n, fast, slow)
			}
		}
	}
	t.Logf("%d names, %d (%.1f%%) taken by the fast path, %d differ", len(names), taken, 100*float64(taken)/float64(len(names)), bad)
}

// FuzzFastPath: on any input the fast path answers, it answers what the module's way does.
func FuzzFastPath(f *testing.F) {
	for _, s := range []string{
		"_Z3foov", "_ZN1AIiE1fIcEEvT_", "_ZNK4llvm5Value7getNameEv", "_ZNSt6vectorIiSaIiEE9push_backEOi",
		"_ZSt4swapIiEvRT_S1_", "_ZN1AC2ERKS_", "_ZNSaIcEC2Ev", "_ZTVN4llvm5ValueE", "_ZThn8_N1A1fEv",
		"_ZN12_GLOBAL__N_11fEv", "_ZN1AB5cxx111fEv", "_ZN1AplERKS_", "_Z1fILi3ELb1EEvv", "_Z1fIJEEvv",
		"_ZN1AIiEC1Ev.cold", "_ZNKR1A3getEv", "_Z1fOT_",
		"_ZNSt6vectorIiSaIiEE12emplace_backIJiRcEEEvDpOT_", "_Z1fIJicEEvDpRKT_", "_Z1fIiJEEvT_DpPT0_",
		"_ZZ4mainENKUlvE_clEv", "_ZZ4mainENKUliE0_clEi", "_ZZN1A1fEvE1x_0", "_ZZNK1A1fEiE1x", "_ZTIZ1fvEUlRKiE_",
		"_ZNSt8functionIFvvEEC2IZ4mainEUlvE_vEEOT_", "_ZZ1fvEN1B1gEv",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !strings.HasPrefix(s, "_Z") {
			return
		}
		fast, ok := fastName(s)
		if !ok {
			return
		}
		if slow := slowName(s); fast != slow {
			t.Fatalf("%s\n  fast %s\n  slow %s", s, fast, slow)
		}
	})
}
