package server

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/uploadcli"
)

// Two C programs sharing a header of inline functions and a type: what dwz -m moves into
// the common file (the abstract instances of the inlined functions with their names, the
// type, the producer and directory strings).
var companionSources = map[string]string{
	"shared.h": `
#include <stdio.h>
struct point { int x, y; };
static inline __attribute__((always_inline)) int sq(int v) { return v * v; }
static inline __attribute__((always_inline)) int sumsq(int a, int b) { return sq(a) + sq(b); }
static inline int dist2(struct point p) { return sumsq(p.x, p.y); }
`,
	"p1.c": `
#include "shared.h"
__attribute__((noinline)) int f1(int n) { struct point p = {n, n + 1}; return dist2(p) + sq(n); }
int main(int argc, char **argv) { (void)argv; printf("%d\n", f1(argc)); return 0; }
`,
	"p2.c": `
#include "shared.h"
__attribute__((noinline)) int f2(int n) { struct point p = {n, 2 * n}; return dist2(p) * 3; }
int main(int argc, char **argv) { (void)argv; printf("%d\n", f2(argc)); return 0; }
`,
}

func need(t *testing.T, tools ...string) {
	t.Helper()
	testsupport.RequireTools(t, tools...)
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// dwzBuild is a dwz'ed program split as a distribution ships it.
type dwzBuild struct {
	dir        string
	orig       string // the program before dwz, for reference answers
	dwzed      string // after dwz, with its DWARF, the common file beside it
	exe, debug string // stripped executable and its debug file (.gnu_debugaltlink kept)
	common     string // dwz's common file
	ids        buildid.IDs
	supID      string
	section    string // of the link
	addrs      []uint64
}

// dwzVariants are the ways dwz links a debug file to its common file: .gnu_debugaltlink
// over DWARF 5 (gcc 12's default, and what Debian's debug packages hold) and over DWARF 4,
// and DWARF 5's own .debug_sup (dwz -5), whose common file has no build ID note and is named
// by its .debug_sup checksum.
var dwzVariants = []struct {
	name     string
	dwarf    int
	debugSup bool
}{{"dwarf5-altlink", 5, false}, {"dwarf4-altlink", 4, false}, {"dwarf5-debug_sup", 5, true}}

// buildDWZ compiles p1 and p2 with gcc -g -O2, keeps p1 as it was, runs dwz -m over both so
// a common file exists, and splits p1 into a stripped executable and a debug file.
func buildDWZ(t *testing.T, dwarf int, debugSup bool) dwzBuild {
	t.Helper()
	need(t, "gcc", "dwz", "objcopy")
	dir := t.TempDir()
	for name, text := range companionSources {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"p1", "p2"} {
		run(t, dir, "gcc", "-g", fmt.Sprintf("-gdwarf-%d", dwarf), "-O2", "-Wl,--build-id", "-o", p, p+".c")
	}
	run(t, dir, "cp", "p1", "p1.orig")
	// -M with a relative name: the common file is found beside the files that link to it.
	args := []string{"-m", "common.debug", "-M", "common.debug", "p1", "p2"}
	section := ".gnu_debugaltlink"
	if debugSup {
		args, section = append([]string{"-5"}, args...), ".debug_sup"
	}
	run(t, dir, "dwz", args...)
	b := dwzBuild{dir: dir, orig: filepath.Join(dir, "p1.orig"), dwzed: filepath.Join(dir, "p1"),
		exe: filepath.Join(dir, "p1.stripped"), debug: filepath.Join(dir, "p1.debug"), common: filepath.Join(dir, "common.debug")}
	run(t, dir, "objcopy", "--only-keep-debug", "p1", "p1.debug")
	run(t, dir, "objcopy", "--strip-all", "--add-gnu-debuglink=p1.debug", "p1", "p1.stripped")
	var err error
	if b.ids, err = buildid.FromFile(b.dwzed); err != nil {
		t.Fatal(err)
	}
	_, info, err := debuginfo.OpenIndex(b.debug, debuginfo.Options{})
	if err != nil || info.Supplementary == nil || info.Supplementary.Section != section {
		t.Fatalf("the debug file does not link to the common file: %+v, %v", info.Supplementary, err)
	}
	b.supID, b.section = info.Supplementary.ID, section
	b.addrs = functionAddrs(t, b.orig)
	return b
}

// functionAddrs lists every byte address of every function symbol of path.
func functionAddrs(t *testing.T, path string) []uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var addrs []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && s.Value != 0 {
			for a := s.Value; a < s.Value+s.Size; a++ {
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) == 0 {
		t.Fatalf("%s: no function symbols", path)
	}
	return addrs
}

// refFrame is one frame as a reference tool prints it.
type refFrame struct {
	function, file string
	line, column   uint32
}

// parseLoc reads file:line[:column]; "??" (unknown) is the empty file, as in our frames.
func parseLoc(loc string) (file string, line, col uint32) {
	file, line, col = parseLocRaw(loc)
	if file == "??" {
		file = ""
	}
	return file, line, col
}

// known drops the answer of an address a reference tool could not resolve at all (one
// frame, "??" at "??:0"): ours is then empty.
func known(frames []refFrame) []refFrame {
	if len(frames) == 1 && frames[0] == (refFrame{function: "??"}) {
		return nil
	}
	return frames
}

func parseLocRaw(loc string) (file string, line, col uint32) {
	parts := strings.Split(loc, ":")
	if len(parts) >= 3 {
		l, _ := strconv.Atoi(parts[len(parts)-2])
		c, _ := strconv.Atoi(parts[len(parts)-1])
		return strings.Join(parts[:len(parts)-2], ":"), uint32(l), uint32(c)
	}
	if len(parts) == 2 {
		l, _ := strconv.Atoi(parts[1])
		return parts[0], uint32(l), 0
	}
	return loc, 0, 0
}

// llvmSymbolize runs llvm-symbolizer with inlining on every address: frames per address,
// innermost first; "??" functions and "??:0" locations as it prints them.
func llvmSymbolize(t *testing.T, obj string, addrs []uint64) [][]refFrame {
	t.Helper()
	var in bytes.Buffer
	for _, a := range addrs {
		fmt.Fprintf(&in, "0x%x\n", a)
	}
	cmd := exec.CommandContext(t.Context(), "llvm-symbolizer", "--obj="+obj, "--inlining", "--functions=linkage", "--demangle")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	var res [][]refFrame
	var cur []refFrame
	lines := strings.Split(string(out), "\n")
	for i := 0; i < len(lines); i++ {
		if lines[i] == "" {
			if cur != nil {
				res = append(res, known(cur))
				cur = nil
			}
			continue
		}
		file, line, col := "", uint32(0), uint32(0)
		if i+1 < len(lines) {
			file, line, col = parseLoc(lines[i+1])
		}
		cur = append(cur, refFrame{function: lines[i], file: file, line: line, column: col})
		i++
	}
	if cur != nil {
		res = append(res, known(cur))
	}
	if len(res) != len(addrs) {
		t.Fatalf("llvm-symbolizer answered %d addresses of %d", len(res), len(addrs))
	}
	return res
}

// euAddr2line runs elfutils' eu-addr2line -a -f -i, which reads .gnu_debugaltlink files:
// frames per address, innermost first.
func euAddr2line(t *testing.T, obj string, addrs []uint64) [][]refFrame {
	t.Helper()
	args := []string{"-e", obj, "-a", "-f", "-i"}
	for _, a := range addrs {
		args = append(args, fmt.Sprintf("0x%x", a))
	}
	out, err := exec.CommandContext(t.Context(), "eu-addr2line", args...).Output()
	if err != nil {
		t.Fatalf("eu-addr2line: %v", err)
	}
	var res [][]refFrame
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "0x") {
			res = append(res, nil)
			continue
		}
		if len(res) == 0 || !sc.Scan() {
			t.Fatalf("eu-addr2line output out of step at %q", l)
		}
		name, _, _ := strings.Cut(l, " inlined at ")
		file, line, col := parseLoc(sc.Text())
		res[len(res)-1] = append(res[len(res)-1], refFrame{function: name, file: file, line: line, column: col})
	}
	for i := range res {
		res[i] = known(res[i])
	}
	if len(res) != len(addrs) {
		t.Fatalf("eu-addr2line answered %d addresses of %d", len(res), len(addrs))
	}
	return res
}

