package catalog

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/testsupport"
)

// splitDebug compiles prog and splits it as distro packaging does: a stripped executable
// (what runs on the node) and a separate debug file (objcopy --only-keep-debug).
func splitDebug(t *testing.T) (exeF, debugF fixture) {
	t.Helper()
	full := testsupport.CompileC(t, prog, "-g", "-O2", "-pie", "-fPIE")
	dir := t.TempDir()
	stripped, debug := filepath.Join(dir, "prog"), filepath.Join(dir, "prog.debug")
	for _, args := range [][]string{
		{"objcopy", "--only-keep-debug", full, debug},
		{"objcopy", "--strip-all", full, stripped},
	} {
		if out, err := exec.CommandContext(t.Context(), args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	exeF, debugF = load(t, stripped), load(t, debug)
	if exeF.ids.GNU != debugF.ids.GNU || exeF.ids.HTLHash == debugF.ids.HTLHash {
		t.Fatalf("split files: GNU %s/%s, htlhash %s/%s", exeF.ids.GNU, debugF.ids.GNU, exeF.ids.HTLHash, debugF.ids.HTLHash)
	}
	return exeF, debugF
}

// TestDebugFileKeepsExecutableHeaders: a separate debug file's program headers do not place
// mapped addresses, so the record keeps the executable's, whichever of the two comes first.
func TestDebugFileKeepsExecutableHeaders(t *testing.T) {
	exeF, debugF := splitDebug(t)
	gid := ID{gnu, exeF.ids.GNU}
	ctx := context.Background()
	checkHeaders := func(t *testing.T, m *Catalog, want bool) *Record {
		t.Helper()
		r, err := m.Resolve(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		loads, ok := r.Loads()
		if ok != want || r.Proto().GetHasProgramHeaders() != want {
			t.Fatalf("program headers known = %v (proto %v), want %v", ok, r.Proto().GetHasProgramHeaders(), want)
		}
		if want && !slices.Equal(loads, exeLoads(t, exeF)) {
			t.Fatalf("loads = %+v, want the executable's %+v", loads, exeLoads(t, exeF))
		}
		return r
	}

	t.Run("debug file first", func(t *testing.T) {
		m := newCatalog(t, nil)
		if _, err := upload(t, m, debugF, gid, dbg, u, debugF.data); err != nil {
			t.Fatal(err)
		}
		r := checkHeaders(t, m, false)
		if r.Current.Runnable {
			t.Fatal("a separate debug file was taken as runnable")
		}
		// The executable the node sees is wanted, and a second debug file is not.
		d, err := m.ShouldUpload(ctx, Desc{BuildID: gid, Type: exe, SHA256: exeF.sum, Size: uint64(len(exeF.data)), Source: node})
		if err != nil || d.Reason != debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_EXECUTABLE_NEEDED || !d.Upload {
			t.Fatalf("ShouldUpload(executable) = %+v, %v", d, err)
		}
		if _, err := upload(t, m, exeF, gid, exe, node, exeF.data); err != nil {
			t.Fatal(err)
		}
		r = checkHeaders(t, m, true)
		if r.Current.SHA256 != debugF.sum {
			t.Fatal("the executable replaced the debug file as the source of symbols")
		}
		if r.Pending != nil {
			t.Fatalf("upload left pending: %+v", r.Pending)
		}
		// Its bytes are not kept: only the debug file (and its index) is stored.
		keys, err := m.Store().List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if filepath.Base(k) == exeF.sum {
				t.Fatalf("executable bytes kept at %s", k)
			}
		}
		// The executable's htlhash, which is what the OTel eBPF profiler sends, finds the record.
		if r2, err := m.Resolve(ctx, ID{htl, exeF.ids.HTLHash}); err != nil || r2.Key != r.Key {
			t.Fatalf("resolve by the executable's htlhash: %v", err)
		}
		d, err = m.ShouldUpload(ctx, Desc{BuildID: gid, Type: exe, SHA256: exeF.sum, Size: uint64(len(exeF.data)), Source: node})
		if err != nil || d.Upload {
			t.Fatalf("ShouldUpload(executable) once known = %+v, %v", d, err)
		}
	})

	t.Run("executable first", func(t *testing.T) {
		m := newCatalog(t, nil)
		if _, err := upload(t, m, exeF, gid, exe, node, exeF.data); err != nil {
			t.Fatal(err)
		}
		checkHeaders(t, m, true)
		if _, err := upload(t, m, debugF, gid, dbg, u, debugF.data); err != nil {
			t.Fatal(err)
		}
		r := checkHeaders(t, m, true)
		if r.Current.SHA256 != debugF.sum || r.Exec == nil || r.Exec.SHA256 != exeF.sum {
			t.Fatalf("after the debug file: current %s, exec %+v", r.Current.SHA256, r.Exec)
		}
		if _, err := m.Resolve(ctx, ID{htl, exeF.ids.HTLHash}); err != nil {
			t.Fatalf("resolve by the executable's htlhash: %v", err)
		}
	})
}

func exeLoads(t *testing.T, f fixture) []addrmap.Load {
	t.Helper()
	ins, err := Inspect(f.path, elfx.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ins.Loads
}
