package debuginfo_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

const inlined = `#include <stdio.h>
static inline __attribute__((always_inline)) int leaf(int x) { return x * 3 + 1; }
static inline __attribute__((always_inline)) int mid(int x) { return leaf(x) + leaf(x + 1); }
__attribute__((noinline)) int top(int x) { return mid(x) * 2; }
int main(int c, char **v) { (void)v; printf("%d\n", top(c)); return 0; }
`

func names(frames []index.Frame) string {
	var s []string
	for _, f := range frames {
		s = append(s, f.Function)
	}
	return strings.Join(s, "<")
}

// TestSources checks which source answers for each kind of binary and that each gives the
// frames it can: inline chains from DWARF wherever DWARF is reachable, names from symbols only.
func TestSources(t *testing.T) {
	elfxtest.Need(t, "gcc", "objcopy", "strip")
	dir := t.TempDir()
	full := elfxtest.CC(t, dir, "full", inlined, "-O2", "-g", "-Wl,--build-id")
	top := elfxtest.SymbolValue(t, full, "top")

	// Stripped binary with its debug file in a .build-id tree.
	stripped := filepath.Join(dir, "stripped")
	elfxtest.Run(t, "strip", "-o", stripped, full)
	b, err := debuginfo.Open(stripped, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gnu := b.IDs().GNU
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	debugDir := filepath.Join(dir, "debug")
	idPath := filepath.Join(debugDir, ".build-id", gnu[:2], gnu[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(idPath), 0o755); err != nil {
		t.Fatal(err)
	}
	elfxtest.Run(t, "objcopy", "--only-keep-debug", full, idPath)

	zstd := filepath.Join(dir, "zstd")
	elfxtest.Run(t, "objcopy", "--compress-debug-sections=zstd", full, zstd)

	symOnly := elfxtest.CC(t, dir, "symonly", inlined, "-O2")

	tests := []struct {
		name       string
		path       string
		opts       debuginfo.Options
		wantChain  string
		wantSource string
		fidelity   index.Fidelity
	}{
		{"dwarf", full, debuginfo.Options{}, "leaf<mid<top", "dwarf v5", index.FidelityFullInlines},
		{"zstd dwarf", zstd, debuginfo.Options{}, "leaf<mid<top", "dwarf v5", index.FidelityFullInlines},
		{"build-id debug dir", stripped, debuginfo.Options{DebugDirs: []string{debugDir}}, "leaf<mid<top", "dwarf v5", index.FidelityFullInlines},
		{"explicit debug file", stripped, debuginfo.Options{DebugFile: idPath}, "leaf<mid<top", "dwarf v5", index.FidelityFullInlines},
		{"stripped, no debug file", stripped, debuginfo.Options{}, "", "", index.FidelityNone}, // .dynsym holds only imports
		{"symbols only", symOnly, debuginfo.Options{}, "top", ".symtab", index.FidelitySymbols},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := debuginfo.Open(tt.path, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ix, err := b.Index()
			if err != nil {
				t.Fatal(err)
			}
			addr := top
			if tt.path == symOnly {
				addr = elfxtest.SymbolValue(t, symOnly, "top")
			}
			if got := names(ix.Lookup(addr)); got != tt.wantChain {
				t.Errorf("chain at %#x = %q, want %q", addr, got, tt.wantChain)
			}
			info := b.Info()
			if tt.wantSource != "" && (len(info.Sources) == 0 || info.Sources[0] != tt.wantSource) {
				t.Errorf("sources = %v, want %q first", info.Sources, tt.wantSource)
			}
			if ix.Fidelity() != tt.fidelity {
				t.Errorf("fidelity = %v, want %v", ix.Fidelity(), tt.fidelity)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	elfxtest.Need(t, "gcc")
	dir := t.TempDir()
	notELF := filepath.Join(dir, "notelf")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := elfxtest.CC(t, dir, "a", inlined, "-g", "-Wl,--build-id=sha1")
	other := elfxtest.CC(t, dir, "other", elfxtest.Hello, "-g", "-Wl,--build-id=sha1")
	truncated := filepath.Join(dir, "truncated")
	if err := os.WriteFile(truncated, elfxtest.Read(t, a)[:100], 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		path    string
		opts    debuginfo.Options
		wantErr string
		is      error
	}{
		{"missing", filepath.Join(dir, "nope"), debuginfo.Options{}, "no such file", nil},
		{"not ELF", notELF, debuginfo.Options{}, "not an ELF file", debuginfo.ErrNotELF},
		{"truncated", truncated, debuginfo.Options{}, "not an ELF file", debuginfo.ErrNotELF},
		{"debug file of another binary", a, debuginfo.Options{DebugFile: other}, "has build ID", nil},
		{"debug file not ELF", a, debuginfo.Options{DebugFile: notELF}, "not an ELF file", debuginfo.ErrNotELF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := debuginfo.Open(tt.path, tt.opts)
			if err == nil {
				if cerr := b.Close(); cerr != nil {
					t.Errorf("close: %v", cerr)
				}
				t.Fatalf("Open succeeded, want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", err, tt.is)
			}
		})
	}
}

// TestGoUsesPclntab checks that a stripped Go binary is read from pclntab and names its main
// function.
func TestGoUsesPclntab(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go program")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\n//go:noinline\nfunc work(n int) int { return n * 7 }\n\nfunc main() { println(work(6)) }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, twin := filepath.Join(dir, "gobin"), filepath.Join(dir, "gobin-full")
	elfxtest.Run(t, "go", "build", "-o", bin, "-ldflags=-s -w", src)
	elfxtest.Run(t, "go", "build", "-o", twin, src)
	work := elfxtest.SymbolValue(t, twin, "main.work")
	b, err := debuginfo.Open(bin, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ix, err := b.Index()
	if err != nil {
		t.Fatal(err)
	}
	info := b.Info()
	if b.IDs().Go == "" {
		t.Error("no Go build ID")
	}
	if len(info.Sources) == 0 || !strings.HasPrefix(info.Sources[0], "gopclntab") {
		t.Fatalf("sources = %v, want gopclntab first", info.Sources)
	}
	if ix.Fidelity() != index.FidelityFullInlines {
		t.Errorf("fidelity = %v", ix.Fidelity())
	}
	if info.Symtab {
		t.Error("a -s -w binary should have no .symtab")
	}
	frames := ix.Lookup(work)
	if len(frames) != 1 || frames[0].Function != "main.work" || frames[0].File != src || frames[0].Line != 4 {
		t.Errorf("Lookup(main.work) = %+v, want main.work at %s:4", frames, src)
	}
}

func TestIsPackageInitializer(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"encoding/xml.init", true},
		{"main.init.0", true},
		{"github.com/minio/minio/cmd.init.12", true},
		{"github.com/minio/minio/cmd.map.init.3", true},
		{"go.opentelemetry.io/otel/semconv/v1%2e17%2e0.init", true},
		{"gopkg.in/yaml%2ev3.init.1", true},
		{"github.com/fraugster/parquet-go.constDecoder.init", false}, // a method named init
		{"sync.(*Once).init", false},
		{"main.init.func1", false}, // a closure of an initializer: ordinary code
		{"main.init.0.func2", false},
		{"main.init.", false},
		{"main.initialize", false},
		{"main.reinit", false},
		{"init", false},
		{"", false},
	} {
		if got := debuginfo.IsPackageInitializer(tc.name); got != tc.want {
			t.Errorf("IsPackageInitializer(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