// agreement counts the addresses whose frames match the reference's (function, file, line,
// column), and the frames where the reference could not read what dwz moved and ours did.
// With lenient, what the reference cannot give is not held against ours: a function it names
// "??", and the directory of a file it prints relative (llvm-symbolizer 14 reads neither
// names nor compilation directories from a .gnu_debugaltlink file).
func agreement(ours [][]symbolizecodec.Frame, ref [][]refFrame, lenient bool) (same int, filled int, firstDiff string) {
	for i := range ref {
		ok := len(ours[i]) == len(ref[i])
		for j := 0; ok && j < len(ref[i]); j++ {
			o, r := ours[i][j], ref[i][j]
			switch {
			case lenient && r.function == "??" && o.Function != "":
				filled++
			case o.Function != r.function:
				ok = false
			}
			switch {
			case lenient && r.file != "" && !filepath.IsAbs(r.file) && strings.HasSuffix(o.File, "/"+r.file):
				filled++
			case o.File != r.file:
				ok = false
			}
			if o.Line != r.line || o.Column != r.column {
				ok = false
			}
		}
		if ok {
			same++
		} else if firstDiff == "" {
			firstDiff = fmt.Sprintf("address %d: ours %+v, reference %+v", i, ours[i], ref[i])
		}
	}
	return same, filled, firstDiff
}

