package perfmap

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProc is a /proc with processes whose root directories hold perf maps: the table reads
// it as it reads the real one.
type fakeProc struct {
	t    testing.TB
	root string
}

const fakeBtime = 1700000000

func newFakeProc(t testing.TB) *fakeProc {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte(fmt.Sprintf("cpu  1 2 3 4\nbtime %d\nprocesses 5\n", fakeBtime)), 0o644); err != nil {
		t.Fatal(err)
	}
	return &fakeProc{t: t, root: root}
}

// add makes process pid, known as nspid in its namespace, run by uid, started at started.
func (f *fakeProc) add(pid, nspid, uid uint32, started time.Time) {
	dir := filepath.Join(f.root, fmt.Sprint(pid))
	if err := os.MkdirAll(filepath.Join(dir, "root", "tmp"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	status := fmt.Sprintf("Name:\tnode\nTgid:\t%d\nPid:\t%d\nUid:\t%d\t%d\t%d\t%d\nNSpid:\t%d\t%d\n", pid, pid, uid, uid, uid, uid, pid, nspid)
	ticks := started.Sub(time.Unix(fakeBtime, 0)) / (time.Second / 100)
	stat := fmt.Sprintf("%d (node (1)) S 1 %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 7 0 %d 1000 100\n", pid, pid, pid, ticks)
	for name, s := range map[string]string{"status": status, "stat": stat} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fakeProc) mapPath(pid, nspid uint32) string {
	return filepath.Join(f.root, fmt.Sprint(pid), "root", "tmp", fmt.Sprintf("perf-%d.map", nspid))
}

func (f *fakeProc) write(path, s string) {
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) append(path, s string) {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteString(s); err != nil {
		f.t.Fatal(err)
	}
}

func lookup(t *testing.T, tb *Table, pid uint32, addr uint64, want string) {
	t.Helper()
	got, _, ok := tb.Lookup(pid, addr)
	if ok != (want != "") || got != want {
		t.Errorf("Lookup(%d, %#x) = %q, %v; want %q", pid, addr, got, ok, want)
	}
}

func TestTableFollowsFile(t *testing.T) {
	fp := newFakeProc(t)
	started := time.Now().Add(-time.Minute)
	// A process in a container: pid 4242 on the node, 7 in its namespace.
	fp.add(4242, 7, 0, started)
	path := fp.mapPath(4242, 7)
	tb := NewTable(Options{ProcRoot: fp.root})

	// No file yet.
	lookup(t, tb, 4242, 0x1000, "")
	fp.write(path, "1000 100 JS:~a /app.js:1:1\n2000 100 JS:*b /app.js:2:1\n30")
	lookup(t, tb, 4242, 0x1080, "JS:~a /app.js:1:1")
	lookup(t, tb, 4242, 0x20ff, "JS:*b /app.js:2:1")
	if _, file, _ := tb.Lookup(4242, 0x1000); file != "/tmp/perf-7.map" {
		t.Errorf("file %q, want the path in the process's namespace", file)
	}
	// The line being written is read once whole, out of order and replacing part of a.
	lookup(t, tb, 4242, 0x3000, "")
	fp.append(path, "00 10 JS:*c /app.js:3:1\n1040 20 JS:*a /app.js:1:1\nnot a line\n")
	lookup(t, tb, 4242, 0x3000, "JS:*c /app.js:3:1")
	lookup(t, tb, 4242, 0x1040, "JS:*a /app.js:1:1")
	lookup(t, tb, 4242, 0x1000, "JS:~a /app.js:1:1")
	st := tb.Stats()
	if st.Read != 4 || st.Malformed != 1 || st.FilesRead != 1 || st.Appends != 1 {
		t.Errorf("stats %+v, want 4 read, 1 malformed, 1 whole read, 1 append", st)
	}

	// Replaced by another file (a new inode): read anew.
	tmp := path + ".new"
	fp.write(tmp, "5000 10 JS:*d /app.js:4:1\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	lookup(t, tb, 4242, 0x5000, "JS:*d /app.js:4:1")
	lookup(t, tb, 4242, 0x1000, "")

	// Rewritten in place, longer: the JVM's Compiler.perfmap again. Read anew, not as an
	// append to what the first snapshot held.
	fp.write(path, "0x6000 0x10 long A.f(long)\n0x6100 0x10 void A.g()\n")
	lookup(t, tb, 4242, 0x6000, "long A.f(long)")
	fp.write(path, "0x6000 0x10 long A.f2(long)\n0x6100 0x10 void A.g()\n0x6200 0x10 int A.h()\n")
	lookup(t, tb, 4242, 0x6000, "long A.f2(long)")
	lookup(t, tb, 4242, 0x6200, "int A.h()")

	// Shrunk: read anew.
	fp.write(path, "7000 1 x\n")
	lookup(t, tb, 4242, 0x7000, "x")
	lookup(t, tb, 4242, 0x6000, "")
	// Removed: what was read stays, the code is still there.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	lookup(t, tb, 4242, 0x7000, "x")
	if procs, entries, _ := tb.Usage(); procs != 1 || entries != 1 {
		t.Errorf("usage %d processes, %d entries; want 1, 1", procs, entries)
	}
}

func TestTableRefusesFiles(t *testing.T) {
	fp := newFakeProc(t)
	now := time.Now()
	for _, tc := range []struct {
		name  string
		setup func(path string)
		uid   uint32
		want  string
	}{
		{name: "the process's own user", uid: 1000, setup: func(p string) { chown(t, p, 1000) }, want: "f"},
		{name: "root's file for a user's process", uid: 1000, want: "f"},
		{name: "another user's", uid: 1000, setup: func(p string) { chown(t, p, 1001) }},
		{name: "a symbolic link", setup: func(p string) {
			real := p + ".real"
			if err := os.Rename(p, real); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, p); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a directory", setup: func(p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "written before the process started", setup: func(p string) {
			old := now.Add(-time.Hour)
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := uint32(100 + len(tc.name))
			fp.add(pid, pid, tc.uid, now.Add(-time.Minute))
			path := fp.mapPath(pid, pid)
			fp.write(path, "1000 10 f\n")
			if tc.setup != nil {
				tc.setup(path)
			}
			tb := NewTable(Options{ProcRoot: fp.root})
			lookup(t, tb, pid, 0x1000, tc.want)
			if refused := tb.Stats().Refused; (refused > 0) != (tc.want == "") {
				t.Errorf("%d refusals counted", refused)
			}
		})
	}
}

func chown(t *testing.T, path string, uid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file away")
	}
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// TestTableSymlinkStaysInRoot: a link in the process's file system resolves there, never
// in the collector's.
func TestTableSymlinkStaysInRoot(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(300, 300, 0, time.Now().Add(-time.Minute))
	// The process's /tmp is a link to its /var/tmp ("/var/tmp" from inside its root).
	root := filepath.Join(fp.root, "300", "root")
	if err := os.RemoveAll(filepath.Join(root, "tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "var", "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/var/tmp", filepath.Join(root, "tmp")); err != nil {
		t.Fatal(err)
	}
	fp.write(filepath.Join(root, "var", "tmp", "perf-300.map"), "1000 10 inside\n")
	tb := NewTable(Options{ProcRoot: fp.root})
	lookup(t, tb, 300, 0x1000, "inside")
}

func TestTableBounds(t *testing.T) {
	fp := newFakeProc(t)
	started := time.Now().Add(-time.Minute)
	line := func(i int) string { return fmt.Sprintf("%x 10 sym%04d\n", 0x1000+0x10*i, i) }
	cost := int64(entryOverhead + len("sym0000"))
	var text strings.Builder
	for i := 0; i < 100; i++ {
		text.WriteString(line(i))
	}
	for _, tc := range []struct {
		name               string
		perProcess, total  int64
		others             int // processes read first, with the same 100 symbols
		wantKept, wantDrop int
	}{
		{name: "within bounds", perProcess: 100 * cost, total: 1000 * cost, wantKept: 100},
		// 7/8 of 50 symbols' room: the 43 latest stay.
		{name: "per process", perProcess: 50 * cost, total: 1000 * cost, wantKept: 43, wantDrop: 57},
		{name: "in all", perProcess: 100 * cost, total: 150 * cost, others: 1, wantKept: 43, wantDrop: 57},
		{name: "nothing left", perProcess: 100 * cost, total: 100 * cost, others: 1, wantKept: 0, wantDrop: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := NewTable(Options{ProcRoot: fp.root, MaxBytesPerProcess: tc.perProcess, MaxBytes: tc.total})
			for i := 0; i <= tc.others; i++ {
				pid := uint32(500 + i)
				fp.add(pid, pid, 0, started)
				fp.write(fp.mapPath(pid, pid), text.String())
				tb.Lookup(pid, 0)
			}
			pid := uint32(500 + tc.others)
			kept := 0
			for i := 0; i < 100; i++ {
				if name, _, ok := tb.Lookup(pid, uint64(0x1000+0x10*i)); ok {
					kept++
					if name != fmt.Sprintf("sym%04d", i) {
						t.Errorf("symbol %d named %q", i, name)
					}
				} else if i >= 100-tc.wantKept {
					t.Errorf("symbol %d, one of the latest, was dropped", i)
				}
			}
			if kept != tc.wantKept || int(tb.Stats().Dropped) != tc.wantDrop {
				t.Errorf("kept %d, dropped %d; want %d, %d", kept, tb.Stats().Dropped, tc.wantKept, tc.wantDrop)
			}
			if _, _, bytes := tb.Usage(); bytes > tc.total {
				t.Errorf("%d bytes held, bound %d", bytes, tc.total)
			}
		})
	}
}

func TestTableForgets(t *testing.T) {
	fp := newFakeProc(t)
	started := time.Now().Add(-time.Minute)
	for _, pid := range []uint32{600, 601, 602} {
		fp.add(pid, pid, 0, started)
		fp.write(fp.mapPath(pid, pid), "1000 10 f\n")
	}
	tb := NewTable(Options{ProcRoot: fp.root})
	for _, pid := range []uint32{600, 601, 602} {
		lookup(t, tb, pid, 0x1000, "f")
	}
	// 600 exits: it is named until the sweep after the report. 601's exit notification is
	// lost, but its /proc entry is gone. 602 execs another program.
	tb.MarkExit(600)
	lookup(t, tb, 600, 0x1000, "f")
	if err := os.RemoveAll(filepath.Join(fp.root, "601")); err != nil {
		t.Fatal(err)
	}
	fp.write(fp.mapPath(602, 602), "2000 10 g\n")
	tb.MarkExec(602)
	lookup(t, tb, 602, 0x1000, "")
	lookup(t, tb, 602, 0x2000, "g")
	if n := tb.Sweep(); n != 2 {
		t.Errorf("Sweep forgot %d processes, want 2", n)
	}
	if procs, entries, bytes := tb.Usage(); procs != 1 || entries != 1 || bytes != entryOverhead+1 {
		t.Errorf("after Sweep: %d processes, %d entries, %d bytes; want 602's one symbol", procs, entries, bytes)
	}
}

// TestTableLongLines: a line longer than the reader's buffer is one malformed line, and the
// lines around it are read.
func TestTableLongLines(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(700, 700, 0, time.Now().Add(-time.Minute))
	fp.write(fp.mapPath(700, 700), "1000 10 a\n2000 10 "+strings.Repeat("x", 3*maxLine)+"\n3000 10 c\n\n\n")
	tb := NewTable(Options{ProcRoot: fp.root})
	lookup(t, tb, 700, 0x1000, "a")
	lookup(t, tb, 700, 0x2000, "")
	lookup(t, tb, 700, 0x3000, "c")
	if st := tb.Stats(); st.Read != 2 || st.Malformed != 1 {
		t.Errorf("stats %+v, want 2 read, 1 malformed", st)
	}
}

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		status     string
		nspid, uid uint32
		err        bool
	}{
		{status: "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t4242\t7\n", nspid: 7, uid: 1000},
		{status: "Uid:\t0\t0\t0\t0\nNSpid:\t4242\n", nspid: 4242},
		{status: "Uid:\t0\t0\t0\t0\n", nspid: 0}, // before Linux 4.1
		{status: "NSpid:\t1\n", err: true},
		{status: "Uid:\nNSpid:\t1\n", err: true},
		{status: "Uid:\t0\nNSpid:\n", err: true},
		{status: "Uid:\t0\nNSpid:\tx\n", err: true},
	} {
		nspid, uid, err := parseStatus(tc.status)
		if (err != nil) != tc.err || nspid != tc.nspid || uid != tc.uid {
			t.Errorf("parseStatus(%q) = %d, %d, %v; want %d, %d, error %v", tc.status, nspid, uid, err, tc.nspid, tc.uid, tc.err)
		}
	}
}

