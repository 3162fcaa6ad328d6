package cfi

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The differential test compares the table with binutils' own interpretation of the same
// CFI: `readelf --debug-dump=frames-interp` prints, per FDE, one line per row with the CFA
// and the rule of every register the FDE mentions.

// readelfRow is one printed row: the CFA (e.g. "rsp+8", "sp+16", "exp") and the frame
// pointer's (rbp, x29) and return address's columns ("" when the FDE has no such column).
type readelfRow struct {
	loc    uint64
	cfa    string
	fp, ra string
}

type readelfFDE struct {
	off        uint64
	start, end uint64
	rows       []readelfRow
	// signal: the FDE's CIE has the 'S' augmentation.
	signal bool
}

// readelfArch names a machine's registers as readelf prints them.
type readelfArch struct {
	sp, fp string
}

func readelfArchOf(m elf.Machine) readelfArch {
	if m == elf.EM_AARCH64 {
		return readelfArch{sp: "sp", fp: "x29"}
	}
	return readelfArch{sp: "rsp", fp: "rbp"}
}

var (
	reEntry    = regexp.MustCompile(`^([0-9a-f]+) ([0-9a-f]+) ([0-9a-f]+) (CIE|FDE)\b(.*)$`)
	reFDERange = regexp.MustCompile(`pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	reFDECIE   = regexp.MustCompile(`cie=([0-9a-f]+)`)
	reSection  = regexp.MustCompile(`^Contents of the (\S+) section`)
	reCIEAug   = regexp.MustCompile(`^"([^"]*)"`)
	// A register column holding another register prints as "r5 (rdi)".
	reRegName = regexp.MustCompile(`(r\d+) \((\w+)\)`)
)

// readelfFrames runs readelf on path and returns the FDEs of each frame section it prints.
// An FDE without instructions prints no rows; it gets its CIE's initial row at its start.
func readelfFrames(t testing.TB, path string, ra readelfArch) map[string][]readelfFDE {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "readelf", "--wide", "--debug-dump=frames-interp", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		// readelf exits 1 after warnings about sections it was not asked for (libc's
		// does); the frames it printed are still whole.
		var ee *exec.ExitError
		if !errors.As(err, &ee) || len(out) == 0 {
			t.Fatalf("readelf %s: %v\n%s", path, err, stderr.Bytes())
		}
		t.Logf("readelf %s: %v (%s)", path, err, bytes.TrimSpace(stderr.Bytes()))
	}
	res := map[string][]readelfFDE{}
	type cieKey struct {
		section string
		off     uint64
	}
	cieRows := map[cieKey][]readelfRow{}
	signalCIEs := map[cieKey]bool{}
	var section string
	var cols []string
	var cur *readelfFDE      // the FDE whose rows are being read
	var curCIE *[]readelfRow // or the CIE's
	var curCIEOff uint64
	flush := func() {
		if cur != nil {
			res[section] = append(res[section], *cur)
		}
		cur, curCIE = nil, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	type fdeCIE struct {
		section string
		idx     int
		cie     uint64
	}
	var noRows []fdeCIE
	for sc.Scan() {
		line := sc.Text()
		if m := reSection.FindStringSubmatch(line); m != nil {
			flush()
			section = m[1]
			continue
		}
		if m := reEntry.FindStringSubmatch(line); m != nil {
			flush()
			off, _ := strconv.ParseUint(m[1], 16, 64)
			if m[4] == "CIE" {
				if a := reCIEAug.FindStringSubmatch(strings.TrimSpace(m[5])); a != nil && strings.Contains(a[1], "S") {
					signalCIEs[cieKey{section, off}] = true
				}
				rows := []readelfRow(nil)
				cieRows[cieKey{section, off}] = rows
				curCIE = &rows
				curCIEOff = off
				continue
			}
			r := reFDERange.FindStringSubmatch(m[5])
			c := reFDECIE.FindStringSubmatch(m[5])
			if r == nil || c == nil {
				t.Fatalf("readelf %s: FDE line without range or CIE: %q", path, line)
			}
			cur = &readelfFDE{off: off}
			cur.start, _ = strconv.ParseUint(r[1], 16, 64)
			cur.end, _ = strconv.ParseUint(r[2], 16, 64)
			cieOff, _ := strconv.ParseUint(c[1], 16, 64)
			cur.signal = signalCIEs[cieKey{section, cieOff}]
			noRows = append(noRows, fdeCIE{section, len(res[section]), cieOff})
			continue
		}
		fields := strings.Fields(reRegName.ReplaceAllString(line, "$1($2)"))
		if len(fields) == 3 && fields[1] == "ZERO" {
			flush()
			continue
		}
		if len(fields) >= 2 && fields[0] == "LOC" && fields[1] == "CFA" {
			cols = fields
			continue
		}
		if (cur == nil && curCIE == nil) || len(fields) < 2 || len(fields) != len(cols) {
			continue
		}
		loc, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			continue
		}
		row := readelfRow{loc: loc, cfa: fields[1]}
		for i, c := range cols[2:] {
			switch c {
			case ra.fp:
				row.fp = fields[i+2]
			case "ra":
				row.ra = fields[i+2]
			}
		}
		if cur != nil {
			// A later line at the same location replaces the earlier one.
			if n := len(cur.rows); n > 0 && cur.rows[n-1].loc == loc {
				cur.rows[n-1] = row
			} else {
				cur.rows = append(cur.rows, row)
			}
		} else {
			*curCIE = append(*curCIE, row)
			cieRows[cieKey{section, curCIEOff}] = *curCIE
		}
	}
	flush()
	for _, n := range noRows {
		f := &res[n.section][n.idx]
		if len(f.rows) > 0 {
			continue
		}
		cr := cieRows[cieKey{n.section, n.cie}]
		if len(cr) == 0 {
			t.Fatalf("readelf %s: FDE at %#x: CIE %#x has no initial row", path, f.off, n.cie)
		}
		r := cr[0]
		r.loc = f.start
		f.rows = []readelfRow{r}
	}
	return res
}

