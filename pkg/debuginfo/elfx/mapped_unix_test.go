//go:build unix

package elfx

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
)

// A mapped section of a file that shrinks under it faults when read past the new end; with
// debug.SetPanicOnFault, as the engine reads mapped sections, that is a panic the reader
// recovers from (debuginfo turns it into the DWARF's error), not a crash.
func TestDWARFSectionsMappedFileShrinks(t *testing.T) {
	defer func(m uint64) { minMappedSection = m }(minMappedSection)
	minMappedSection = 0
	path := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(path, elfxtest.Read(t, variants(t)["plain"]), 0o644); err != nil {
		t.Fatal(err)
	}
	f := openPath(t, path)
	secs, maps, err := f.mapDWARFSections([]string{"info"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, m := range maps {
			if err := unmap(m); err != nil {
				t.Error(err)
			}
		}
	}()
	info := secs["info"]
	if !inMaps(info, maps) {
		t.Fatal(".debug_info was read, not mapped")
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	// Pages the kernel mapped before the truncation may stay readable (large folios; a
	// truncation that could not split one keeps it mapped): drop them, as memory pressure
	// would, so that the read goes to the file, now empty.
	for _, m := range maps {
		if err := unix.Madvise(m, unix.MADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
	}
	faulted := func() (faulted bool) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			_, faulted = recover().(interface{ Addr() uintptr })
		}()
		for _, c := range info {
			sink += c
		}
		return false
	}()
	if !faulted {
		var u unix.Utsname
		_ = unix.Uname(&u)
		t.Skipf("Linux %s read a mapped page past the end of the truncated file without a fault: nothing to recover from here",
			unix.ByteSliceToString(u.Release[:]))
	}
}
