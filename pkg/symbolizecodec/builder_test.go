package symbolizecodec_test

import (
	"testing"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize/symbolizetest"
	"github.com/profsym/profsym/pkg/symbolizecodec"
)

// Frames laid out as the symbolizer lays them out (symbolizetest.Answer uses a Builder) decode
// to themselves, each distinct string travelling once.
func TestBuildDecodeRoundTrip(t *testing.T) {
	locs := [][]symbolizecodec.Frame{
		{{Function: "inner", File: "a.c", Line: 10}, {Function: "outer", LinkageName: "_Z5outerv", File: "a.c", Line: 20, Column: 4, StartLine: 18}},
		nil,
		{{Function: "outer", LinkageName: "_Z5outerv", File: "b.c"}},
		{{Function: "same", LinkageName: "same"}}, // a linkage name equal to the function name is not sent
	}
	r := &symbolizerv1.ModuleResult{}
	symbolizetest.Answer(r, locs)
	// "", inner, a.c, outer, _Z5outerv, b.c, same: each once.
	if len(r.Strings) != 7 {
		t.Fatalf("strings %q", r.Strings)
	}
	if r.Frames.LinkageNames[3] != 0 {
		t.Fatalf("linkage name equal to the function sent as string %d", r.Frames.LinkageNames[3])
	}
	got, err := symbolizecodec.Decode(r, len(locs))
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
	symbolizetest.Answer(empty, make([][]symbolizecodec.Frame, 3))
	if len(empty.Strings) != 0 || len(empty.FrameCounts) != 3 {
		t.Fatalf("an answer without frames: %v", empty)
	}
}