// diffStats counts what a comparison saw.
type diffStats struct {
	rows, exp, endOfStack, signal, overlapped, plt, raSigned int
	disagreements                                            []string
}

// compareWithReadelf checks every row readelf prints against Lookup, under the table's
// overlap rule: an FDE's rows count up to the next FDE's start. With raSign (AArch64: the
// signing state readelfRASign followed, per FDE offset), it checks RASigned too.
func compareWithReadelf(t testing.TB, tb *Table, fdes []readelfFDE, raSign map[uint64][]raSignChange) diffStats {
	t.Helper()
	ra := readelfArchOf(tb.Arch)
	var st diffStats
	sorted := make([]readelfFDE, 0, len(fdes))
	for _, f := range fdes {
		if f.end > f.start {
			sorted = append(sorted, f)
		}
	}
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].start < sorted[j].start })
	for i, f := range sorted {
		if i > 0 && sorted[i-1].start == f.start {
			st.overlapped += len(f.rows)
			continue
		}
		end := f.end
		for j := i + 1; j < len(sorted); j++ {
			if sorted[j].start != f.start {
				end = min(end, sorted[j].start)
				break
			}
		}
		for _, want := range f.rows {
			if want.loc < f.start || want.loc >= end {
				if testing.Verbose() {
					t.Logf("FDE %#x [%#x, %#x) kept up to %#x: row at %#x not compared", f.off, f.start, f.end, end, want.loc)
				}
				st.overlapped++
				continue
			}
			st.rows++
			got, ok := tb.Lookup(want.loc)
			if !ok {
				st.disagreements = append(st.disagreements, fmt.Sprintf("FDE %#x: %#x: no row", f.off, want.loc))
				continue
			}
			if msg := rowDiff(got, want, f.signal, ra); msg != "" {
				st.disagreements = append(st.disagreements, fmt.Sprintf("FDE %#x: %#x: %s (readelf cfa=%s %s=%q ra=%q; table %v)",
					f.off, want.loc, msg, want.cfa, ra.fp, want.fp, want.ra, got))
			}
			switch got.CFA {
			case CFAExpression, CFAPLT:
				st.exp++
			case CFAEndOfStack:
				st.endOfStack++
			case CFASignalFrame:
				st.signal++
			}
			if got.RASigned {
				st.raSigned++
			}
			if raSign != nil && !f.signal && got.CFA != CFAEndOfStack {
				if signed := signedAt(raSign[f.off], want.loc); got.RASigned != signed {
					st.disagreements = append(st.disagreements, fmt.Sprintf("FDE %#x: %#x: RASigned %v, readelf's instructions say %v", f.off, want.loc, got.RASigned, signed))
				}
			} else if raSign == nil && got.RASigned {
				st.disagreements = append(st.disagreements, fmt.Sprintf("FDE %#x: %#x: RASigned on %v", f.off, want.loc, tb.Arch))
			}
		}
	}
	// The other way round: every table row starts where readelf prints a row or where an
	// FDE's kept range ends, so the table invents no rule changes.
	locs := make(map[uint64]bool, st.rows+2*len(sorted))
	for _, f := range sorted {
		locs[f.end] = true
		for _, r := range f.rows {
			locs[r.loc] = true
		}
		if i := sort.Search(len(sorted), func(i int) bool { return sorted[i].start > f.start }); i < len(sorted) {
			locs[sorted[i].start] = true
		}
	}
	for _, r := range tb.Rows {
		if !locs[r.PC] {
			st.disagreements = append(st.disagreements, fmt.Sprintf("table row %v: readelf has no row there", r))
		}
	}
	return st
}