func symbolizeOne(t *testing.T, url string, mod *symbolizerv1.Module) (*symbolizerv1.ModuleResult, [][]symbolizecodec.Frame) {
	t.Helper()
	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, url)
	resp, err := client.Symbolize(context.Background(), connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{mod}}))
	if err != nil {
		t.Fatal(err)
	}
	m := resp.Msg.Modules[0]
	frames, err := symbolizecodec.Decode(m, len(mod.Addresses))
	if err != nil {
		t.Fatal(err)
	}
	return m, frames
}

func companionState(cs []*debuginfov1.Companion, kind debuginfov1.CompanionKind) (string, debuginfov1.CompanionState) {
	for _, c := range cs {
		if c.Kind == kind {
			return c.Id, c.State
		}
	}
	return "", debuginfov1.CompanionState_COMPANION_STATE_UNSPECIFIED
}

func getRecord(t *testing.T, url, id string) *debuginfov1.Debuginfo {
	t.Helper()
	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, url)
	g, err := dc.Get(context.Background(), connect.NewRequest(&debuginfov1.GetRequest{BuildId: id}))
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return g.Msg.Debuginfo
}

// TestDWZThroughStore: a dwz'ed program's stripped executable and debug file are uploaded
// without the common file: the module is answered from the symbol tables, and its status
// names the missing file; the common file is uploaded later under its ID and the answers
// become full, the same as llvm-symbolizer's on the program before dwz, and as
// eu-addr2line's on the dwz'ed file (llvm-symbolizer 14 does not read .gnu_debugaltlink: it
// prints "??" for the functions dwz moved, with the right lines). The store serves the
// common file to debuginfod clients under its ID.
func TestDWZThroughStore(t *testing.T) {
	need(t, "llvm-symbolizer", "eu-addr2line", "debuginfod-find")
	for _, v := range dwzVariants {
		t.Run(v.name, func(t *testing.T) { dwzThroughStore(t, buildDWZ(t, v.dwarf, v.debugSup)) })
	}
}

func dwzThroughStore(t *testing.T, b dwzBuild) {
	r := start(t)
	mod := &symbolizerv1.Module{GnuBuildId: b.ids.GNU, Addresses: b.addrs}

	// One after the other: two uploads under one build ID at once are refused (in progress).
	upload(t, r.url, b.debug)
	upload(t, r.url, b.exe)
	if d := getRecord(t, r.url, b.ids.GNU); d.Type != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO || !d.HasProgramHeaders {
		t.Fatalf("record of the program: %v", d)
	} else if id, st := companionState(d.Companions, debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY); id != b.supID || st != debuginfov1.CompanionState_COMPANION_STATE_MISSING {
		t.Fatalf("companions before the common file: %v", d.Companions)
	}

	// The binary's page says so too.
	if code, page := testsupport.Get(t, r.url+"/ui/buildid/gnu/"+b.ids.GNU); code != http.StatusOK ||
		!strings.Contains(string(page), "Supplementary DWARF file (dwz)</dt><dd><code>"+b.supID+"</code>: <span class=\"missing\">") {
		t.Errorf("record page (%d) does not show the missing common file:\n%s", code, page)
	}

	// Missing: symbol-table answers, exactly the engine's on the debug file alone, and a
	// status that says what is missing.
	m, frames := symbolizeOne(t, r.url, mod)
	if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK || m.Fidelity != symbolizerv1.Fidelity_FIDELITY_SYMBOLS ||
		!strings.Contains(m.Message, b.supID) || !strings.Contains(m.Message, "not stored") {
		t.Fatalf("without the common file: %v %v %q", m.Status, m.Fidelity, m.Message)
	}
	if _, st := companionState(m.Companions, debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY); st != debuginfov1.CompanionState_COMPANION_STATE_MISSING {
		t.Fatalf("module companions without the common file: %v", m.Companions)
	}
	alone := filepath.Join(t.TempDir(), "p1.debug")
	run(t, "", "cp", b.debug, alone)
	want := engineFrames(t, alone, b.addrs)
	resolved := 0
	for i := range want {
		if fmt.Sprint(frames[i]) != fmt.Sprint(want[i]) {
			t.Fatalf("address %#x without the common file: %+v, want %+v", b.addrs[i], frames[i], want[i])
		}
		if len(frames[i]) > 1 || len(frames[i]) == 1 && frames[i][0].File != "" {
			t.Fatalf("address %#x: %+v: more than a symbol without the DWARF", b.addrs[i], frames[i])
		}
		resolved += len(frames[i])
	}
	if resolved == 0 {
		t.Fatal("the symbol tables answered nothing")
	}

	// Uploaded later: recognized as a supplementary file whatever the CLI thinks.
	upload(t, r.url, b.common)
	if d := getRecord(t, r.url, b.supID); d.Type != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY {
		t.Fatalf("common file stored as %v", d.Type)
	}
	if d := getRecord(t, r.url, b.ids.GNU); len(d.Companions) != 1 || d.Companions[0].State != debuginfov1.CompanionState_COMPANION_STATE_AVAILABLE {
		t.Fatalf("companions after the common file: %v", d.Companions)
	}
	m, frames = symbolizeOne(t, r.url, mod)
	if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK || m.Fidelity != symbolizerv1.Fidelity_FIDELITY_FULL || m.Message != "" {
		t.Fatalf("with the common file: %v %v %q", m.Status, m.Fidelity, m.Message)
	}
	checkFull(t, b, frames)

	// A module asking for the common file itself is told it is no binary.
	if m, _ := symbolizeOne(t, r.url, &symbolizerv1.Module{GnuBuildId: b.supID, Addresses: []uint64{1}}); m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND {
		t.Errorf("the common file as a module: %v %q", m.Status, m.Message)
	}

	// debuginfod clients get the common file by its ID, as from distro debuginfod servers.
	cmd := exec.CommandContext(t.Context(), "debuginfod-find", "debuginfo", b.supID)
	cmd.Env = append(os.Environ(), "DEBUGINFOD_URLS="+r.url, "DEBUGINFOD_CACHE_PATH="+t.TempDir(), "DEBUGINFOD_TIMEOUT=10")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("debuginfod-find debuginfo %s: %v", b.supID, err)
	}
	got, err := os.ReadFile(strings.TrimSpace(string(out)))
	wantBytes, _ := os.ReadFile(b.common)
	if err != nil || !bytes.Equal(got, wantBytes) {
		t.Fatalf("debuginfod-find served %d bytes (%v), want the common file's %d", len(got), err, len(wantBytes))
	}
}

