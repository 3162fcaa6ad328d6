package testsupport

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const helloC = `#include <stdio.h>
static int square(int x) { return x * x; }
int main(int argc, char **argv) { printf("%d\n", square(argc)); return 0; }
`

func TestDebuginfodServesBuildID(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	bin := CompileC(t, helloC, "-g", "-Wl,--build-id")
	id := readBuildID(t, bin)
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}

	d := StartDebuginfod(t, filepath.Dir(bin))
	d.WaitForBuildID(t, id, 20*time.Second)

	got, status := get(ctx, t, d.URL()+"/buildid/"+id+"/debuginfo")
	if status != http.StatusOK {
		t.Fatalf("GET debuginfo: status %d", status)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("GET debuginfo returned %d bytes that differ from the %d-byte file", len(got), len(want))
	}
	if _, status := get(ctx, t, d.URL()+"/buildid/"+strings.Repeat("ab", 20)+"/debuginfo"); status != http.StatusNotFound {
		t.Fatalf("GET of an unknown build ID: status %d, want 404", status)
	}

	find, err := exec.LookPath("debuginfod-find")
	if err != nil {
		t.Logf("debuginfod-find not installed; the client check is left out")
		return
	}
	cache := t.TempDir()
	cmd := exec.CommandContext(ctx, find, "debuginfo", id)
	cmd.Env = childEnv(func(key string) bool { return strings.HasPrefix(key, "DEBUGINFOD_") },
		"DEBUGINFOD_URLS="+d.URL(), "DEBUGINFOD_CACHE_PATH="+cache)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("debuginfod-find debuginfo %s: %v\n%s", id, err, stderr.Bytes())
	}
	path := strings.TrimSpace(string(out))
	if !strings.HasPrefix(path, cache) {
		t.Fatalf("debuginfod-find put the file at %s, outside DEBUGINFOD_CACHE_PATH %s", path, cache)
	}
	fetched, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fetched, want) {
		t.Fatalf("debuginfod-find fetched %d bytes that differ from the %d-byte file", len(fetched), len(want))
	}
}

// Files that appear after the start are found by the periodic rescan.
func TestDebuginfodFindsLateFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := StartDebuginfod(t, dir)

	bin := CompileC(t, helloC+"int late_marker = 42;\n", "-g", "-Wl,--build-id")
	id := readBuildID(t, bin)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	// Write then rename so that a rescan never sees a half-written file.
	tmp := filepath.Join(dir, ".late.tmp")
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "late")); err != nil {
		t.Fatal(err)
	}
	d.WaitForBuildID(t, id, 20*time.Second)
}

func TestCheckBuildID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"511f21827b78f9b5ace28283c872f03b5b974352", true},
		{"", false},
		{"abc", false},
		{"zz", false},
		{"../etc", false},
	}
	for _, tt := range tests {
		if err := checkBuildID(tt.id); (err == nil) != tt.ok {
			t.Errorf("checkBuildID(%q) = %v, want ok=%v", tt.id, err, tt.ok)
		}
	}
}

func get(ctx context.Context, t *testing.T, url string) ([]byte, int) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return body, resp.StatusCode
}

func readBuildID(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("open ELF %s: %v", path, err)
	}
	defer f.Close()
	id, err := gnuBuildID(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return id
}

// gnuBuildID reads the NT_GNU_BUILD_ID note from .note.gnu.build-id.
func gnuBuildID(f *elf.File) (string, error) {
	sec := f.Section(".note.gnu.build-id")
	if sec == nil {
		return "", errors.New("no .note.gnu.build-id section")
	}
	data, err := sec.Data()
	if err != nil {
		return "", fmt.Errorf("read .note.gnu.build-id: %w", err)
	}
	const ntGNUBuildID = 3
	for len(data) >= 12 {
		namesz := f.ByteOrder.Uint32(data[0:4])
		descsz := f.ByteOrder.Uint32(data[4:8])
		typ := f.ByteOrder.Uint32(data[8:12])
		nameEnd := 12 + align4(uint64(namesz))
		descEnd := nameEnd + align4(uint64(descsz))
		if nameEnd > uint64(len(data)) || nameEnd+uint64(descsz) > uint64(len(data)) {
			return "", errors.New("truncated note in .note.gnu.build-id")
		}
		name := data[12 : 12+namesz]
		if typ == ntGNUBuildID && string(bytes.TrimRight(name, "\x00")) == "GNU" && descsz > 0 {
			return hex.EncodeToString(data[nameEnd : nameEnd+uint64(descsz)]), nil
		}
		if descEnd > uint64(len(data)) {
			break
		}
		data = data[descEnd:]
	}
	return "", errors.New("no GNU build ID note in .note.gnu.build-id")
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }
