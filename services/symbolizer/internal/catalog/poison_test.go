package catalog

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/testsupport"
)

// poisoned returns copies of a binary whose DWARF does not read: a compressed .debug_info
// claiming 1 TiB, and a .debug_info whose units are overwritten with garbage.
func poisoned(t *testing.T, full string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	zlib := filepath.Join(dir, "zlib")
	if out, err := exec.CommandContext(t.Context(), "objcopy", "--compress-debug-sections=zlib", full, zlib).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	patch := func(src, name string, fn func(data []byte, off, size uint64)) string {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		s := f.Section(".debug_info")
		f.Close()
		if s == nil {
			t.Fatalf("%s: no .debug_info", src)
		}
		fn(data, s.Offset, s.FileSize)
		out := filepath.Join(dir, name)
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return out
	}
	return map[string]string{
		// Elf64_Chdr: ch_type, ch_reserved, then ch_size.
		"1 TiB claim": patch(zlib, "huge", func(d []byte, off, _ uint64) { binary.LittleEndian.PutUint64(d[off+8:], 1<<40) }),
		"garbage units": patch(full, "garbage", func(d []byte, off, size uint64) {
			for i := off + 4; i < off+size; i++ {
				d[i] = 0xff
			}
		}),
	}
}

// TestUnreadableDWARFDoesNotPoison: a file whose DWARF does not read is recorded as such, says
// so, and the good file uploaded afterwards replaces it.
func TestUnreadableDWARFDoesNotPoison(t *testing.T) {
	full := testsupport.CompileC(t, prog, "-g", "-O2")
	good := load(t, full)
	ctx := context.Background()
	for name, path := range poisoned(t, full) {
		t.Run(name, func(t *testing.T) {
			bad := load(t, path)
			gid := ID{gnu, bad.ids.GNU}
			m := newCatalog(t, nil)
			r, err := upload(t, m, bad, gid, dbg, u, bad.data)
			if err != nil {
				t.Fatalf("upload: %v", err)
			}
			q := r.Proto().GetQuality()
			if !q.GetHasDwarf() || q.GetDwarfError() == "" || r.Current.Fidelity > 1 {
				t.Fatalf("recorded quality %v, fidelity %v: want DWARF present and unreadable, symbols only", q, r.Current.Fidelity)
			}
			t.Logf("dwarf_error: %s", q.GetDwarfError())
			d, err := m.ShouldUpload(ctx, Desc{BuildID: gid, Type: dbg, SHA256: good.sum, Size: uint64(len(good.data)), Source: node})
			if err != nil || !d.Upload || d.Reason != debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_REPLACES_WORSE {
				t.Fatalf("ShouldUpload(good file, even from a node) = %+v, %v", d, err)
			}
			r, err = upload(t, m, good, gid, dbg, node, good.data)
			if err != nil {
				t.Fatalf("good upload: %v", err)
			}
			if r.Current.SHA256 != good.sum || r.Current.Quality.DWARFError != "" || !r.Current.Quality.Inlines {
				t.Fatalf("after the good upload: %+v", r.Current.Quality)
			}
		})
	}
}