// rowDiff says how a table row differs from readelf's, or "" when they agree. readelf
// prints "u" both for an explicitly undefined register and for one the FDE never set in a
// row where another row sets it, so "u" (or no column) matches RegSame and RegUndefined.
// Every row of a signal trampoline's FDE (signal) is CFASignalFrame and nothing else,
// whatever readelf prints.
func rowDiff(got Row, want readelfRow, signal bool, ra readelfArch) string {
	if signal {
		if got != (Row{PC: got.PC, CFA: CFASignalFrame}) {
			return "a signal trampoline's row is not CFASignalFrame alone"
		}
		return ""
	}
	if got.CFA == CFASignalFrame {
		return "CFASignalFrame outside a signal trampoline"
	}
	if got.CFA == CFAEndOfStack {
		if want.ra != "u" {
			return "end of stack where readelf has a return address rule"
		}
		return ""
	}
	if want.ra == "u" && got.RA == RegUndefined {
		return "undefined return address outside an end-of-stack row"
	}
	switch {
	case want.cfa == "exp":
		if got.CFA != CFAExpression && got.CFA != CFAPLT {
			return "CFA is an expression in readelf"
		}
	case strings.HasPrefix(want.cfa, ra.sp+"+") || strings.HasPrefix(want.cfa, ra.sp+"-") ||
		strings.HasPrefix(want.cfa, ra.fp+"+") || strings.HasPrefix(want.cfa, ra.fp+"-"):
		rule, reg := CFASP, ra.sp
		if strings.HasPrefix(want.cfa, ra.fp) {
			rule, reg = CFAFP, ra.fp
		}
		off, err := strconv.ParseInt(want.cfa[len(reg):], 10, 64)
		if err != nil {
			return "unparsable readelf CFA"
		}
		if got.CFA != rule || int64(got.CFAOffset) != off {
			return "CFA differs"
		}
	default:
		// CFA in another register: the table cannot express it.
		if got.CFA != CFAExpression {
			return "CFA in another register not an expression"
		}
	}
	if msg := regDiff(ra.fp, got.FP, got.FPOffset, want.fp); msg != "" {
		return msg
	}
	return regDiff("ra", got.RA, got.RAOffset, want.ra)
}