// checkFull requires full answers: the engine's on the program before dwz, and agreement
// with llvm-symbolizer on it and with eu-addr2line on the dwz'ed program.
func checkFull(t *testing.T, b dwzBuild, frames [][]symbolizecodec.Frame) {
	t.Helper()
	want := engineFrames(t, b.orig, b.addrs)
	inlined := 0
	for i := range want {
		if fmt.Sprint(frames[i]) != fmt.Sprint(want[i]) {
			t.Fatalf("address %#x: %+v, want %+v (the program before dwz)", b.addrs[i], frames[i], want[i])
		}
		if len(frames[i]) > 1 {
			inlined++
		}
	}
	if inlined == 0 {
		t.Fatal("no inlined frames: the test program lost its point")
	}
	same, _, diff := agreement(frames, llvmSymbolize(t, b.orig, b.addrs), false)
	if same != len(b.addrs) {
		t.Errorf("llvm-symbolizer on the program before dwz: %d of %d addresses agree; first difference %s", same, len(b.addrs), diff)
	}
	sameDWZ, filled, diff := agreement(frames, llvmSymbolize(t, b.dwzed, b.addrs), true)
	if sameDWZ != len(b.addrs) || filled == 0 {
		t.Errorf("llvm-symbolizer on the dwz'ed program: %d of %d addresses agree, %d names or directories it lacks given by us; first difference %s", sameDWZ, len(b.addrs), filled, diff)
	}
	euNote := ""
	if b.section == ".gnu_debugaltlink" {
		sameEU, _, diff := agreement(frames, euAddr2line(t, b.dwzed, b.addrs), false)
		if sameEU != len(b.addrs) {
			t.Errorf("eu-addr2line on the dwz'ed program: %d of %d addresses agree; first difference %s", sameEU, len(b.addrs), diff)
		}
		euNote = fmt.Sprintf("; %d agree with eu-addr2line on the dwz'ed one", sameEU)
	} else {
		// elfutils 0.188 does not follow .debug_sup for inlined subroutines (it answers the
		// outer function at the inlined code's line): the program before dwz is the reference.
		euNote = "; eu-addr2line not compared (it does not read .debug_sup inline chains)"
	}
	t.Logf("%s: %d addresses (%d with inlined frames): %d agree with llvm-symbolizer on the program before dwz; on the dwz'ed one %d agree where it can read, with %d names or directories it lacks given by us%s",
		b.section, len(b.addrs), inlined, same, sameDWZ, filled, euNote)
}

