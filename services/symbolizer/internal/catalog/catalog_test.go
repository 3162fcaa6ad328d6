package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

const prog = `
#include <stdio.h>
static int __attribute__((noinline)) leaf(int x) { return x * 3 + 1; }
static inline int mid(int x) { return leaf(x) + 2; }
int main(int argc, char **argv) { printf("%d\n", mid(argc)); return 0; }
`

var (
	u     = debuginfov1.UploadSource_UPLOAD_SOURCE_CI
	node  = debuginfov1.UploadSource_UPLOAD_SOURCE_NODE
	dbg   = debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO
	exe   = debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE
	gnu   = debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU
	htl   = debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH
	reasn = debuginfov1.ShouldUploadReason_name
)

type fixture struct {
	path string
	data []byte
	sum  string
	ids  buildid.IDs
}

func load(t *testing.T, path string) fixture {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := buildid.Compute(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return fixture{path, data, hex.EncodeToString(s[:]), ids}
}

func newCatalog(t *testing.T, now *time.Time) *Catalog {
	s, err := store.NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{MaxSize: 64 << 20, UploadTTL: time.Minute, TempDir: t.TempDir()}
	if now != nil {
		opt.Now = func() time.Time { return *now }
	}
	return New(s, opt)
}

func upload(t *testing.T, m *Catalog, f fixture, id ID, typ debuginfov1.DebuginfoType, src debuginfov1.UploadSource, body []byte) (*Record, error) {
	t.Helper()
	ctx := context.Background()
	up, err := m.Initiate(ctx, Desc{BuildID: id, Type: typ, SHA256: f.sum, Size: uint64(len(f.data)), Source: src})
	if err != nil {
		return nil, err
	}
	if body != nil {
		if err := m.Store().Put(ctx, up.Object(), bytes.NewReader(body), int64(len(body))); err != nil {
			t.Fatal(err)
		}
	}
	return m.Finish(ctx, id, up.ID)
}

func TestUploadLifecycle(t *testing.T) {
	full := load(t, testsupport.CompileC(t, prog, "-g", "-O2"))
	stripped := filepath.Join(t.TempDir(), "stripped")
	if out, err := exec.CommandContext(t.Context(), "objcopy", "--strip-debug", full.path, stripped).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v %s", err, out)
	}
	exeF := load(t, stripped)
	if exeF.ids.GNU != full.ids.GNU {
		t.Fatal("strip changed the build ID")
	}
	gid := ID{gnu, full.ids.GNU}
	now := time.Now()
	m := newCatalog(t, &now)
	ctx := context.Background()
	should := func(f fixture, typ debuginfov1.DebuginfoType, src debuginfov1.UploadSource, want debuginfov1.ShouldUploadReason) {
		t.Helper()
		d, err := m.ShouldUpload(ctx, Desc{BuildID: gid, Type: typ, SHA256: f.sum, Size: uint64(len(f.data)), Source: src})
		if err != nil {
			t.Fatal(err)
		}
		if d.Reason != want {
			t.Fatalf("ShouldUpload = %s (%s), want %s", d.Reason, d.Message, want)
		}
	}

	should(exeF, exe, node, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_FIRST)
	// A node uploads the stripped executable first.
	r, err := upload(t, m, exeF, gid, exe, node, exeF.data)
	if err != nil {
		t.Fatalf("upload executable: %v", err)
	}
	if r.Current.Quality.DWARF || !r.Current.Runnable || !r.Current.Quality.Symtab {
		t.Fatalf("executable quality = %+v runnable=%v", r.Current.Quality, r.Current.Runnable)
	}
	should(exeF, exe, node, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_ALREADY_STORED)
	should(full, dbg, node, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_REPLACES_WORSE)
	// Found under its htlhash too.
	if _, err := m.Resolve(ctx, ID{htl, exeF.ids.HTLHash}); err != nil {
		t.Fatalf("resolve by htlhash: %v", err)
	}

	// CI uploads full debuginfo: it replaces the executable.
	r, err = upload(t, m, full, gid, dbg, u, full.data)
	if err != nil {
		t.Fatalf("upload debuginfo: %v", err)
	}
	if !r.Current.Quality.DWARF || r.Current.Fidelity < index.FidelityLines || r.Current.Source != u {
		t.Fatalf("debuginfo record = %+v", r.Current)
	}
	should(exeF, exe, node, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_BETTER_STORED)
	if _, err := m.Initiate(ctx, Desc{BuildID: gid, Type: exe, SHA256: exeF.sum, Size: uint64(len(exeF.data)), Source: node}); !isReason(err, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_BETTER_STORED) {
		t.Fatalf("initiate worse = %v", err)
	}
	// Exactly one file is stored for the record, and no upload leftovers.
	keys, _ := m.Store().List(ctx, "")
	files := 0
	for _, k := range keys {
		if strings.HasPrefix(k, "uploads") {
			t.Errorf("leftover %s", k)
		}
		if strings.HasSuffix(k, full.sum) {
			files++
		}
		if strings.HasSuffix(k, exeF.sum) {
			t.Errorf("replaced file %s still stored", k)
		}
	}
	if files != 1 {
		t.Fatalf("stored files: %v", keys)
	}
	// A repeated FinishUpload returns the same record.
	r2, err := m.Finish(ctx, gid, r.Current.UploadID)
	if err != nil || r2.Current.SHA256 != full.sum {
		t.Fatalf("repeated finish: %v", err)
	}

	// List and Delete.
	list, next, err := m.List(ctx, 10, "")
	if err != nil || len(list) != 1 || next != "" || list[0].BuildId != gid.ID {
		t.Fatalf("list = %v %q %v", list, next, err)
	}
	if _, _, err := m.List(ctx, 10, "garbage!"); err == nil {
		t.Fatal("bad page token accepted")
	}
	if err := m.Delete(ctx, ID{htl, full.ids.HTLHash}); err != nil {
		t.Fatalf("delete by htlhash: %v", err)
	}
	if _, err := m.Resolve(ctx, gid); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resolve after delete = %v", err)
	}
	if keys, _ := m.Store().List(ctx, ""); len(keys) != 0 {
		t.Fatalf("delete left %v", keys)
	}
}

