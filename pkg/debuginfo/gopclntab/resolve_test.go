package gopclntab

import (
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// TestResolverMatchesLoad: the Resolver answers every address of the text, and a little
// around it, exactly as the index Load builds does, on the test program and on the synthetic
// tables of every format. The addresses come in a scattered order, so that functions are
// decoded out of order and looked up again after others, as a profile's addresses come.
func TestResolverMatchesLoad(t *testing.T) {
	_, stripped := buildTestProgram(t)
	f, err := elf.Open(stripped)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tests := []struct {
		name    string
		f       *elf.File
		inlines bool   // whether the format's inline trees are read
		path    string // the file f was read from, if any
	}{
		{"test program", f, true, stripped},
		{"1.20", synthTable(synthOpts{ver: ver120}), true, ""},
		{"1.20 without textStart", synthTable(synthOpts{ver: ver120, headerNoStart: true}), true, ""},
		{"1.18", synthTable(synthOpts{ver: ver118}), true, ""},
		{"1.18 without moduledata", synthTable(synthOpts{ver: ver118, noModuledata: true}), false, ""},
		{"1.16", synthTable(synthOpts{ver: ver116}), true, ""},
		{"1.2 written by go1.15", synthTable(synthOpts{ver: ver12, goVersion: "go1.15.5"}), true, ""},
		{"1.2 without build info", synthTable(synthOpts{ver: ver12}), false, ""},
	}
	for _, tc := range tests {
		f := tc.f
		t.Run(tc.name, func(t *testing.T) {
			b := index.NewBuilder()
			if _, err := Load(f, b); err != nil {
				t.Fatal(err)
			}
			ix, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewResolver(f)
			if err != nil {
				t.Fatal(err)
			}
			if tc.path != "" {
				// The test program is also read through a mapping of its file.
				file, err := os.Open(tc.path)
				if err != nil {
					t.Fatal(err)
				}
				defer file.Close()
				if r, err = NewMappedResolver(f, file); err != nil {
					t.Fatal(err)
				}
				if r.mem.image == nil {
					t.Fatal("the file was not mapped")
				}
				defer func() {
					if err := r.Close(); err != nil {
						t.Error(err)
					}
				}()
			}
			text := f.Section(".text")
			lo, hi := text.Addr-16, text.Addr+text.Size+16
			const stride = 61
			n, frames, inlined := 0, 0, 0
			var got, want []index.Frame
			for start := lo; start < lo+stride; start++ {
				for a := start; a < hi; a += stride {
					got, want = r.AppendLookup(got[:0], a), ix.AppendLookup(want[:0], a)
					if !slices.Equal(got, want) {
						t.Fatalf("%#x: resolver %+v, index %+v", a, got, want)
					}
					n++
					frames += len(want)
					if len(want) > 1 {
						inlined++
					}
				}
			}
			if frames == 0 || tc.inlines && inlined == 0 {
				t.Fatalf("%d addresses: %d frames, %d with inlined calls: nothing compared", n, frames, inlined)
			}
			if r.Errors() != 0 {
				t.Errorf("%d functions did not decode", r.Errors())
			}
			t.Logf("%d addresses, %d frames, %d with inlined calls: the same", n, frames, inlined)
		})
	}
}

// TestMappedFileTruncated: a mapped file that shrinks under the Resolver makes lookups fault;
// the fault is an error the Resolver reports, not a crash, and it answers nothing after it.
func TestMappedFileTruncated(t *testing.T) {
	_, stripped := buildTestProgram(t)
	raw, err := os.ReadFile(stripped)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewMappedResolver(f, file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	}()
	text := f.Section(".text")
	if got := r.AppendLookup(nil, text.Addr+text.Size/2); len(got) == 0 || r.Err() != nil {
		t.Fatalf("before truncation: %+v, %v", got, r.Err())
	}
	if err := file.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	// Every function not decoded yet reads its tables from pages past the new end.
	for a := text.Addr; a < text.Addr+text.Size && r.Err() == nil; a += 4096 {
		if got := r.AppendLookup(nil, a); r.Err() != nil && len(got) != 0 {
			t.Fatalf("%#x faulted and answered %+v", a, got)
		}
	}
	if r.Err() == nil || !strings.Contains(r.Err().Error(), "truncated") {
		t.Fatalf("Err after truncation: %v", r.Err())
	}
	if got := r.AppendLookup(nil, text.Addr+text.Size/2); len(got) != 0 {
		t.Errorf("after the fault: %+v", got)
	}
}

// TestLargeBinaryResolver compares the Resolver with Load's index on 20,000 addresses of the
// large binary PROFSYM_GOPCLNTAB_LARGE_STRIPPED names, drawn as BenchmarkResolver draws them.
func TestLargeBinaryResolver(t *testing.T) {
	path := os.Getenv("PROFSYM_GOPCLNTAB_LARGE_STRIPPED")
	if path == "" {
		t.Skip("PROFSYM_GOPCLNTAB_LARGE_STRIPPED not set")
	}
	ix, _ := loadIndex(t, path)
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := NewResolver(f)
	if err != nil {
		t.Fatal(err)
	}
	frames := 0
	var got, want []index.Frame
	for _, a := range sampleFunctab(r.t, 20000, 3) {
		got, want = r.AppendLookup(got[:0], a), ix.AppendLookup(want[:0], a)
		if !slices.Equal(got, want) {
			t.Fatalf("%#x: resolver %+v, index %+v", a, got, want)
		}
		frames += len(want)
	}
	t.Logf("20000 addresses, %d frames: the same; %d functions did not decode", frames, r.Errors())
}