func regDiff(name string, rule RegRule, off int32, want string) string {
	switch {
	case want == "" || want == "u":
		if rule != RegSame && rule != RegUndefined {
			return name + " has a rule readelf does not print"
		}
	case want == "s":
		if rule != RegSame {
			return name + " not same-value"
		}
	case strings.HasPrefix(want, "c"):
		n, err := strconv.ParseInt(want[1:], 10, 64)
		if err != nil {
			return "unparsable readelf " + name
		}
		if rule != RegOffset || int64(off) != n {
			return name + " offset differs"
		}
	default: // v+N, exp, vexp, a register name
		if rule != RegExpression {
			return name + " not an expression"
		}
	}
	return ""
}

// frameSections returns the frame sections of an ELF file with their bytes and addresses,
// and the file's machine.
func frameSections(t testing.TB, path string) (map[string]*elf.Section, elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	res := map[string]*elf.Section{}
	for _, name := range []string{".eh_frame", ".debug_frame"} {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			res[name] = s
		}
	}
	return res, f.Machine
}

// raSignChange is the return address signing state from loc on, up to the next change.
type raSignChange struct {
	loc    uint64
	signed bool
}

var (
	reRawInsn = regexp.MustCompile(`^\s+DW_CFA_(\w+)`)
	reRawTo   = regexp.MustCompile(`([0-9a-f]+)$`)
)

// readelfRASign follows AArch64's return address signing state through the raw
// instructions readelf --debug-dump=frames decodes, independently of the parser: per
// section and FDE offset, the state at each location where it was last set. frames-interp
// prints no column for it.
func readelfRASign(t testing.TB, path string) map[string]map[uint64][]raSignChange {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "readelf", "--wide", "--debug-dump=frames", path)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || len(out) == 0) {
		t.Fatalf("readelf --debug-dump=frames %s: %v", path, err)
	}
	res := map[string]map[uint64][]raSignChange{}
	type cieKey struct {
		section string
		off     uint64
	}
	cieSigned := map[cieKey]bool{}
	var section string
	var inCIE bool
	var cieOff, fdeOff, loc uint64
	var signed bool
	var stack []bool
	var changes []raSignChange
	flush := func() {
		if inCIE {
			cieSigned[cieKey{section, cieOff}] = signed
		} else if changes != nil {
			changes = append(changes, raSignChange{loc, signed})
			if res[section] == nil {
				res[section] = map[uint64][]raSignChange{}
			}
			res[section][fdeOff] = changes
		}
		inCIE, changes, stack = false, nil, stack[:0]
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := reSection.FindStringSubmatch(line); m != nil {
			flush()
			section = m[1]
			continue
		}
		if m := reEntry.FindStringSubmatch(line); m != nil {
			flush()
			off, _ := strconv.ParseUint(m[1], 16, 64)
			if m[4] == "CIE" {
				inCIE, cieOff, signed = true, off, false
				continue
			}
			r := reFDERange.FindStringSubmatch(m[5])
			c := reFDECIE.FindStringSubmatch(m[5])
			if r == nil || c == nil {
				t.Fatalf("readelf %s: FDE line without range or CIE: %q", path, line)
			}
			fdeOff = off
			loc, _ = strconv.ParseUint(r[1], 16, 64)
			cie, _ := strconv.ParseUint(c[1], 16, 64)
			signed = cieSigned[cieKey{section, cie}]
			changes = []raSignChange{}
			continue
		}
		m := reRawInsn.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch m[1] {
		case "AARCH64_negate_ra_state", "GNU_window_save": // the opcode's generic name, which a readelf may print instead
			signed = !signed
		case "remember_state":
			stack = append(stack, signed)
		case "restore_state":
			if len(stack) > 0 {
				signed = stack[len(stack)-1]
				stack = stack[:len(stack)-1]
			}
		case "advance_loc", "advance_loc1", "advance_loc2", "advance_loc4", "set_loc":
			if inCIE {
				continue
			}
			to, err := strconv.ParseUint(reRawTo.FindString(line), 16, 64)
			if err != nil {
				t.Fatalf("readelf %s: location of %q", path, line)
			}
			changes = append(changes, raSignChange{loc, signed})
			loc = to
		}
	}
	flush()
	return res
}

