package demangle

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
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
	cpu0 := cpuTime(t)
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
	cpu := cpuTime(t) - cpu0
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
	t.Logf("profsym: %v (%v CPU, %.2f µs CPU a name), %.1f allocations and %.0f bytes a name; slowest name %v (%d bytes): %.120s",
		total.Round(time.Millisecond), cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(len(names)),
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

// treeNames returns the sorted, distinct mangled names of every ELF file under root, and of
// every ELF member of its ar archives (symbolic links not followed), and the number of ELF
// files read.
func treeNames(t *testing.T, root string) ([]string, int) {
	t.Helper()
	set := map[string]bool{}
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		n, err := fileNames(path, set)
		if err != nil {
			t.Logf("%s: %v: left out", path, err)
		}
		files += n
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

// fileNames adds the mangled names of path to set when it is an ELF file, or an ar archive
// (a static library, a Rust rlib) of them, and returns the number of ELF files read.
func fileNames(path string, set map[string]bool) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var magic [8]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return 0, nil
	}
	switch {
	case string(magic[:4]) == elf.ELFMAG:
		e, err := elf.NewFile(f)
		if err != nil {
			return 0, err
		}
		return 1, addMangledNames(e, set)
	case string(magic[:]) == "!<arch>\n":
		return archiveNames(f, set)
	}
	return 0, nil
}

// archiveNames reads the ELF members of an ar archive (after its magic).
func archiveNames(f *os.File, set map[string]bool) (int, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	files := 0
	for off := int64(8); off+60 <= st.Size(); {
		var hdr [60]byte
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			return files, err
		}
		size, err := strconv.ParseInt(strings.TrimSpace(string(hdr[48:58])), 10, 64)
		if err != nil || size < 0 || off+60+size > st.Size() {
			return files, fmt.Errorf("ar member header at %d: bad size %q", off, hdr[48:58])
		}
		member := io.NewSectionReader(f, off+60, size)
		var m [4]byte
		if _, err := member.ReadAt(m[:], 0); err == nil && string(m[:]) == elf.ELFMAG {
			if e, err := elf.NewFile(member); err == nil {
				if err := addMangledNames(e, set); err == nil {
					files++
				}
			}
		}
		off += 60 + size + size%2
	}
	return files, nil
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

// cpuTime is the process's CPU time so far (user and system, the garbage collector's
// included).
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
