package flamegraph

import (
	"bytes"
	"strings"
	"testing"
)

// sampleStacks is a small program's profile: main calls compute (which has square inlined
// into it) and write_out, which enters the kernel; one frame is unsymbolized.
func sampleStacks() []Stack {
	mainF := Frame{Function: "main", File: "/src/prog.c", Line: 30, Kind: "native"}
	compute := Frame{Function: "compute", File: "/src/prog.c", Line: 12, Kind: "native"}
	square := Frame{Function: "square", File: "/src/math.h", Line: 4, Kind: "native", Inlined: true}
	writeOut := Frame{Function: "write_out", File: "/src/prog.c", Line: 21, Kind: "native"}
	sysWrite := Frame{Function: "ksys_write", Kind: "kernel"}
	unsym := Frame{Module: "/usr/lib/libfoo.so", Address: 0x1234, Kind: "native"}
	return []Stack{
		{Frames: []Frame{square, compute, mainF}, Value: 60},
		{Frames: []Frame{{Function: "square", File: "/src/math.h", Line: 5, Kind: "native", Inlined: true}, compute, mainF}, Value: 20},
		{Frames: []Frame{compute, mainF}, Value: 5},
		{Frames: []Frame{sysWrite, writeOut, mainF}, Value: 10},
		{Frames: []Frame{unsym, mainF}, Value: 5},
		{Frames: nil, Value: 7}, // no frames: not counted
		{Frames: []Frame{mainF}, Value: 0},
	}
}

func findChild(t *testing.T, d jsonTree, n jsonNode, name string, inlined bool) jsonNode {
	t.Helper()
	for _, c := range n.Children {
		if d.Strings[c.Name] == name && c.Inlined == inlined {
			return c
		}
	}
	t.Fatalf("no child %q (inlined %v) under %q", name, inlined, d.Strings[n.Name])
	return jsonNode{}
}

func TestTreeMerges(t *testing.T) {
	tree := TreeOf(sampleStacks())
	if got := tree.Total(); got != 100 {
		t.Fatalf("total %d, want 100", got)
	}
	d := tree.data("t", "samples", 1)
	mainN := findChild(t, d, d.Root, "main", false)
	if mainN.Value != 100 || len(mainN.Children) != 3 {
		t.Fatalf("main: value %d with %d children, want 100 with 3", mainN.Value, len(mainN.Children))
	}
	compute := findChild(t, d, mainN, "compute", false)
	if compute.Value != 85 {
		t.Errorf("compute %d, want 85", compute.Value)
	}
	sq := findChild(t, d, compute, "square", true)
	if sq.Value != 80 || d.Strings[sq.File] != "/src/math.h" {
		t.Errorf("square: %d in %q, want 80 in /src/math.h", sq.Value, d.Strings[sq.File])
	}
	if want := [][2]int64{{4, 60}, {5, 20}}; len(sq.Lines) != 2 || sq.Lines[0] != want[0] || sq.Lines[1] != want[1] {
		t.Errorf("square's lines %v, want %v (busiest first)", sq.Lines, want)
	}
	w := findChild(t, d, mainN, "write_out", false)
	k := findChild(t, d, w, "ksys_write", false)
	if d.Strings[k.Kind] != "kernel" {
		t.Errorf("ksys_write kind %q", d.Strings[k.Kind])
	}
	u := findChild(t, d, mainN, "libfoo.so+0x1234", false)
	if !u.Unsym {
		t.Error("the frame without a function is not marked unsymbolized")
	}
	var kinds []string
	for _, k := range d.Kinds {
		kinds = append(kinds, k.Kind)
	}
	if strings.Join(kinds, ",") != "native,kernel" {
		t.Errorf("kinds %v, want native (90 own) then kernel (10)", kinds)
	}
}

func TestTreeLeavesOutTinyFrames(t *testing.T) {
	tree := TreeOf(sampleStacks())
	d := tree.data("t", "samples", 10)
	mainN := findChild(t, d, d.Root, "main", false)
	for _, c := range mainN.Children {
		if c.Value < 10 {
			t.Errorf("frame %q of %d kept below the minimum of 10", d.Strings[c.Name], c.Value)
		}
	}
	if len(mainN.Children) != 2 {
		t.Errorf("main has %d children at a minimum of 10, want 2 (compute, write_out)", len(mainN.Children))
	}
}

func TestRenderIsSelfContained(t *testing.T) {
	stacks := sampleStacks()
	stacks = append(stacks, Stack{Frames: []Frame{{Function: "</script><script>alert(1)</script>", Kind: "native"}}, Value: 1})
	var b bytes.Buffer
	if err := Render(&b, TreeOf(stacks), Options{Title: "a <b> & {{DATA}}"}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"http://", "https://", "src=\"", "<link", "@import", "{{CSS}}", "{{JS}}"} {
		if strings.Contains(page, bad) {
			t.Errorf("page holds %q: it must fetch nothing and fill every placeholder", bad)
		}
	}
	if n := strings.Count(page, "</script>"); n != 2 {
		t.Errorf("page has %d </script>, want 2: a frame name closed a script element", n)
	}
	if !strings.Contains(page, "<title>a &lt;b&gt; &amp; {{DATA}}</title>") {
		t.Error("title not escaped or replaced as data")
	}
	if !strings.Contains(page, `"compute"`) {
		t.Error("page does not hold the tree")
	}
}