// signedAt returns the signing state at pc from an FDE's changes.
func signedAt(changes []raSignChange, pc uint64) bool {
	s := false
	for _, c := range changes {
		if c.loc > pc {
			break
		}
		s = c.signed
	}
	return s
}

// pltRange returns the addresses of path's .plt section, or zeros.
func pltRange(t testing.TB, path string) [2]uint64 {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if s := f.Section(".plt"); s != nil {
		return [2]uint64{s.Addr, s.Addr + s.Size}
	}
	return [2]uint64{}
}

// diffFile compares every frame section of path with readelf and returns what it compared,
// summed over the sections. On AArch64 it also checks each compared row's return address
// signing state against readelfRASign.
func diffFile(t *testing.T, path string) diffStats {
	t.Helper()
	sections, machine := frameSections(t, path)
	want := readelfFrames(t, path, readelfArchOf(machine))
	var raSign map[string]map[uint64][]raSignChange
	if machine == elf.EM_AARCH64 {
		raSign = readelfRASign(t, path)
	}
	var total diffStats
	for name, s := range sections {
		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		kind := EHFrame
		if name == ".debug_frame" {
			kind = DebugFrame
		}
		tb, err := ParseSectionWith(data, s.Addr, kind, Options{Arch: machine})
		if err != nil {
			t.Fatalf("%s %s: %v", path, name, err)
		}
		if err := tb.CheckArch(machine); err != nil {
			t.Fatal(err)
		}
		if tb.Skipped != 0 {
			t.Errorf("%s %s: %d FDEs skipped, first: %v", path, name, tb.Skipped, tb.SkipReason)
		}
		fdes := want[name]
		if len(fdes) == 0 {
			// A section of a CIE alone (a library built without unwind tables keeps
			// the C runtime's CIE and terminator).
			if tb.FDEs != 0 {
				t.Errorf("%s %s: readelf prints no FDE, the table has %d", path, name, tb.FDEs)
			}
			continue
		}
		var sign map[uint64][]raSignChange
		if raSign != nil {
			sign = raSign[name]
			if sign == nil {
				sign = map[uint64][]raSignChange{}
			}
		}
		st := compareWithReadelf(t, tb, fdes, sign)
		t.Logf("%s %s (%v): %d FDEs, %d table rows; %d readelf rows compared (%d CFA expressions, %d end of stack, %d signal frame, %d with a signed return address), %d outside their FDE's kept range, %d disagreements",
			filepath.Base(path), name, machine, len(fdes), len(tb.Rows), st.rows, st.exp, st.endOfStack, st.signal, st.raSigned, st.overlapped, len(st.disagreements))
		for i, d := range st.disagreements {
			if i == 20 {
				t.Errorf("... and %d more", len(st.disagreements)-20)
				break
			}
			t.Errorf("%s %s: %s", path, name, d)
		}
		if st.rows == 0 {
			t.Errorf("%s %s: no rows compared", path, name)
		}
		// readelf prints any CFA expression as "exp"; those in x86-64's .plt must be the
		// PLT's.
		if plt := pltRange(t, path); plt[1] > plt[0] && machine == elf.EM_X86_64 {
			for _, f := range fdes {
				for _, r := range f.rows {
					if r.cfa != "exp" || r.loc < plt[0] || r.loc >= plt[1] || r.loc >= f.end {
						continue
					}
					if got, _ := tb.Lookup(r.loc); got.CFA != CFAPLT || (got.CFAOffset != 10 && got.CFAOffset != 11) {
						t.Errorf("%s %s: %#x in .plt: %v, want the PLT rule", path, name, r.loc, got)
					}
					st.plt++
				}
			}
			t.Logf("%s %s: %d PLT rows", filepath.Base(path), name, st.plt)
		}
		total.rows += st.rows
		total.exp += st.exp
		total.endOfStack += st.endOfStack
		total.signal += st.signal
		total.raSigned += st.raSigned
		total.plt += st.plt
	}
	return total
}

