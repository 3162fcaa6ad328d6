package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlameGraph writes the demo's two graphs from resolved stacks: the workload's, and the
// machine's with each process at the base; the page holds the inline frame marked and the
// file names, and nothing to fetch.
func TestFlameGraph(t *testing.T) {
	stacks := []Stack{
		{PID: "42", Exe: "/usr/bin/workload", Samples: 5, Frames: []Frame{
			{Function: "mix", File: "workload.c", Line: 12, Inlined: true, Kind: "native"},
			{Function: "crunch", File: "workload.c", Line: 30, Kind: "native"},
			{Function: "main", File: "workload.c", Line: 50, Kind: "native"}}},
		{PID: "7", Comm: "sshd", Samples: 2, Frames: []Frame{{Mapping: "/usr/sbin/sshd", Address: 0x4242, Kind: "native"}}},
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name      string
		byProcess bool
		want      []string
	}{
		{"workload", false, []string{`"mix"`, `"i":true`, `"workload.c"`, `"total":7`}},
		{"machine", true, []string{`"workload (pid 42)"`, `"sshd (pid 7)"`, `"sshd+0x4242"`, `"u":true`}},
	} {
		path := filepath.Join(dir, tc.name+".html")
		if err := FlameGraph(stacks, path, tc.name, tc.byProcess); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s: page lacks %s", tc.name, w)
			}
		}
		if strings.Contains(string(b), "https://") {
			t.Errorf("%s: page refers to the network", tc.name)
		}
	}
	if err := FlameGraph(nil, filepath.Join(dir, "none.html"), "none", false); err == nil {
		t.Error("no samples: want an error, not an empty page")
	}
}