// TestDWZThroughDebuginfod: a symbolizer with nothing uploaded fetches the debug file from
// an upstream debuginfod (another symbolizer), finds that its DWARF names a supplementary
// file and asks the upstream for that by its ID too. While the upstream lacks it, the module
// is answered from the symbol tables and says the file is missing; once the upstream has
// it, the answers become full.
func TestDWZThroughDebuginfod(t *testing.T) {
	need(t, "llvm-symbolizer", "eu-addr2line")
	b := buildDWZ(t, 5, false)
	upstream := start(t)
	upload(t, upstream.url, b.debug)
	upload(t, upstream.url, b.exe)
	r := start(t, "--debuginfod-url", upstream.url, "--debuginfod-timeout", "10s", "--debuginfod-negative-ttl", "200ms")
	mod := &symbolizerv1.Module{GnuBuildId: b.ids.GNU, Addresses: b.addrs}

	m, _ := symbolizeOne(t, r.url, mod)
	if _, st := companionState(m.Companions, debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY); m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK ||
		m.Fidelity != symbolizerv1.Fidelity_FIDELITY_SYMBOLS || st != debuginfov1.CompanionState_COMPANION_STATE_MISSING {
		t.Fatalf("upstream without the common file: %v %v %q %v", m.Status, m.Fidelity, m.Message, m.Companions)
	}

	upload(t, upstream.url, b.common)
	var frames [][]symbolizecodec.Frame
	uploaded := time.Now()
	for deadline := uploaded.Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if m, frames = symbolizeOne(t, r.url, mod); m.Fidelity == symbolizerv1.Fidelity_FIDELITY_FULL {
			t.Logf("full answers %v after the upstream got the common file", time.Since(uploaded).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the upstream got the common file: %v %v %q %v", m.Status, m.Fidelity, m.Message, m.Companions)
		}
	}
	if _, st := companionState(m.Companions, debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY); st != debuginfov1.CompanionState_COMPANION_STATE_AVAILABLE {
		t.Fatalf("companions through debuginfod: %v", m.Companions)
	}
	if d := getRecord(t, r.url, b.supID); d.Type != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY || d.Source != debuginfov1.UploadSource_UPLOAD_SOURCE_DEBUGINFOD {
		t.Fatalf("fetched common file stored as %v from %v", d.Type, d.Source)
	}
	checkFull(t, b, frames)
}

// buildSplit compiles p1 with gcc -gsplit-dwarf and packs its .dwo into p1.dwp with binutils'
// dwp: the executable (its package beside it as bin+".dwp"), its IDs and every address of its
// functions.
func buildSplit(t *testing.T) (bin string, ids buildid.IDs, addrs []uint64) {
	t.Helper()
	need(t, "gcc", "dwp")
	dir := t.TempDir()
	for name, text := range companionSources {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dir, "gcc", "-g", "-gdwarf-4", "-gsplit-dwarf", "-O2", "-c", "p1.c")
	run(t, dir, "gcc", "-Wl,--build-id", "-o", "p1", "p1.o")
	run(t, dir, "dwp", "-e", "p1", "-o", "p1.dwp")
	// p1.dwo stays where gcc wrote it, on this machine: the server must not read a file an
	// upload names (its skeleton's compilation directory), only what the store holds.
	if _, err := os.Stat(filepath.Join(dir, "p1.dwo")); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "p1")
	ids, err := buildid.FromFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return bin, ids, functionAddrs(t, bin)
}

// TestSplitDWARFThroughStore: a gcc -gsplit-dwarf build whose .dwo files were packed into a
// .dwp with binutils' dwp and removed. Uploaded alone, the executable's skeleton units give
// lines, and the status says the package is missing; the package uploaded beside it (the
// CLI takes the build ID from the executable next to it) makes the answers full, the same as
// llvm-symbolizer's reading the same package.
func TestSplitDWARFThroughStore(t *testing.T) {
	need(t, "llvm-symbolizer")
	bin, ids, addrs := buildSplit(t)
	mod := &symbolizerv1.Module{GnuBuildId: ids.GNU, Addresses: addrs}
	r := start(t)

	upload(t, r.url, bin)
	m, frames := symbolizeOne(t, r.url, mod)
	if id, st := companionState(m.Companions, debuginfov1.CompanionKind_COMPANION_KIND_DWARF_PACKAGE); m.Fidelity != symbolizerv1.Fidelity_FIDELITY_LINES ||
		id != ids.GNU || st != debuginfov1.CompanionState_COMPANION_STATE_MISSING || !strings.Contains(m.Message, "DWARF package") {
		t.Fatalf("without the package: %v %v %q %v", m.Status, m.Fidelity, m.Message, m.Companions)
	}
	for i, f := range frames {
		if len(f) > 1 {
			t.Fatalf("address %#x: inlined frames %+v without the package", addrs[i], f)
		}
	}

	res := upload(t, r.url, bin+".dwp")
	if len(res) != 1 || res[0].Outcome != "uploaded" || res[0].BuildID != ids.GNU {
		t.Fatalf("package upload: %+v", res)
	}
	if d := getRecord(t, r.url, ids.GNU); len(d.Companions) != 1 || d.Companions[0].State != debuginfov1.CompanionState_COMPANION_STATE_AVAILABLE {
		t.Fatalf("companions after the package: %v", d.Companions)
	}
	m, frames = symbolizeOne(t, r.url, mod)
	if m.Fidelity != symbolizerv1.Fidelity_FIDELITY_FULL || m.Message != "" {
		t.Fatalf("with the package: %v %v %q %v", m.Status, m.Fidelity, m.Message, m.Companions)
	}
	// The engine and llvm-symbolizer both read p1.dwp beside p1.
	want := engineFrames(t, bin, addrs)
	inlined := 0
	for i := range want {
		if fmt.Sprint(frames[i]) != fmt.Sprint(want[i]) {
			t.Fatalf("address %#x: %+v, want %+v", addrs[i], frames[i], want[i])
		}
		if len(frames[i]) > 1 {
			inlined++
		}
	}
	same, _, diff := agreement(frames, llvmSymbolize(t, bin, addrs), false)
	if same != len(addrs) || inlined == 0 {
		t.Errorf("llvm-symbolizer with the package: %d of %d addresses agree (%d with inlined frames); first difference %s", same, len(addrs), inlined, diff)
	}
	t.Logf("%d addresses (%d with inlined frames): %d agree with llvm-symbolizer reading the same .dwp", len(addrs), inlined, same)
}

