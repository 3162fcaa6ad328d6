package debuginfo_test

import (
	"debug/elf"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/testsupport"
)

// TestSupplementaryFileIDReadsNoDWARFOfABinary: telling whether a binary with code is a
// supplementary file costs no decompression of its DWARF (a Go binary's, compressed by the
// linker), only its headers.
func TestSupplementaryFileIDReadsNoDWARFOfABinary(t *testing.T) {
	bin := testsupport.BuildGo(t, filepath.Join(t.TempDir(), "prog"), "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	info := f.Section(".debug_info")
	if info == nil {
		f.Close()
		t.Fatal("the Go binary has no DWARF")
	}
	data, err := info.Data() // decompressed
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	id, ok, err := debuginfo.SupplementaryFileID(bin, elfx.Limits{})
	runtime.ReadMemStats(&after)
	if err != nil || ok {
		t.Fatalf("SupplementaryFileID(Go binary) = %q, %v, %v; want no supplementary file", id, ok, err)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes allocated; .debug_info alone is %d bytes decompressed", allocated, len(data))
	if allocated > uint64(len(data))/4 {
		t.Errorf("%d bytes allocated to tell a binary from a supplementary file: its DWARF (.debug_info %d bytes) was read", allocated, len(data))
	}
}