// testProgram exercises what compilers do to frames: a frame pointer (alloca, VLAs), many
// callee-saved registers, tail calls, recursion, calls through the PLT into a shared
// library, and noreturn paths.
const testProgram = `
#include <alloca.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int lib_entry(int);

static jmp_buf jb;

__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }

__attribute__((noinline)) int with_alloca(int n) {
	char *p = alloca(n + 16);
	memset(p, n, n + 16);
	return p[n / 2] + leaf(n);
}

__attribute__((noinline)) int with_vla(int n) {
	int a[n + 1];
	for (int i = 0; i <= n; i++) a[i] = leaf(i);
	return a[n / 2];
}

__attribute__((noinline)) long many_regs(long a, long b, long c, long d) {
	long x = a * b, y = b * c, z = c * d, w = d * a, v = a + b + c + d;
	for (int i = 0; i < (int)a; i++) {
		x += leaf(i) * y;
		y ^= leaf((int)x) + z;
		z += leaf((int)y) - w;
		w -= leaf((int)z) + v;
		v += x ^ w;
	}
	return x + y + z + w + v;
}

__attribute__((noinline)) int recurse(int n) {
	if (n <= 0) return lib_entry(n);
	char buf[64];
	snprintf(buf, sizeof buf, "%d", n);
	return recurse(n - 1) + (int)strlen(buf);
}

__attribute__((noinline, noreturn)) void fail(const char *why) {
	fprintf(stderr, "%s\n", why);
	longjmp(jb, 1);
}

int main(int argc, char **argv) {
	if (setjmp(jb)) return 3;
	int n = argc > 1 ? atoi(argv[1]) : 5;
	long r = with_alloca(n) + with_vla(n) + many_regs(n, n + 1, n + 2, n + 3) + recurse(n);
	if (r == 42) fail("unlucky");
	printf("%ld\n", r);
	return 0;
}
`

const testLibrary = `
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static int helper(int x) {
	int *p = malloc(sizeof(int) * (x + 4));
	if (!p) abort();
	for (int i = 0; i < x + 4; i++) p[i] = i * x;
	int r = p[x];
	free(p);
	return r;
}

int lib_entry(int x) {
	char buf[32];
	snprintf(buf, sizeof buf, "%d", helper(x + 2));
	return buf[0] + puts(buf);
}
`

// gccBuild compiles the test program and library with the given flags into dir and returns
// the library and executable paths.
func gccBuild(t *testing.T, dir, name string, flags ...string) (lib, exe string) {
	t.Helper()
	return ccBuild(t, "gcc", dir, name, flags...)
}

// ccBuild is gccBuild with another C compiler (a cross compiler, say).
func ccBuild(t *testing.T, cc, dir, name string, flags ...string) (lib, exe string) {
	t.Helper()
	src := filepath.Join(dir, "prog.c")
	libSrc := filepath.Join(dir, "lib.c")
	if err := os.WriteFile(src, []byte(testProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(libSrc, []byte(testLibrary), 0o644); err != nil {
		t.Fatal(err)
	}
	lib = filepath.Join(dir, "lib"+name+".so")
	exe = filepath.Join(dir, name)
	run := func(args ...string) {
		cmd := exec.CommandContext(t.Context(), cc, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", cc, args, err, out)
		}
	}
	run(append(append([]string{}, flags...), "-shared", "-fPIC", "-o", lib, libSrc)...)
	run(append(append([]string{}, flags...), "-o", exe, src, lib)...)
	return lib, exe
}

func TestReadelfCompiled(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Skip("readelf not installed")
	}
	builds := []struct {
		name  string
		flags []string
	}{
		{"fp", []string{"-O2", "-g", "-fno-omit-frame-pointer"}},
		{"nofp", []string{"-O2"}},
		{"o0", []string{"-O0"}},
		// Without asynchronous unwind tables and with -g, gcc writes .debug_frame; the
		// C runtime's objects still bring .eh_frame, so both sections are compared.
		{"debugframe", []string{"-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-exceptions"}},
	}
	dir := t.TempDir()
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			lib, exe := gccBuild(t, dir, b.name, b.flags...)
			for _, p := range []string{lib, exe} {
				diffFile(t, p)
			}
			// The library's .eh_frame has no FDE: Build takes .debug_frame.
			if b.name == "debugframe" {
				f, err := elf.Open(lib)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				tb, err := Build(f)
				if err != nil {
					t.Fatal(err)
				}
				if tb.Source != ".debug_frame" || tb.FDEs == 0 {
					t.Errorf("%s: Build read %s, %d FDEs; want .debug_frame", lib, tb.Source, tb.FDEs)
				}
			}
		})
	}
}