// TestLooseDWOThroughStore: a gcc -gsplit-dwarf build of two units whose .dwo files were
// never packed. The upload CLI, given the executable alone, packs its .dwo files into a DWARF
// package and uploads it under the executable's build ID; with the .dwo files then gone from
// the disk, the answers through the store are full and the same as llvm-symbolizer's on the
// build as the compiler left it. .dwo files named among the files are not uploaded
// themselves. With --no-pack-dwo only the executable goes, and the answers have lines only.
func TestLooseDWOThroughStore(t *testing.T) {
	need(t, "gcc", "objcopy", "llvm-symbolizer")
	for _, c := range []struct {
		name     string
		dwarf    string
		withDWOs bool // the .dwo files are among the files uploaded
		noPack   bool
		debug    bool // its debug file (objcopy --only-keep-debug) is uploaded too: one package for both
	}{{"dwarf5", "-gdwarf-5", false, false, false}, {"dwarf4-with-dwo-files", "-gdwarf-4", true, false, false},
		{"dwarf5-no-pack-dwo", "-gdwarf-5", false, true, false}, {"dwarf5-with-debug-file", "-gdwarf-5", false, false, true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range companionSources {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			run(t, dir, "gcc", "-g", c.dwarf, "-gsplit-dwarf", "-O2", "-c", "p1.c", "p2.c")
			// Two units: p2's main renamed away.
			run(t, dir, "objcopy", "--redefine-sym", "main=p2_main", "p2.o")
			run(t, dir, "gcc", "-Wl,--build-id", "-o", "p12", "p1.o", "p2.o")
			bin := filepath.Join(dir, "p12")
			ids, err := buildid.FromFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			addrs := functionAddrs(t, bin)
			// llvm-symbolizer reads the .dwo files where gcc wrote them.
			ref := llvmSymbolize(t, bin, addrs)

			r := start(t)
			dwos := []string{filepath.Join(dir, "p1.dwo"), filepath.Join(dir, "p2.dwo")}
			paths := []string{bin}
			if c.withDWOs {
				paths = append(paths, dwos...)
			}
			if c.debug {
				run(t, dir, "objcopy", "--only-keep-debug", "p12", "p12.debug")
				paths = append(paths, bin+".debug")
			}
			res := uploadWith(t, r.url, func(u *uploadcli.UploadCmd) {
				u.NoPackDWO = c.noPack
				// Files of one build ID uploaded at once: the CLI sends them one after the
				// other (the store takes one upload per build ID at a time).
				u.Parallel = 4
			}, paths...)
			if c.withDWOs || c.debug {
				var rest []uploadcli.Result
				for _, x := range res {
					if strings.HasSuffix(x.Path, ".debug") && x.Err == nil {
						continue
					}
					if strings.HasSuffix(x.Path, ".debug.dwp") {
						// Made from the debug file instead of the executable: the same package.
						x.Path = bin + ".dwp"
					}
					if strings.HasSuffix(x.Path, ".dwo") {
						if x.Outcome != "skipped" || x.Err != nil || !strings.Contains(x.Detail, "split DWARF object") {
							t.Errorf("%s: %+v, want it skipped as a split DWARF object", x.Path, x)
						}
						continue
					}
					rest = append(rest, x)
				}
				res = rest
			}
			if c.noPack {
				if len(res) != 1 || res[0].Outcome != "uploaded" {
					t.Fatalf("upload with --no-pack-dwo: %+v", res)
				}
			} else if len(res) != 2 || res[1].Outcome != "uploaded" || res[1].BuildID != ids.GNU || res[1].Path != bin+".dwp" ||
				!strings.Contains(res[1].Detail, "2 of 2 split units") {
				t.Fatalf("upload: %+v", res)
			}
			for _, d := range dwos {
				if err := os.Remove(d); err != nil {
					t.Fatal(err)
				}
			}

			m, frames := symbolizeOne(t, r.url, &symbolizerv1.Module{GnuBuildId: ids.GNU, Addresses: addrs})
			_, st := companionState(m.Companions, debuginfov1.CompanionKind_COMPANION_KIND_DWARF_PACKAGE)
			if c.noPack {
				if m.Fidelity != symbolizerv1.Fidelity_FIDELITY_LINES || st != debuginfov1.CompanionState_COMPANION_STATE_MISSING {
					t.Fatalf("without the package: %v %v %q %v", m.Status, m.Fidelity, m.Message, m.Companions)
				}
				return
			}
			if m.Fidelity != symbolizerv1.Fidelity_FIDELITY_FULL || m.Message != "" || st != debuginfov1.CompanionState_COMPANION_STATE_AVAILABLE {
				t.Fatalf("with the package made at upload: %v %v %q %v", m.Status, m.Fidelity, m.Message, m.Companions)
			}
			inlined := 0
			for _, f := range frames {
				if len(f) > 1 {
					inlined++
				}
			}
			same, _, diff := agreement(frames, ref, false)
			if same != len(addrs) || inlined == 0 {
				t.Errorf("%d of %d addresses agree with llvm-symbolizer on the .dwo files (%d with inlined frames); first difference %s", same, len(addrs), inlined, diff)
			}
			t.Logf("%d addresses (%d with inlined frames): %d agree with llvm-symbolizer reading the .dwo files", len(addrs), inlined, same)
		})
	}
}

