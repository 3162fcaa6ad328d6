package flamegraphcmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

func pprofFile(t *testing.T, dir, name, sampleType string, value int64) string {
	t.Helper()
	fn := &profile.Function{ID: 1, Name: "hot_loop", Filename: "/src/work.c"}
	loc := &profile.Location{ID: 1, Address: 0x1000, Line: []profile.Line{{Function: fn, Line: 7}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: sampleType, Unit: "count"}},
		Sample:     []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{value}}},
		Location:   []*profile.Location{loc},
		Function:   []*profile.Function{fn},
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFlamegraphCmd(t *testing.T) {
	dir := t.TempDir()
	a := pprofFile(t, dir, "a.pb.gz", "samples", 3)
	b := pprofFile(t, dir, "b.pb.gz", "samples", 4)
	var out bytes.Buffer
	c := Cmd{Inputs: []string{a, b}, Stdout: &out}
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "a.html")
	if strings.TrimSpace(out.String()) != want {
		t.Errorf("printed %q, want the page's path %q", out.String(), want)
	}
	page, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"hot_loop"`, `"/src/work.c"`, `"total":7`, "<title>a.pb.gz, b.pb.gz</title>"} {
		if !bytes.Contains(page, []byte(s)) {
			t.Errorf("page lacks %s", s)
		}
	}

	// Refusals name the problem.
	other := pprofFile(t, dir, "c.pb.gz", "alloc_space", 1)
	junk := filepath.Join(dir, "junk.txt")
	if err := os.WriteFile(junk, []byte("not a profile\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		inputs []string
		want   string
	}{
		{[]string{a, other}, "a flame graph adds one kind of value"},
		{[]string{junk}, "junk.txt: neither a pprof profile"},
	} {
		err := (&Cmd{Inputs: tc.inputs, Output: filepath.Join(dir, "x.html"), Stdout: &out}).Run()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.inputs, err, tc.want)
		}
	}
}