// testCXXProgram brings what C++ adds to frames: personality routines and LSDAs ("zPLR"
// CIEs), landing pads, and cleanups run during unwinding.
const testCXXProgram = `
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

struct Shape {
	virtual ~Shape() = default;
	virtual double area(int n) const = 0;
};
struct Square : Shape {
	double s;
	explicit Square(double s) : s(s) {}
	double area(int n) const override {
		if (n > 1000) throw std::runtime_error("too big: " + std::to_string(n));
		return s * s * n;
	}
};

__attribute__((noinline)) double total(const std::vector<std::unique_ptr<Shape>> &v, int n) {
	double t = 0;
	for (auto &s : v) {
		try {
			t += s->area(n);
		} catch (const std::exception &e) {
			std::puts(e.what());
			t -= 1;
		}
	}
	return t;
}

int main(int argc, char **) {
	std::vector<std::unique_ptr<Shape>> v;
	for (int i = 0; i < argc + 3; i++) v.push_back(std::make_unique<Square>(i));
	std::string s = std::to_string(total(v, argc * 999));
	std::puts(s.c_str());
	return 0;
}
`

// TestReadelfCompilers compares the output of g++, clang and clang++, each skipped when
// absent.
func TestReadelfCompilers(t *testing.T) {
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Skip("readelf not installed")
	}
	dir := t.TempDir()
	for _, b := range []struct {
		name, compiler, src string
		flags               []string
	}{
		{"gxx-O2", "g++", testCXXProgram, []string{"-O2"}},
		{"gxx-O2-fp", "g++", testCXXProgram, []string{"-O2", "-fno-omit-frame-pointer"}},
		{"clangxx-O2", "clang++", testCXXProgram, []string{"-O2"}},
		// Without the test library, the program's one call into it goes to libc's abs.
		{"clang-O2", "clang", testProgram, []string{"-O2", "-Dlib_entry=abs"}},
		{"clang-O0-fp", "clang", testProgram, []string{"-O0", "-fno-omit-frame-pointer", "-Dlib_entry=abs"}},
	} {
		t.Run(b.name, func(t *testing.T) {
			if _, err := exec.LookPath(b.compiler); err != nil {
				t.Skip(b.compiler + " not installed")
			}
			ext := ".c"
			if b.src == testCXXProgram {
				ext = ".cc"
			}
			src := filepath.Join(dir, b.name+ext)
			if err := os.WriteFile(src, []byte(b.src), 0o644); err != nil {
				t.Fatal(err)
			}
			exe := filepath.Join(dir, b.name)
			args := append(append([]string{}, b.flags...), "-o", exe, src)
			if out, err := exec.CommandContext(t.Context(), b.compiler, args...).CombinedOutput(); err != nil {
				t.Fatalf("%s %v: %v\n%s", b.compiler, args, err, out)
			}
			diffFile(t, exe)
		})
	}
}

