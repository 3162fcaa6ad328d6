package frametable

import (
	"strings"
	"testing"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
)

func valid() *symbolizerv1.ModuleResult {
	return &symbolizerv1.ModuleResult{
		FrameCounts: []uint32{2, 0, 1},
		Frames: &symbolizerv1.FrameTable{
			FunctionNames: []uint32{1, 2, 2},
			LinkageNames:  []uint32{0, 3, 3},
			Files:         []uint32{4, 4, 0},
			Lines:         []uint32{10, 20, 0},
			Columns:       []uint32{3, 0, 0},
			StartLines:    []uint32{8, 18, 0},
		},
		Strings: []string{"", "inner", "outer", "_Z5outerv", "a.c"},
	}
}

func TestDecode(t *testing.T) {
	got, err := Decode(valid(), 3)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]Frame{
		{{Function: "inner", File: "a.c", Line: 10, Column: 3, StartLine: 8}, {Function: "outer", LinkageName: "_Z5outerv", File: "a.c", Line: 20, StartLine: 18}},
		nil,
		{{Function: "outer", LinkageName: "_Z5outerv"}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d addresses", len(got))
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("address %d: %d frames, want %d", i, len(got[i]), len(want[i]))
		}
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Errorf("address %d frame %d: %+v, want %+v", i, j, got[i][j], want[i][j])
			}
		}
	}
	// Appending to one address's frames must not overwrite the next address's.
	_ = append(got[0], Frame{Function: "x"})
	if got[2][0].Function != "outer" {
		t.Fatal("address slices share capacity")
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	locs := [][]Frame{
		{{Function: "inner", File: "a.c", Line: 10}, {Function: "outer", LinkageName: "_Z5outerv", File: "a.c", Line: 20, Column: 4, StartLine: 18}},
		nil,
		{{Function: "outer", LinkageName: "_Z5outerv", File: "b.c"}},
		{{Function: "same", LinkageName: "same"}}, // a linkage name equal to the function name is not sent
	}
	r := &symbolizerv1.ModuleResult{}
	Encode(r, locs)
	// "", inner, a.c, outer, _Z5outerv, b.c, same: each once.
	if len(r.Strings) != 7 {
		t.Fatalf("strings %q", r.Strings)
	}
	got, err := Decode(r, len(locs))
	if err != nil {
		t.Fatal(err)
	}
	locs[3][0].LinkageName = ""
	for i := range locs {
		if len(got[i]) != len(locs[i]) {
			t.Fatalf("address %d: %d frames", i, len(got[i]))
		}
		for k := range locs[i] {
			if got[i][k] != locs[i][k] {
				t.Fatalf("address %d frame %d: %+v, want %+v", i, k, got[i][k], locs[i][k])
			}
		}
	}
	empty := &symbolizerv1.ModuleResult{}
	Encode(empty, make([][]Frame, 3))
	if len(empty.Strings) != 0 || len(empty.FrameCounts) != 3 {
		t.Fatalf("an answer without frames: %v", empty)
	}
}

func TestDecodeEmptyAnswer(t *testing.T) {
	got, err := Decode(&symbolizerv1.ModuleResult{FrameCounts: []uint32{0, 0}}, 2)
	if err != nil || len(got) != 2 || got[0] != nil || got[1] != nil {
		t.Fatalf("%v %v", got, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*symbolizerv1.ModuleResult)
		addrs  int
		want   string
	}{
		{"fewer counts than addresses", func(*symbolizerv1.ModuleResult) {}, 4, "frame_counts: 3 entries for 4 addresses"},
		{"short column", func(r *symbolizerv1.ModuleResult) { r.Frames.Lines = r.Frames.Lines[:2] }, 3, "frames.lines: 2 rows"},
		{"counts exceed rows", func(r *symbolizerv1.ModuleResult) { r.FrameCounts[1] = 5 }, 3, "frame_counts add up to 8"},
		{"string out of range", func(r *symbolizerv1.ModuleResult) { r.Frames.Files[1] = 9 }, 3, "frames.files[1]: string 9 outside strings of 5 entries"},
		{"no string table", func(r *symbolizerv1.ModuleResult) { r.Strings = nil }, 3, "frames.function_names[0]: string 1 outside strings of 0"},
		{"string 0 not empty", func(r *symbolizerv1.ModuleResult) { r.Strings[0] = "x" }, 3, `strings[0] is "x"`},
		{"frames missing", func(r *symbolizerv1.ModuleResult) { r.Frames = nil }, 3, "frames.function_names: 0 rows, frame_counts add up to 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := valid()
			tc.mutate(r)
			_, err := Decode(r, tc.addrs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{2, 0, 1}, []byte{1, 2, 2, 0, 3, 3, 4, 4, 0}, uint8(5), 3)
	f.Fuzz(func(t *testing.T, counts, idx []byte, nstr uint8, addrs int) {
		if addrs < 0 || addrs > 1000 {
			return
		}
		r := &symbolizerv1.ModuleResult{Frames: &symbolizerv1.FrameTable{}}
		for _, c := range counts {
			r.FrameCounts = append(r.FrameCounts, uint32(c%4))
		}
		for i, b := range idx {
			switch i % 3 {
			case 0:
				r.Frames.FunctionNames = append(r.Frames.FunctionNames, uint32(b))
				r.Frames.Lines = append(r.Frames.Lines, uint32(b))
				r.Frames.Columns = append(r.Frames.Columns, 0)
				r.Frames.StartLines = append(r.Frames.StartLines, 0)
			case 1:
				r.Frames.LinkageNames = append(r.Frames.LinkageNames, uint32(b))
			case 2:
				r.Frames.Files = append(r.Frames.Files, uint32(b))
			}
		}
		for i := 0; i < int(nstr); i++ {
			r.Strings = append(r.Strings, strings.Repeat("s", i))
		}
		out, err := Decode(r, addrs)
		if err != nil {
			return
		}
		for i, fr := range out {
			if len(fr) != int(r.FrameCounts[i]) {
				t.Fatalf("address %d: %d frames, count %d", i, len(fr), r.FrameCounts[i])
			}
		}
	})
}
