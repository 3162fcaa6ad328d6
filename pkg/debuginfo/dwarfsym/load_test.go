package dwarfsym

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// TestEncodedSize reports the serialized index size against the DWARF it came from and checks
// that the encoding answers like the index. With PROFSYM_FUZZ_SEEDS=dir it also writes the
// encodings as Go fuzz corpus files for index.FuzzUnmarshal.
func TestEncodedSize(t *testing.T) {
	dir := t.TempDir()
	seeds := os.Getenv("PROFSYM_FUZZ_SEEDS")
	for _, tb := range testBinaries {
		t.Run(tb.name, func(t *testing.T) {
			bin := tb.build(t, dir)
			ix, _ := loadIndex(t, bin, Options{})
			_, f, dwarfBytes := elfSections(t, bin)
			defer f.Close()
			data, err := ix.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			back, err := index.Unmarshal(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, fn := range funcSymbols(t, f) {
				for a := fn.addr; a < fn.end; a += 7 {
					if g, w := fmt.Sprint(back.Lookup(a)), fmt.Sprint(ix.Lookup(a)); g != w {
						t.Fatalf("%#x: decoded index says %s, built index %s", a, g, w)
					}
				}
			}
			st := ix.Stats()
			t.Logf("%s: DWARF %d bytes, index encoded %d bytes (%.1f%%), in memory ~%d bytes; %d strings, %d nodes, %d intervals, %d line rows",
				tb.name, dwarfBytes, len(data), 100*float64(len(data))/float64(dwarfBytes), st.Bytes, st.Strings, st.Nodes, st.Intervals, st.LineRows)
			if seeds != "" {
				body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
				if err := os.WriteFile(filepath.Join(seeds, "real-"+tb.name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