// TestReadelfGo compares a Go binary: its only frame section is a compressed .debug_frame
// of CIE version 3 with a data alignment of -4.
func TestReadelfGo(t *testing.T) {
	for _, tool := range []string{"go", "readelf"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " not installed")
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	prog := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"frames\") }\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "gohello")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", exe, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tb, err := Build(f)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Source != ".debug_frame" || tb.Skipped != 0 {
		t.Fatalf("Source %q, %d skipped (%v)", tb.Source, tb.Skipped, tb.SkipReason)
	}
	st := compareWithReadelf(t, tb, readelfFrames(t, exe, readelfArchOf(tb.Arch))[".debug_frame"], nil)
	t.Logf("Go binary: %d FDEs, %d table rows, %d readelf rows compared, %d disagreements", tb.FDEs, len(tb.Rows), st.rows, len(st.disagreements))
	if st.rows == 0 || len(st.disagreements) > 0 {
		t.Errorf("rows %d, disagreements %v", st.rows, st.disagreements[:min(len(st.disagreements), 20)])
	}
}

func TestReadelfDebugFrameOnly(t *testing.T) {
	for _, tool := range []string{"gcc", "readelf", "objcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " not installed")
		}
	}
	dir := t.TempDir()
	for _, b := range []struct {
		name  string
		flags []string
	}{
		{"dbg", nil},
		// Compressed debug sections: Build reads them decompressed.
		{"dbgz", []string{"-gz=zlib"}},
	} {
		t.Run(b.name, func(t *testing.T) {
			flags := append([]string{"-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-exceptions"}, b.flags...)
			_, exe := gccBuild(t, dir, b.name, flags...)
			only := filepath.Join(dir, b.name+"-only")
			if out, err := exec.CommandContext(t.Context(), "objcopy", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr", exe, only).CombinedOutput(); err != nil {
				t.Fatalf("objcopy: %v\n%s", err, out)
			}
			f, err := elf.Open(only)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if s := f.Section(".debug_frame"); s == nil || (len(b.flags) > 0) != (s.Flags&elf.SHF_COMPRESSED != 0) {
				t.Fatalf(".debug_frame missing or not compressed as asked: %v", s)
			}
			tb, err := Build(f)
			if err != nil {
				t.Fatal(err)
			}
			if tb.Source != ".debug_frame" {
				t.Fatalf("Source = %q, want .debug_frame", tb.Source)
			}
			st := compareWithReadelf(t, tb, readelfFrames(t, only, readelfArchOf(tb.Arch))[".debug_frame"], nil)
			t.Logf("%s: .debug_frame only: %d FDEs, %d rows compared, %d disagreements", b.name, tb.FDEs, st.rows, len(st.disagreements))
			if st.rows == 0 || len(st.disagreements) > 0 {
				t.Errorf("rows %d, disagreements %v", st.rows, st.disagreements)
			}
		})
	}
}

// systemFiles are binaries most Debian and Ubuntu systems have; each is skipped when absent.
func systemFiles(t testing.TB) []string {
	var res []string
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/python3", "/bin/ls",
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		res = append(res, real)
	}
	return res
}

func TestReadelfSystemFiles(t *testing.T) {
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Skip("readelf not installed")
	}
	files := systemFiles(t)
	if len(files) == 0 {
		t.Skip("no system files found")
	}
	for _, p := range files {
		t.Run(filepath.Base(p), func(t *testing.T) {
			st := diffFile(t, p)
			// glibc's __restore_rt is the signal trampoline of x86-64 processes.
			if strings.HasPrefix(filepath.Base(p), "libc.so") && st.signal == 0 {
				t.Errorf("%s: no signal frame row (__restore_rt)", p)
			}
		})
	}
}

// TestReadelfListed compares the files named in PROFSYM_CFI_READELF_FILES (separated by
// spaces), to check a node's binaries, or a new compiler's, before trusting their tables.
func TestReadelfListed(t *testing.T) {
	files := strings.Fields(os.Getenv("PROFSYM_CFI_READELF_FILES"))
	if len(files) == 0 {
		t.Skip("PROFSYM_CFI_READELF_FILES not set")
	}
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Skip("readelf not installed")
	}
	for _, p := range files {
		t.Run(filepath.Base(p), func(t *testing.T) { diffFile(t, p) })
	}
}
