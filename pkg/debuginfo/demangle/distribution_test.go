package demangle

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestDistribution is TestDifferential over every mangled name of a directory tree of ELF
// files: bench/demangle/run.sh unpacks a few dozen Debian packages (millions of names) and
// runs it with DEMANGLE_TREE set to the tree. It is skipped without DEMANGLE_TREE.
//
// DEMANGLE_NAMES=file also writes the distinct names there, one a line, for
// BenchmarkNameDistribution; DEMANGLE_DIFFS=dir writes every name of each class there, as
// TestDifferential does. The classes are TestDifferential's (classify).
func TestDistribution(t *testing.T) {
	root := os.Getenv("DEMANGLE_TREE")
	if root == "" {
		t.Skip("DEMANGLE_TREE not set (bench/demangle/run.sh sets it)")
	}
	gnu := requireTool(t, "c++filt")
	llvm := llvmCxxfilt(t)
	decisions := loadDecisions(t)

	start := time.Now()
	names, files := treeNames(t, root)
	t.Logf("%d distinct mangled names (%d _Z, %d _R) from %d ELF files under %s in %v",
		len(names), countPrefix(names, "_Z"), countPrefix(names, "_R"), files, root, time.Since(start).Round(time.Millisecond))
	if out := os.Getenv("DEMANGLE_NAMES"); out != "" {
		if err := os.WriteFile(out, []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	start = time.Now()
	g := filter(t, gnu, names)
	t.Logf("c++filt: %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	l := filter(t, llvm, names)
	t.Logf("llvm-cxxfilt: %v", time.Since(start).Round(time.Millisecond))

	// Ours, timed name by name; the slowest names are timed again (the least of 5 runs), so
	// that a pause of the machine is not taken for a slow name. The slowest bounds what one
	// hostile symbol costs.
	ours := make([]string, len(names))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	type timed struct {
		d    time.Duration
		name string
	}
	var slow []timed
	start = time.Now()
	for i, n := range names {
		s := time.Now()
		ours[i] = Name(n)
		if d := time.Since(s); len(slow) < 50 || d > slow[len(slow)-1].d {
			slow = append(slow, timed{d, n})
			sort.Slice(slow, func(a, b int) bool { return slow[a].d > slow[b].d })
			slow = slow[:min(len(slow), 50)]
		}
	}
	total := time.Since(start)
	runtime.ReadMemStats(&after)
	for i := range slow {
		best := time.Duration(1 << 62)
		for range 5 {
			s := time.Now()
			_ = Name(slow[i].name)
			best = min(best, time.Since(s))
		}
		slow[i].d = best
	}
	sort.Slice(slow, func(a, b int) bool { return slow[a].d > slow[b].d })
	t.Logf("profsym: %v, %.2f µs a name, %.1f allocations and %.0f bytes a name; slowest name %v (%d bytes): %.120s",
		total.Round(time.Millisecond), float64(total.Microseconds())/float64(len(names)),
		float64(after.Mallocs-before.Mallocs)/float64(len(names)),
		float64(after.TotalAlloc-before.TotalAlloc)/float64(len(names)), slow[0].d, len(slow[0].name), slow[0].name)

	counts := map[string]int{}
	lists := map[string]*bytes.Buffer{}
	bad := 0
	for i, n := range names {
		class, ok := classify(n, ours[i], g[i], l[i], decisions)
		counts[class]++
		if lists[class] == nil {
			lists[class] = new(bytes.Buffer)
		}
		fmt.Fprintf(lists[class], "%s\n  ours %s\n  gnu  %s\n  llvm %s\n", n, ours[i], g[i], l[i])
		if !ok {
			if bad++; bad <= 20 {
				t.Errorf("%s\n  ours %s\n  gnu  %s\n  llvm %s", n, ours[i], g[i], l[i])
			}
		}
	}
	classes := make([]string, 0, len(counts))
	for c := range counts {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		t.Logf("%9d  %s", counts[c], c)
	}
	if bad > 20 {
		t.Errorf("%d names disallowed in all (the first 20 above)", bad)
	}
	if dir := os.Getenv("DEMANGLE_DIFFS"); dir != "" {
		writeClassLists(t, dir, lists)
	}
}

func writeClassLists(t *testing.T, dir string, lists map[string]*bytes.Buffer) {
	t.Helper()
	for class, b := range lists {
		file := filepath.Join(dir, strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, strings.ToLower(class))+".txt")
		if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func countPrefix(names []string, prefix string) int {
	n := 0
	for _, s := range names {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// treeNames returns the sorted, distinct mangled names of every ELF file under root (symbolic
// links not followed) and the number of ELF files read.
func treeNames(t *testing.T, root string) ([]string, int) {
	t.Helper()
	set := map[string]struct{}{}
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() || !isELF(path) {
			return nil
		}
		names, err := mangledNames(path)
		if err != nil {
			t.Logf("%s: %v: left out", path, err)
			return nil
		}
		files++
		for _, n := range names {
			set[n] = struct{}{}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, files
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = f.Read(magic[:])
	return err == nil && string(magic[:]) == elf.ELFMAG
}

func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed", name)
	}
	return p
}

// BenchmarkNameDistribution demangles the names bench/demangle/run.sh collected
// (DEMANGLE_NAMES, one a line), one op a name taken in turn.
func BenchmarkNameDistribution(b *testing.B) {
	file := os.Getenv("DEMANGLE_NAMES")
	if file == "" {
		b.Skip("DEMANGLE_NAMES not set (bench/demangle/run.sh sets it)")
	}
	f, err := os.Open(file)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		names = append(names, sc.Text())
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		_ = Name(names[i%len(names)])
	}
}
