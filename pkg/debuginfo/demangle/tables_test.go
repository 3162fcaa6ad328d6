package demangle

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// TestTables checks the checked-in name tables: testdata/callonce.tsv (every function of
// testdata/src/callonce.cc, std::call_once with a lambda, built with g++ 12),
// testdata/cxx20.tsv (every function of testdata/src/cxx20.cc, C++20, built with g++ 12 and
// clang++ 14 by testdata/cxx20.sh, with its class against the references) and
// testdata/hard-shapes.tsv (one name for each class of disagreement the distribution-scale
// differential, bench/demangle, found, with the answer decided for it).
func TestTables(t *testing.T) {
	for _, file := range []string{"testdata/callonce.tsv", "testdata/hard-shapes.tsv", "testdata/cxx20.tsv"} {
		rows := readTable(t, file)
		if len(rows) == 0 {
			t.Fatalf("%s: no rows", file)
		}
		for _, r := range rows {
			if got := Name(r[0]); got != r[1] {
				t.Errorf("%s: Name(%q)\n got  %q\n want %q", file, r[0], got, r[1])
			}
		}
	}
}

// TestDecisions checks that every name testdata/src/decisions.tsv records prints as the
// decision says: a correction that changes one must change its record too.
func TestDecisions(t *testing.T) {
	for _, r := range readTable(t, "testdata/src/decisions.tsv") {
		if got := Name(r[0]); got != r[1] {
			t.Errorf("Name(%q)\n got  %q\n want %q (decisions.tsv)", r[0], got, r[1])
		}
	}
}

// readTable returns the rows of a tab-separated table, comment lines (#) left out; each row
// has at least a symbol and the name wanted for it.
func readTable(t testing.TB, file string) [][]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows [][]string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) < 2 {
			t.Fatalf("%s: %d columns in %q, want at least 2", file, len(cols), line)
		}
		rows = append(rows, cols)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}