func isReason(err error, r debuginfov1.ShouldUploadReason) bool {
	var de *DecisionError
	return errors.As(err, &de) && de.Reason == r
}

func TestUploadRejections(t *testing.T) {
	good := load(t, testsupport.CompileC(t, prog, "-g"))
	other := load(t, testsupport.CompileC(t, prog+"int other;\n", "-g"))
	gid := ID{gnu, good.ids.GNU}
	ctx := context.Background()

	notELF := []byte(strings.Repeat("not an elf file\n", 100))
	truncated := good.data[:len(good.data)/3]
	tests := []struct {
		name string
		f    fixture
		id   ID
		body []byte
		want error
	}{
		{"wrong build ID", other, gid, other.data, ErrVerification},
		{"not ELF", fixtureOf(notELF), gid, notELF, ErrVerification},
		{"truncated ELF", fixtureOf(truncated), gid, truncated, ErrVerification},
		{"body differs from the declared hash", good, gid, append(append([]byte(nil), good.data[:len(good.data)-1]...), 'x'), ErrVerification},
		{"nothing PUT", good, gid, nil, ErrNotUploaded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newCatalog(t, nil)
			_, err := upload(t, m, tc.f, tc.id, dbg, u, tc.body)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			// Errors reach clients: they name the upload, never the server's file system.
			if strings.Contains(err.Error(), os.TempDir()) {
				t.Errorf("error shows a server path: %v", err)
			}
			keys, err := m.Store().List(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if !errors.Is(tc.want, ErrNotUploaded) {
					t.Errorf("rejected upload left %s", k)
				}
			}
			if _, err := m.Resolve(ctx, tc.id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("rejected file is visible: %v", err)
			}
			// A good upload still works afterwards.
			if errors.Is(tc.want, ErrVerification) {
				if _, err := upload(t, m, good, gid, dbg, u, good.data); err != nil {
					t.Fatalf("good upload after rejection: %v", err)
				}
			}
		})
	}

	m := newCatalog(t, nil)
	m.opt.MaxSize = 100
	if _, err := m.Initiate(ctx, Desc{BuildID: gid, Type: dbg, SHA256: good.sum, Size: uint64(len(good.data)), Source: u}); !isReason(err, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_TOO_LARGE) {
		t.Fatalf("over the cap = %v", err)
	}
}

func fixtureOf(data []byte) fixture {
	s := sha256.Sum256(data)
	return fixture{data: data, sum: hex.EncodeToString(s[:])}
}

