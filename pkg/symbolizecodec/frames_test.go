package symbolizecodec

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

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

// Emit lays out addresses in request order: repeated addresses share a key's rows, and an
// address that is not ok gets no frames even when its key has some.
func TestEmitRequestOrder(t *testing.T) {
	var b Builder
	b.Reset(2)
	f, g := b.AddString("f"), b.AddString("g")
	b.AppendRow(g, 0, 0, 7, 0, 0) // key 1's frames first: keys need not be added in order
	b.SetKey(1, 0)
	b.AppendRow(f, 0, 0, 1, 0, 0)
	b.AppendRow(g, 0, 0, 2, 0, 0)
	b.SetKey(0, 1)
	r := &symbolizerv1.ModuleResult{}
	b.Emit(r, []bool{true, true, false, true}, []int{0, 1, 0, 0})
	got, err := Decode(r, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]Frame{{{Function: "f", Line: 1}, {Function: "g", Line: 2}}, {{Function: "g", Line: 7}}, nil, {{Function: "f", Line: 1}, {Function: "g", Line: 2}}}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("address %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A Builder reused for another answer starts clean, and Truncate drops rows whole.
func TestBuilderReuse(t *testing.T) {
	var b Builder
	for round := range 2 {
		b.Reset(1)
		x := b.AddString(fmt.Sprintf("x%d", round))
		b.AppendRow(x, 0, 0, 1, 0, 0)
		b.AppendRow(x, 0, 0, 2, 0, 0)
		b.Truncate(1)
		b.SetKey(0, 0)
		r := &symbolizerv1.ModuleResult{}
		b.Emit(r, []bool{true}, []int{0})
		if !slices.Equal(r.Strings, []string{"", fmt.Sprintf("x%d", round)}) || !slices.Equal(r.FrameCounts, []uint32{1}) || !slices.Equal(r.Frames.Lines, []uint32{1}) {
			t.Fatalf("round %d: %v", round, r)
		}
		b.Forget()
		if b.Strings() != nil {
			t.Fatal("Forget kept the answer's strings")
		}
	}
}

// The answer's strings are copies in the arena, across as many of its buffers as they need,
// and one longer than a buffer gets one of its own.
func TestAddStringCopies(t *testing.T) {
	var b Builder
	b.Reset(1)
	var want []string
	for i := range 3000 {
		want = append(want, fmt.Sprintf("%04d%s", i, strings.Repeat("x", 200)))
	}
	want = append(want, strings.Repeat("y", 2*arenaChunk))
	for i, s := range want {
		if got := b.AddString(s); got != uint32(i+1) {
			t.Fatalf("string %d added as %d", i, got)
		}
	}
	if !slices.Equal(b.Strings()[1:], want) {
		t.Fatal("the answer's strings differ from those added")
	}
	for i, s := range b.Strings()[1:] {
		if unsafe.StringData(s) == unsafe.StringData(want[i]) {
			t.Fatalf("string %d is the caller's, not a copy", i)
		}
	}
}

// TestDetacherCopies: frames bound for a cache share no memory with the answer they came
// from, and a string repeated across frames is copied once.
func TestDetacherCopies(t *testing.T) {
	// As decoded: the frames of all addresses in one array, every string in one allocation.
	all := "mainsrc/a.c_ZN1a1bEv"
	answer := []Frame{
		{Function: all[:4], File: all[4:11], Line: 3},
		{Function: all[11:], LinkageName: all[11:], File: all[4:11], Line: 9, Column: 2, StartLine: 1},
		{Function: all[:4], File: all[4:11], Line: 4},
	}
	inAnswer := func(s string) bool {
		p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(all)))
		return p >= lo && p < lo+uintptr(len(all))
	}
	d := NewDetacher()
	first, second := d.Frames(answer[:2]), d.Frames(answer[2:])
	if !slices.Equal(first, answer[:2]) || !slices.Equal(second, answer[2:]) {
		t.Fatalf("copies differ: %v %v", first, second)
	}
	if cap(first) != 2 || cap(second) != 1 || &first[0] == &answer[0] {
		t.Fatal("frames still in the answer's array")
	}
	for _, f := range append(first, second...) {
		for _, s := range []string{f.Function, f.LinkageName, f.File} {
			if s != "" && inAnswer(s) {
				t.Fatalf("%q still points into the answer", s)
			}
		}
	}
	if unsafe.StringData(first[0].File) != unsafe.StringData(second[0].File) || unsafe.StringData(first[0].Function) != unsafe.StringData(second[0].Function) {
		t.Fatal("a repeated string was copied more than once")
	}
	if d.Frames(nil) != nil {
		t.Fatal("no frames should stay nil")
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
