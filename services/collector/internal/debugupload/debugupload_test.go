package debugupload

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/debugfile"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/testsupport"
)

const testToken = "node-upload-test-token"

// symbolizerBin is built once per test binary by the first test that needs it.
var symbolizerBin struct {
	path string
	err  error
	done bool
}

func buildSymbolizer(t *testing.T) string {
	t.Helper()
	if !symbolizerBin.done {
		symbolizerBin.done = true
		dir, err := os.MkdirTemp("", "debugupload-test-")
		if err != nil {
			symbolizerBin.err = err
		} else {
			out := filepath.Join(dir, "symbolizer")
			cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, "./services/symbolizer")
			cmd.Dir = filepath.Join("..", "..", "..", "..")
			if b, err := cmd.CombinedOutput(); err != nil {
				symbolizerBin.err = fmt.Errorf("go build symbolizer: %w\n%s", err, b)
			}
			symbolizerBin.path = out
		}
	}
	if symbolizerBin.err != nil {
		t.Fatal(symbolizerBin.err)
	}
	return symbolizerBin.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if symbolizerBin.path != "" {
		if err := os.RemoveAll(filepath.Dir(symbolizerBin.path)); err != nil {
			fmt.Fprintf(os.Stderr, "remove test build dir: %v\n", err)
		}
	}
	os.Exit(code)
}

// startSymbolizer runs `symbolizer serve` with a folder store on a free loopback port.
func startSymbolizer(t *testing.T) string {
	t.Helper()
	bin := buildSymbolizer(t)
	for attempt := 0; ; attempt++ {
		port := testsupport.FreePort(t)
		url := "http://127.0.0.1:" + strconv.Itoa(port)
		logf, err := os.Create(filepath.Join(t.TempDir(), "symbolizer.log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(t.Context(), bin, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--store-dir", t.TempDir(),
			"--upload-token", testToken, "--shutdown-timeout", "2s")
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		// The exit status is not needed: an early exit shows through done, the log says why.
		go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
		t.Cleanup(func() {
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Errorf("kill symbolizer: %v", err)
			}
			<-done
		})
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/readyz", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return url
				}
			}
			select {
			case <-done:
				deadline = time.Time{}
			case <-time.After(50 * time.Millisecond):
			}
		}
		log, _ := os.ReadFile(logf.Name())
		if attempt < 2 && strings.Contains(string(log), "address already in use") {
			continue
		}
		t.Fatalf("symbolizer not ready at %s:\n%s", url, log)
	}
}

func client(url string) debuginfov1connect.DebuginfoServiceClient {
	return debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, url)
}

func get(t *testing.T, url, id string) (*debuginfov1.Debuginfo, error) {
	t.Helper()
	resp, err := client(url).Get(context.Background(), connect.NewRequest(&debuginfov1.GetRequest{BuildId: id}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetDebuginfo(), nil
}

// program compiles a small C program whose code differs by n, so each has its own build ID.
func program(t *testing.T, n int, args ...string) string {
	t.Helper()
	src := fmt.Sprintf(`#include <stdio.h>
__attribute__((noinline)) int work%d(int x) { return x * %d + 1; }
int main(int argc, char **argv) { printf("%%d\n", work%d(argc)); return 0; }
`, n, n+3, n)
	return testsupport.CompileC(t, src, append([]string{"-O2", "-Wl,--build-id"}, args...)...)
}

func strip(t *testing.T, in string, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(in)+".stripped")
	if b, err := exec.CommandContext(t.Context(), "strip", append(args, "-o", out, in)...).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, b)
	}
	return out
}

func ids(t *testing.T, path string) buildid.IDs {
	t.Helper()
	id, err := buildid.FromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// runUntil runs u until cond holds (or fails the test after a while).
func runUntil(t *testing.T, u *Uploader, cond func(map[string]int64) bool) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if s := u.Stats(); cond(s) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("uploader did not reach the expected state; stats %v", u.Stats())
	return nil
}

func total(s map[string]int64) int64 {
	var n int64
	for _, v := range s {
		n += v
	}
	return n
}