func TestConcurrentAndStaleUploads(t *testing.T) {
	good := load(t, testsupport.CompileC(t, prog, "-g"))
	gid := ID{gnu, good.ids.GNU}
	now := time.Now()
	m := newCatalog(t, &now)
	ctx := context.Background()
	d := Desc{BuildID: gid, Type: dbg, SHA256: good.sum, Size: uint64(len(good.data)), Source: u}

	// Many clients initiate the same file at once: one upload, one ID.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			up, err := m.Initiate(ctx, d)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = up.ID
		}(i)
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent initiates got different uploads: %v", ids)
		}
	}
	// A different file for the same build ID while that upload is live: in progress.
	d2 := d
	d2.SHA256 = strings.Repeat("ab", 32)
	if _, err := m.Initiate(ctx, d2); !isReason(err, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_UPLOAD_IN_PROGRESS) {
		t.Fatalf("second file while live = %v", err)
	}
	// The client crashes mid-PUT (nothing complete is stored); the upload expires.
	now = now.Add(2 * time.Minute)
	dec, _ := m.ShouldUpload(ctx, d)
	if dec.Reason != debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_PREVIOUS_UPLOAD_STALE {
		t.Fatalf("after expiry = %v", dec.Reason)
	}
	if _, err := m.Finish(ctx, gid, ids[0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("finish of an expired upload = %v", err)
	}
	// The retry reclaims it and completes.
	if _, err := upload(t, m, good, gid, dbg, u, good.data); err != nil {
		t.Fatalf("retry: %v", err)
	}

	// Concurrent finishes of one upload: both succeed with the same record.
	m2 := newCatalog(t, nil)
	up, err := m2.Initiate(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Store().Put(ctx, up.Object(), bytes.NewReader(good.data), int64(len(good.data))); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, errs[i] = m2.Finish(ctx, gid, up.ID)
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent finish: %v", err)
		}
	}
}

func TestValidateID(t *testing.T) {
	for _, tc := range []struct {
		typ debuginfov1.BuildIDType
		id  string
		ok  bool
	}{
		{gnu, "abcd", true},
		{gnu, "ABCD", false},
		{gnu, "abc", false},
		{gnu, "../etc", false},
		{gnu, strings.Repeat("a", 2048), true},
		{gnu, strings.Repeat("a", 2050), false},
		{htl, strings.Repeat("0", 32), true},
		{htl, strings.Repeat("0", 30), false},
		{debuginfov1.BuildIDType_BUILD_ID_TYPE_GO, "Wr8o8Tui11nJFtYVqaau/tPe8Sv5R8f5F7l3LcDzy", true},
		{debuginfov1.BuildIDType_BUILD_ID_TYPE_GO, "a b", false},
		{debuginfov1.BuildIDType_BUILD_ID_TYPE_UNSPECIFIED, "abcd", false},
	} {
		if err := ValidateID(tc.typ, tc.id); (err == nil) != tc.ok {
			t.Errorf("ValidateID(%v, %.20q) = %v", tc.typ, tc.id, err)
		}
	}
	// A Go build ID with '/' and '..' stays inside one key segment.
	k := recordKey(ID{debuginfov1.BuildIDType_BUILD_ID_TYPE_GO, "../../x"})
	if err := store.CheckKey(k); err != nil || strings.Count(k, "/") != 2 {
		t.Fatalf("go key %q: %v", k, err)
	}
	_ = reasn
}

func TestSweep(t *testing.T) {
	good := load(t, testsupport.CompileC(t, prog, "-g"))
	other := load(t, testsupport.CompileC(t, prog+"int z;\n", "-g"))
	now := time.Now()
	m := newCatalog(t, &now)
	ctx := context.Background()
	put := func(f fixture) *Upload {
		up, err := m.Initiate(ctx, Desc{BuildID: ID{gnu, f.ids.GNU}, Type: dbg, SHA256: f.sum, Size: uint64(len(f.data)), Source: u})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Store().Put(ctx, up.Object(), bytes.NewReader(f.data), int64(len(f.data))); err != nil {
			t.Fatal(err)
		}
		return up
	}
	stale := put(good)
	now = now.Add(2 * time.Minute) // stale expires
	live := put(other)
	if err := m.Store().Put(ctx, "uploads/"+strings.Repeat("e", 32), strings.NewReader("stray"), 5); err != nil {
		t.Fatal(err)
	}

	n, err := m.Sweep(ctx)
	if err != nil || n != 2 {
		t.Fatalf("sweep removed %d, %v; want 2", n, err)
	}
	if _, err := m.Store().Size(ctx, stale.Object()); !errors.Is(err, store.ErrNotExist) {
		t.Fatalf("stale upload kept: %v", err)
	}
	if _, err := m.Store().Size(ctx, live.Object()); err != nil {
		t.Fatalf("live upload removed: %v", err)
	}
	if _, err := m.Finish(ctx, ID{gnu, other.ids.GNU}, live.ID); err != nil {
		t.Fatalf("finish after sweep: %v", err)
	}
	// The stale upload is still reported as stale, and can be redone.
	dec, _ := m.ShouldUpload(ctx, Desc{BuildID: ID{gnu, good.ids.GNU}, Type: dbg, SHA256: good.sum, Size: uint64(len(good.data)), Source: u})
	if dec.Reason != debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_PREVIOUS_UPLOAD_STALE {
		t.Fatalf("after sweep: %v", dec.Reason)
	}
}