func TestFrameType(t *testing.T) {
	for exe, want := range map[string]string{
		"node": FrameTypeV8JS, "nodejs": FrameTypeV8JS, "node20": FrameTypeV8JS, "nodemon": FrameTypeNative,
		"java": FrameTypeJVM, "python3.12": FrameTypeCPython, "python3": FrameTypeCPython, "": FrameTypeNative, "luajit": FrameTypeNative,
	} {
		if got := FrameType(exe); got != want {
			t.Errorf("FrameType(%q) = %q, want %q", exe, got, want)
		}
	}
}

// FuzzTableRead feeds a perf map written in two parts (the second appended, or replacing the
// first when the fuzzer says so) through the table with tight bounds: no panic, entries
// sorted and disjoint, memory within the bound, every name one of the input's.
func FuzzTableRead(f *testing.F) {
	f.Add([]byte("1000 10 a\n2000 10 b\n30"), []byte("00 10 c\n1008 4 d\nbad line\n"), false)
	f.Add([]byte("0x7f00 0x100 long A.f(long)\n"), []byte("0x7f00 0x100 long A.g(long)\n0x8000 0x10 void A.h()\n"), true)
	f.Add([]byte("ffffffffffffff00 ff top\n\n\n"), []byte(strings.Repeat("1 1 x\n", 200)), false)
	f.Add([]byte{}, []byte("\x00\xff 1 2\r\n"), true)
	fp := newFakeProc(f)
	fp.add(900, 900, 0, time.Now().Add(-time.Minute))
	path := fp.mapPath(900, 900)
	f.Fuzz(func(t *testing.T, first, second []byte, replace bool) {
		fp.write(path, string(first))
		tb := NewTable(Options{ProcRoot: fp.root, MaxBytesPerProcess: 1 << 10, MaxBytes: 1 << 10})
		tb.Lookup(900, 0)
		if replace {
			fp.write(path, string(second))
		} else {
			fp.append(path, string(second))
		}
		names := map[string]bool{}
		for _, text := range [][]byte{first, second, append(append([]byte{}, first...), second...)} {
			for _, line := range strings.Split(string(text), "\n") {
				if s, err := ParseLine([]byte(line)); err == nil {
					names[s.Name] = true
				}
			}
		}
		tb.Lookup(900, 0)
		tb.mu.Lock()
		defer tb.mu.Unlock()
		p := tb.procs[900]
		checkSorted(t, &p.m)
		if p.m.Bytes() > 1<<10 || tb.total != p.m.Bytes() {
			t.Fatalf("%d bytes held (table %d), bound %d", p.m.Bytes(), tb.total, 1<<10)
		}
		for _, e := range p.m.entries {
			if !names[e.name] {
				t.Fatalf("entry %+v named by no line of the input", e)
			}
		}
	})
}