func TestHasSymbols(t *testing.T) {
	withDWARF := program(t, 1, "-g")
	withSymtab := program(t, 2)
	tests := []struct {
		name string
		path string
		want bool
	}{
		{"DWARF", withDWARF, true},
		{"symtab only", withSymtab, true},
		{"strip --strip-debug keeps symtab", strip(t, withDWARF, "--strip-debug"), true},
		{"strip --strip-all", strip(t, withDWARF, "--strip-all"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, c, err := elfx.OpenPath(tc.path, elfx.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := HasSymbols(f); got != tc.want {
				t.Fatalf("HasSymbols = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUploadsOnceAndSkipsStripped(t *testing.T) {
	url := startSymbolizer(t)
	debug := program(t, 3, "-g")
	symtab := program(t, 4)
	stripped := strip(t, program(t, 5), "--strip-all")

	u, err := New(Options{SymbolizerURL: url, Token: testToken}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{debug, symtab, stripped, debug, symtab} {
		u.Offer(p, p, "", ids(t, p))
	}
	s := runUntil(t, u, func(s map[string]int64) bool { return total(s) >= 3 })
	if s[OutcomeUploaded] != 2 || s[OutcomeNoSymbols] != 1 || total(s) != 3 {
		t.Fatalf("stats %v: want 2 uploaded and 1 without symbols, each file once", s)
	}
	for _, p := range []string{debug, symtab} {
		rec, err := get(t, url, ids(t, p).GNU)
		if err != nil {
			t.Fatalf("Get %s: %v", p, err)
		}
		if rec.GetSource() != debuginfov1.UploadSource_UPLOAD_SOURCE_NODE || rec.GetType() != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE {
			t.Fatalf("record of %s: source %v type %v, want NODE EXECUTABLE", p, rec.GetSource(), rec.GetType())
		}
	}
	if _, err := get(t, url, ids(t, stripped).GNU); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("stripped file: Get = %v, want NotFound", err)
	}

	// A restarted collector remembers nothing; the server dedupes.
	u2, err := New(Options{SymbolizerURL: url, Token: testToken}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u2.Offer(debug, debug, "", ids(t, debug))
	if s := runUntil(t, u2, func(s map[string]int64) bool { return total(s) >= 1 }); s[OutcomeAlreadyStored] != 1 {
		t.Fatalf("second collector: stats %v, want already_stored", s)
	}
}

func TestCIUploadWins(t *testing.T) {
	url := startSymbolizer(t)
	full := program(t, 6, "-g")
	// What a node runs: the same build, debug sections stripped, symbol table kept.
	onNode := strip(t, full, "--strip-debug")
	id := ids(t, full).GNU
	if ids(t, onNode).GNU != id {
		t.Fatal("strip changed the build ID")
	}
	up := exec.CommandContext(t.Context(), buildSymbolizer(t), "upload", "--server", url, "--token", testToken, "--source", "ci", "--progress", "plain", full)
	if b, err := up.CombinedOutput(); err != nil {
		t.Fatalf("symbolizer upload: %v\n%s", err, b)
	}
	before, err := get(t, url, id)
	if err != nil {
		t.Fatal(err)
	}

	u, err := New(Options{SymbolizerURL: url, Token: testToken}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u.Offer(onNode, onNode, "", ids(t, onNode))
	if s := runUntil(t, u, func(s map[string]int64) bool { return total(s) >= 1 }); s[OutcomeBetterStored] != 1 {
		t.Fatalf("stats %v, want better_stored", s)
	}
	after, err := get(t, url, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.GetSource() != debuginfov1.UploadSource_UPLOAD_SOURCE_CI || after.GetSha256() != before.GetSha256() {
		t.Fatalf("record after the node's offer: source %v sha %s, want CI %s", after.GetSource(), after.GetSha256(), before.GetSha256())
	}
}

func TestSizeCapAndQueueBound(t *testing.T) {
	url := startSymbolizer(t)
	big := program(t, 7, "-g")

	capped, err := New(Options{SymbolizerURL: url, Token: testToken, MaxFileBytes: 1024}, nil)
	if err != nil {
		t.Fatal(err)
	}
	capped.Offer(big, big, "", ids(t, big))
	if s := runUntil(t, capped, func(s map[string]int64) bool { return total(s) >= 1 }); s[OutcomeTooLarge] != 1 {
		t.Fatalf("stats %v, want too_large", s)
	}
	if _, err := get(t, url, ids(t, big).GNU); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("Get = %v, want NotFound", err)
	}

	// A queue of one, not drained yet: the second and third offers are dropped, counted, and
	// can be offered again later.
	q, err := New(Options{SymbolizerURL: url, Token: testToken, QueueSize: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{program(t, 8), program(t, 9), program(t, 10)}
	for _, p := range files {
		q.Offer(p, p, "", ids(t, p))
	}
	if s := q.Stats(); s[OutcomeDropped] != 2 {
		t.Fatalf("stats %v, want 2 dropped", s)
	}
	s := runUntil(t, q, func(s map[string]int64) bool { return s[OutcomeUploaded] >= 1 })
	if s[OutcomeUploaded] != 1 {
		t.Fatalf("stats %v, want 1 uploaded", s)
	}
	q.Offer(files[1], files[1], "", ids(t, files[1]))
	if s := runUntil(t, q, func(s map[string]int64) bool { return s[OutcomeUploaded] >= 2 }); s[OutcomeUploaded] != 2 {
		t.Fatalf("stats %v, want the dropped file uploaded when offered again", s)
	}
}

func TestTokenFileRotation(t *testing.T) {
	url := startSymbolizer(t)
	p := program(t, 11)
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("wrong-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := New(Options{SymbolizerURL: url, TokenFile: tokFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u.Offer(p, p, "", ids(t, p))
	if s := runUntil(t, u, func(s map[string]int64) bool { return total(s) >= 1 }); s[OutcomeFailed] != 1 {
		t.Fatalf("stats %v, want failed with a wrong token", s)
	}
	if err := os.WriteFile(tokFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u.Offer(p, p, "", ids(t, p))
	if s := runUntil(t, u, func(s map[string]int64) bool { return s[OutcomeUploaded] >= 1 }); s[OutcomeUploaded] != 1 {
		t.Fatalf("stats %v, want uploaded after the token file was fixed", s)
	}
}

func TestUploadIsRateLimited(t *testing.T) {
	url := startSymbolizer(t)
	p := program(t, 12, "-g")
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	const rate = 8 << 10
	u, err := New(Options{SymbolizerURL: url, Token: testToken, BytesPerSecond: rate, Burst: 1 << 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	u.Offer(p, p, "", ids(t, p))
	runUntil(t, u, func(s map[string]int64) bool { return s[OutcomeUploaded] >= 1 })
	minimum := time.Duration(float64(st.Size()-(1<<10)) / rate * float64(time.Second))
	if took := time.Since(start); took < minimum {
		t.Fatalf("%d bytes at %d B/s took %v, want at least %v", st.Size(), rate, took, minimum)
	}
}

func TestBucket(t *testing.T) {
	now := time.Unix(0, 0)
	tests := []struct {
		name    string
		advance time.Duration
		take    int
		want    time.Duration
	}{
		{"burst available at start", 0, 100, 0},
		{"empty bucket waits for the deficit", 0, 100, 100 * time.Millisecond},
		{"refill pays back part of the debt", 50 * time.Millisecond, 50, 100 * time.Millisecond},
		{"refill stops at the burst", 10 * time.Second, 100, 0},
	}
	b := newBucket(1000, 100)
	b.now = func() time.Time { return now }
	b.at = now
	for _, tc := range tests {
		now = now.Add(tc.advance)
		if got := b.reserve(tc.take); got != tc.want {
			t.Fatalf("%s: reserve(%d) = %v, want %v", tc.name, tc.take, got, tc.want)
		}
	}
}

func TestOptionsRejectBadURL(t *testing.T) {
	for _, url := range []string{"", "symbolizer:7070", "ftp://x"} {
		if _, err := New(Options{SymbolizerURL: url}, nil); err == nil {
			t.Errorf("New(%q) succeeded, want an error", url)
		}
	}
}

// TestStrippedExecutableBesideDebugFile: a stripped binary has no names to give, but when the
// server holds only its separate debug file it needs the binary's program headers, and the node
// uploads it (SHOULD_UPLOAD_REASON_EXECUTABLE_NEEDED).
func TestStrippedExecutableBesideDebugFile(t *testing.T) {
	url := startSymbolizer(t)
	full := program(t, 8, "-g")
	debug := filepath.Join(t.TempDir(), "prog.debug")
	if out, err := exec.CommandContext(t.Context(), "objcopy", "--only-keep-debug", full, debug).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	stripped := strip(t, full, "--strip-all")
	up := exec.CommandContext(t.Context(), buildSymbolizer(t), "upload", "--server", url, "--token", testToken, "--progress", "plain", debug)
	if b, err := up.CombinedOutput(); err != nil {
		t.Fatalf("symbolizer upload: %v\n%s", err, b)
	}
	if rec, err := get(t, url, ids(t, full).GNU); err != nil || rec.GetHasProgramHeaders() {
		t.Fatalf("after the debug file: %v, %v; want a record without program headers", rec, err)
	}
	u, err := New(Options{SymbolizerURL: url, Token: testToken}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u.Offer(stripped, stripped, "", ids(t, stripped))
	if s := runUntil(t, u, func(s map[string]int64) bool { return total(s) >= 1 }); s[OutcomeUploaded] != 1 {
		t.Fatalf("stats %v, want the stripped executable uploaded", s)
	}
	rec, err := get(t, url, ids(t, full).GNU)
	if err != nil || !rec.GetHasProgramHeaders() || rec.GetType() != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO {
		t.Fatalf("after the node's upload: %v, %v; want the debug file with the executable's program headers", rec, err)
	}
}

// TestDebugFileInProcessRoot: the separate debug file of a stripped file, found below the
// mapping process's root where a distribution's debug package puts it (by build ID under
// /usr/lib/debug), is uploaded with the dwz supplementary file it names (an absolute path in
// the process's filesystem) and then the executable's program headers; a build-ID entry that
// is a symbolic link out of the root is not followed, even to the right file.
func TestDebugFileInProcessRoot(t *testing.T) {
	testsupport.RequireTools(t, "dwz", "objcopy")
	url := startSymbolizer(t)
	dir, root := t.TempDir(), t.TempDir()
	run := func(args ...string) { t.Helper(); elfxtest.Run(t, args[0], args[1:]...) }
	// Two programs sharing their libc types, so that dwz moves them to a common file, named
	// as Debian names it: an absolute path in the filesystem the debug files are installed in.
	var bins []string
	for i := range 2 {
		bins = append(bins, program(t, 20+i, "-g"))
	}
	const common = "/usr/lib/debug/.dwz/x86_64-linux-gnu/test.debug"
	run(append([]string{"dwz", "-m", filepath.Join(dir, "common.debug"), "-M", common}, bins...)...)
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(common)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "common.debug"), filepath.Join(root, common)); err != nil {
		t.Fatal(err)
	}
	var stripped, debugs []string
	for i, bin := range bins {
		debug := filepath.Join(dir, fmt.Sprintf("p%d.debug", i))
		run("objcopy", "--only-keep-debug", bin, debug)
		stripped = append(stripped, strip(t, bin, "--strip-all"))
		debugs = append(debugs, debug)
	}
	buildIDPath := func(id string) string {
		p := debugfile.BuildIDPath(filepath.Join(root, DebugDir), id)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	idA, idB := ids(t, bins[0]).GNU, ids(t, bins[1]).GNU
	if err := os.Rename(debugs[0], buildIDPath(idA)); err != nil {
		t.Fatal(err)
	}
	// The second program's entry leads out of the root, to its real debug file.
	if err := os.Symlink(debugs[1], buildIDPath(idB)); err != nil {
		t.Fatal(err)
	}

	// A third keeps its symbol table (strip --strip-debug): no DWARF, so its debug file is
	// looked for too.
	third := program(t, 22, "-g")
	run("objcopy", "--only-keep-debug", third, buildIDPath(ids(t, third).GNU))
	stripped = append(stripped, strip(t, third, "--strip-debug"))

	u, err := New(Options{SymbolizerURL: url, Token: testToken}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range stripped {
		u.Offer(p, p, root, ids(t, p))
	}
	// The first: its debug file, the supplementary file and the executable; the second:
	// nothing to give; the third: its debug file and the executable.
	s := runUntil(t, u, func(s map[string]int64) bool { return total(s) >= 6 })
	if s[OutcomeUploaded] != 5 || s[OutcomeNoSymbols] != 1 || total(s) != 6 {
		t.Fatalf("stats %v: want 5 uploaded (2 debug files, a supplementary file, 2 executables) and 1 without symbols", s)
	}
	if rec, err := get(t, url, ids(t, third).GNU); err != nil || rec.GetType() != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO || !rec.GetHasProgramHeaders() {
		t.Fatalf("the program with a symbol table: %v, %v; want its debug file with its program headers", rec, err)
	}
	rec, err := get(t, url, idA)
	if err != nil {
		t.Fatal(err)
	}
	if rec.GetType() != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO || rec.GetSource() != debuginfov1.UploadSource_UPLOAD_SOURCE_NODE || !rec.GetHasProgramHeaders() {
		t.Fatalf("record: type %v source %v program headers %v; want the node's debug file with the executable's program headers",
			rec.GetType(), rec.GetSource(), rec.GetHasProgramHeaders())
	}
	var sup *debuginfov1.Companion
	for _, c := range rec.GetCompanions() {
		if c.GetKind() == debuginfov1.CompanionKind_COMPANION_KIND_SUPPLEMENTARY {
			sup = c
		}
	}
	if sup == nil || sup.GetState() != debuginfov1.CompanionState_COMPANION_STATE_AVAILABLE {
		t.Fatalf("companions %v: want the supplementary file stored", rec.GetCompanions())
	}
	if _, err := get(t, url, idB); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("the program whose debug file is outside the root: Get = %v, want NotFound", err)
	}
}
