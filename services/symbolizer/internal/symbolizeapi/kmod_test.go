package symbolizeapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/indexcache"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// TestKernelModule uploads a kernel-module-shaped relocatable object (gcc -c, then ld -r
// --build-id as the kernel's build links a .ko) and symbolizes module frames by its GNU build
// ID: addresses relative to the module's .text with an all-zero mapping, and the same frames
// as runtime addresses with a mapping that starts at the module's .text (file offset 0).
func TestKernelModule(t *testing.T) {
	elfxtest.Need(t, "gcc", "ld")
	dir := t.TempDir()
	obj := elfxtest.CC(t, dir, "mod.o", elfxtest.KernelModule, "-c", "-g", "-O2")
	ko := filepath.Join(dir, "mod.ko")
	elfxtest.Run(t, "ld", "-r", "--build-id", "-o", ko, obj)
	data := elfxtest.Read(t, ko)
	ids, err := buildid.Compute(bytes.NewReader(data), int64(len(data)))
	if err != nil || ids.GNU == "" {
		t.Fatalf("build ID: %v %+v", err, ids)
	}
	ctx := context.Background()
	s, _ := store.NewFolder(t.TempDir())
	md := catalog.New(s, catalog.Options{MaxSize: 1 << 30, TempDir: t.TempDir()})
	sum := sha256.Sum256(data)
	id := catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: ids.GNU}
	up, err := md.Initiate(ctx, catalog.Desc{BuildID: id, Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO,
		SHA256: hex.EncodeToString(sum[:]), Size: uint64(len(data)), Source: debuginfov1.UploadSource_UPLOAD_SOURCE_CI})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, up.Object(), bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	rec, err := md.Finish(ctx, id, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	if f := rec.Current; f.Quality.DWARFError != "" || !f.Runnable || len(f.Loads) == 0 {
		t.Fatalf("stored: DWARF error %q, runnable %v, loads %v", f.Quality.DWARFError, f.Runnable, f.Loads)
	}

	ef, closer, err := elfx.OpenPath(ko, elfx.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	at := func(section, symbol string) uint64 {
		for _, sym := range elfxtest.Symbols(t, ko) {
			if sym.Name == symbol {
				return ef.ELF().Sections[sym.Section].Addr + sym.Value + 1
			}
		}
		t.Fatalf("no symbol %s", symbol)
		return 0
	}
	want := []struct{ section, function string }{
		{".text", "hot"}, {".text", "dispatch"}, {".text.unlikely", "slow_path"}, {".exit.text", "module_stop"},
	}
	var addrs []uint64
	for _, w := range want {
		addrs = append(addrs, at(w.section, w.function))
	}
	if addrs[0] != 1 {
		t.Fatalf("hot at %#x: .text is not at 0", addrs[0]-1)
	}
	svc := New(md, indexcache.New(1<<30), nil, nil, nil, Options{})
	const textAt = 0xffffffffc0a00000 // where the loader put the module's .text
	runtime := make([]uint64, len(addrs))
	for i, a := range addrs {
		runtime[i] = textAt + a
	}
	for _, mod := range []*symbolizerv1.Module{
		{GnuBuildId: ids.GNU, Addresses: addrs},
		{GnuBuildId: ids.GNU, Addresses: runtime, MemoryStart: textAt, MemoryLimit: textAt + 0x10000},
	} {
		resp, err := svc.Symbolize(ctx, connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{mod}}))
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Msg.Modules[0]
		if r.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
			t.Fatalf("mapping start %#x: %v: %s", mod.MemoryStart, r.Status, r.Message)
		}
		locs, err := symbolizecodec.Decode(r, len(addrs))
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			fr := locs[i]
			if len(fr) == 0 || fr[len(fr)-1].Function != w.function || fr[0].Line == 0 || filepath.Base(fr[0].File) != "mod.o.c" {
				t.Errorf("mapping start %#x: %s %#x: %+v, want %s with a line", mod.MemoryStart, w.section, mod.Addresses[i], fr, w.function)
			}
		}
	}
}
