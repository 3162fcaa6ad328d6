package pprofexporter

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The output directory holds the newest files only: a development gateway writes into a
// size-limited volume that would otherwise fill and get the pod evicted. Files that are not
// the exporter's own are left alone.
func TestRetentionKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "README")
	if err := os.WriteFile(foreign, []byte("not an output file"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := retention{prefix: "profile-", keep: 3}
	var written []string
	for i := range 7 {
		name := fmt.Sprintf("profile-%019d-%06d-0.0.0.pb.gz", 1000+i, i)
		if err := writeAtomic(dir, name, func(f *os.File) error { _, err := f.WriteString("x"); return err }); err != nil {
			t.Fatal(err)
		}
		written = append(written, filepath.Join(dir, name))
		if err := r.prune(dir); err != nil {
			t.Fatal(err)
		}
	}
	kept, _ := filepath.Glob(filepath.Join(dir, "profile-*"))
	if want := written[len(written)-3:]; !slices.Equal(kept, want) {
		t.Errorf("kept %v, want the newest three %v", kept, want)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("a file that is not output was touched: %v", err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".tmp-*")); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}