// TestDWZReplicasShareTheUpgrade: two replicas over one store and one Redis, the second
// keeping no index in memory (every answer loads the stored index, as on a replica that has
// not loaded it). The index stored while the common file was missing, and the results
// written to Redis from it, are never served once the file is stored: the other replica's
// upload reaches the second within its lookup TTL, and its answers become full and stay so.
func TestDWZReplicasShareTheUpgrade(t *testing.T) {
	need(t, "llvm-symbolizer", "eu-addr2line")
	b := buildDWZ(t, 5, false)
	redis := testsupport.StartRedis(t)
	storeDir := t.TempDir()
	a := start(t, "--store-dir", storeDir, "--redis-url", redis.URL())
	r := start(t, "--store-dir", storeDir, "--redis-url", redis.URL(), "--result-cache-entries", "0", "--index-cache-bytes", "1")
	mod := &symbolizerv1.Module{GnuBuildId: b.ids.GNU, Addresses: b.addrs}

	upload(t, a.url, b.debug)
	upload(t, a.url, b.exe)
	var first [][]symbolizecodec.Frame
	for i := range 2 { // the second from the index stored by the first
		m, frames := symbolizeOne(t, r.url, mod)
		if m.Fidelity != symbolizerv1.Fidelity_FIDELITY_SYMBOLS || !strings.Contains(m.Message, b.supID) {
			t.Fatalf("call %d without the common file: %v %q", i, m.Fidelity, m.Message)
		}
		if i == 1 && fmt.Sprint(frames) != fmt.Sprint(first) {
			t.Fatal("the cached answer differs from the first")
		}
		first = frames
	}

	upload(t, a.url, b.common)
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, frames := symbolizeOne(t, r.url, mod)
		if m.Fidelity == symbolizerv1.Fidelity_FIDELITY_FULL {
			checkFull(t, b, frames)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other replica still answers %v %q 10 s after the upload", m.Fidelity, m.Message)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m, frames := symbolizeOne(t, r.url, mod)
	if m.Fidelity != symbolizerv1.Fidelity_FIDELITY_FULL {
		t.Fatalf("after the upgrade: %v %q", m.Fidelity, m.Message)
	}
	checkFull(t, b, frames)
}

// corpusBuild returns the engine's corpus of test binaries (testdata/build.sh, a no-op when
// it is current; the first run takes minutes).
func corpusBuild(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	run(t, root, "bash", "build.sh")
	return filepath.Join(root, "build")
}

// TestCorpusCompanionsThroughStore runs the corpus's C++ programs as distributions ship them
// through the store: stripped executables whose debug files went through dwz -m in pairs
// (.gnu_debugaltlink over DWARF 4, .debug_sup over DWARF 5), uploaded with the common file;
// and -gsplit-dwarf builds uploaded with their .dwp. Every address of every function must
// resolve as the engine resolves the unstripped original (which the engine's corpus test
// holds against llvm-symbolizer), and the agreement with llvm-symbolizer on the original is
// measured.
func TestCorpusCompanionsThroughStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the engine's corpus")
	}
	need(t, "llvm-symbolizer")
	build := corpusBuild(t)
	r := start(t)
	for _, c := range []struct {
		bin    string
		files  func(ids buildid.IDs) []string // uploaded one after the other
		kind   debuginfov1.CompanionKind
		reader string // the original, as the engine and llvm-symbolizer read it
	}{
		{"cxx-gcc-O2-dw4-nopie", func(ids buildid.IDs) []string {
			return []string{filepath.Join(build, "debug-dwz", ".build-id", ids.GNU[:2], ids.GNU[2:]+".debug"),
				filepath.Join(build, "bin", "cxx-gcc-O2-dw4-nopie.stripped-dwz"), filepath.Join(build, "debug-dwz", ".dwz", "cxx-gcc-dw4.debug")}
		}, debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY, "cxx-gcc-O2-dw4-nopie"},
		{"cxx-gcc-O2-dw5-pie", func(ids buildid.IDs) []string {
			return []string{filepath.Join(build, "debug-dwz", ".build-id", ids.GNU[:2], ids.GNU[2:]+".debug"),
				filepath.Join(build, "bin", "cxx-gcc-O2-dw5-pie.stripped-dwz"), filepath.Join(build, "debug-dwz", ".dwz", "cxx-gcc-dw5.debug")}
		}, debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY, "cxx-gcc-O2-dw5-pie"},
		{"cxx-gcc-O2-dw4-split", func(buildid.IDs) []string {
			return []string{filepath.Join(build, "bin", "cxx-gcc-O2-dw4-split"), filepath.Join(build, "bin", "cxx-gcc-O2-dw4-split.dwp")}
		}, debuginfov1.CompanionKind_COMPANION_KIND_DWARF_PACKAGE, "cxx-gcc-O2-dw4-split"},
		{"cxx-gcc-O2-dw5-split", func(buildid.IDs) []string {
			return []string{filepath.Join(build, "bin", "cxx-gcc-O2-dw5-split"), filepath.Join(build, "bin", "cxx-gcc-O2-dw5-split.dwp")}
		}, debuginfov1.CompanionKind_COMPANION_KIND_DWARF_PACKAGE, "cxx-gcc-O2-dw5-split"},
	} {
		t.Run(c.bin, func(t *testing.T) {
			orig := filepath.Join(build, "bin", c.reader)
			ids, err := buildid.FromFile(orig)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range c.files(ids) {
				res := upload(t, r.url, f)
				if len(res) != 1 || res[0].Err != nil {
					t.Fatalf("upload %s: %+v", f, res)
				}
			}
			addrs := functionAddrs(t, orig)
			m, frames := symbolizeOne(t, r.url, &symbolizerv1.Module{GnuBuildId: ids.GNU, Addresses: addrs})
			if _, st := companionState(m.Companions, c.kind); m.Fidelity != symbolizerv1.Fidelity_FIDELITY_FULL || st != debuginfov1.CompanionState_COMPANION_STATE_AVAILABLE {
				t.Fatalf("%v %v %q %v", m.Status, m.Fidelity, m.Message, m.Companions)
			}
			want := engineFrames(t, orig, addrs)
			inlined := 0
			for i := range want {
				if fmt.Sprint(frames[i]) != fmt.Sprint(want[i]) {
					t.Fatalf("address %#x: %+v, want %+v (the engine on the original)", addrs[i], frames[i], want[i])
				}
				if len(frames[i]) > 1 {
					inlined++
				}
			}
			ref := llvmSymbolize(t, orig, addrs)
			same, _, _ := agreement(frames, ref, false)
			// Names differ where llvm-symbolizer 14's demangler does (template parameters it
			// prints as auto, for one): the engine's corpus test explains each kind. Frames,
			// files, lines and columns must agree everywhere.
			sameLoc, firstLoc := 0, ""
			for i := range ref {
				ok := len(frames[i]) == len(ref[i])
				for j := 0; ok && j < len(ref[i]); j++ {
					o, w := frames[i][j], ref[i][j]
					ok = o.File == w.file && o.Line == w.line && o.Column == w.column
				}
				if ok {
					sameLoc++
				} else if firstLoc == "" {
					firstLoc = fmt.Sprintf("address %#x: ours %+v, llvm-symbolizer %+v", addrs[i], frames[i], ref[i])
				}
			}
			t.Logf("%d addresses (%d with inlined frames) as the engine reads the original; against llvm-symbolizer on it, %d agree in every frame's file, line and column, %d also in every name",
				len(addrs), inlined, sameLoc, same)
			if inlined == 0 || sameLoc != len(addrs) {
				t.Errorf("%d of %d addresses agree with llvm-symbolizer in frames and locations (%d with inlined frames); first difference %s", sameLoc, len(addrs), inlined, firstLoc)
			}
		})
	}
}
