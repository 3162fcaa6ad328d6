package pipeline

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
)

// request builds a one-sample request: a native location with the given lines (innermost
// first) and a kernel location without lines, leaf first.
func request(t *testing.T, lines [][2]any, count int64) pprofile.Profiles {
	t.Helper()
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	strs := d.StringTable()
	strs.Append("")
	str := func(s string) int32 { strs.Append(s); return int32(strs.Len() - 1) }
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.AttributeTable().AppendEmpty()
	d.StackTable().AppendEmpty()

	m := d.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(str("/bin/app"))
	kindNative := d.AttributeTable().AppendEmpty()
	kindNative.SetKeyStrindex(str(otlpattr.FrameType))
	kindNative.Value().SetStr("native")
	kindKernel := d.AttributeTable().AppendEmpty()
	kindKernel.SetKeyStrindex(kindNative.KeyStrindex())
	kindKernel.Value().SetStr("kernel")

	loc := d.LocationTable().AppendEmpty()
	loc.SetMappingIndex(1)
	loc.SetAddress(0x1234)
	loc.AttributeIndices().Append(1)
	for _, l := range lines {
		f := d.FunctionTable().AppendEmpty()
		f.SetNameStrindex(str(l[0].(string)))
		f.SetFilenameStrindex(str("app.c"))
		ln := loc.Lines().AppendEmpty()
		ln.SetFunctionIndex(int32(d.FunctionTable().Len() - 1))
		ln.SetLine(int64(l[1].(int)))
	}
	kloc := d.LocationTable().AppendEmpty()
	kloc.SetAddress(0xffff0000)
	kloc.AttributeIndices().Append(2)

	st := d.StackTable().AppendEmpty()
	st.LocationIndices().Append(2, 1) // kernel leaf, then the native caller

	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr(otlpattr.ProcessPID, "42")
	rp.Resource().Attributes().PutStr(otlpattr.ProcessExecutableName, "app")
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	s := p.Samples().AppendEmpty()
	s.SetStackIndex(1)
	s.Values().Append(count)
	return pd
}

func TestStacksAndTopFunctions(t *testing.T) {
	reqs := []pprofile.Profiles{
		request(t, [][2]any{{"inner", 10}, {"middle", 20}, {"outer", 30}}, 3),
		request(t, [][2]any{{"inner", 11}, {"outer", 31}}, 1),
		request(t, nil, 2),
	}
	stacks, err := Stacks(reqs)
	if err != nil {
		t.Fatal(err)
	}
	if got := TotalSamples(stacks); got != 6 {
		t.Fatalf("TotalSamples = %d, want 6", got)
	}
	first := stacks[0]
	if first.PID != "42" || first.Exe != "app" {
		t.Fatalf("resource: pid %q exe %q", first.PID, first.Exe)
	}
	var names []string
	for _, f := range first.Frames {
		names = append(names, f.Name())
	}
	if got, want := strings.Join(names, ","), "0xffff0000,inner,middle,outer"; got != want {
		t.Fatalf("frames %s, want %s", got, want)
	}
	if first.Frames[0].Kind != "kernel" || !first.Frames[1].Inlined || !first.Frames[2].Inlined || first.Frames[3].Inlined {
		t.Fatalf("kinds or inline flags wrong: %+v", first.Frames)
	}
	if n := stacks[2].Frames[1].Name(); n != "app+0x1234" {
		t.Fatalf("unsymbolized frame name %q, want app+0x1234", n)
	}

	// Make the native frame the leaf to rank functions by self samples.
	for i := range stacks {
		stacks[i].Frames = stacks[i].Frames[1:]
	}
	top := TopFunctions(stacks, 10)
	tests := []struct {
		fn     string
		self   int64
		line   int64
		inline string
	}{
		{"inner", 4, 10, "middle,outer"},
		{"app+0x1234", 2, 0, ""},
	}
	if len(top) != len(tests) {
		t.Fatalf("top = %+v, want %d rows", top, len(tests))
	}
	for i, tc := range tests {
		got := top[i]
		if got.Function != tc.fn || got.Self != tc.self || got.Line != tc.line || strings.Join(got.InlinedInto, ",") != tc.inline {
			t.Errorf("row %d = %+v, want %s self %d line %d inlined into %q", i, got, tc.fn, tc.self, tc.line, tc.inline)
		}
	}
	if len(TopFunctions(stacks, 1)) != 1 {
		t.Error("TopFunctions does not cut at n")
	}
}

func TestStacksRejectBadIndices(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(pd pprofile.Profiles)
		want    string
	}{
		{"stack", func(pd pprofile.Profiles) {
			pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).SetStackIndex(99)
		}, "stack index 99"},
		{"location", func(pd pprofile.Profiles) { pd.Dictionary().StackTable().At(1).LocationIndices().Append(-1) }, "location index -1"},
		{"mapping", func(pd pprofile.Profiles) { pd.Dictionary().LocationTable().At(1).SetMappingIndex(7) }, "mapping index 7"},
		{"function", func(pd pprofile.Profiles) {
			pd.Dictionary().LocationTable().At(1).Lines().At(0).SetFunctionIndex(50)
		}, "function index 50"},
		{"string", func(pd pprofile.Profiles) { pd.Dictionary().FunctionTable().At(1).SetNameStrindex(1000) }, "string index 1000"},
		{"attribute", func(pd pprofile.Profiles) { pd.Dictionary().LocationTable().At(1).AttributeIndices().Append(30) }, "attribute index 30"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pd := request(t, [][2]any{{"f", 1}}, 1)
			tc.corrupt(pd)
			_, err := Stacks([]pprofile.Profiles{pd})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestReadDelimited(t *testing.T) {
	good, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(request(t, [][2]any{{"f", 1}}, 5))
	if err != nil {
		t.Fatal(err)
	}
	record := func(b []byte) []byte { return append(binary.AppendUvarint(nil, uint64(len(b))), b...) }
	tests := []struct {
		name    string
		data    []byte
		records int
		err     string
	}{
		{"empty", nil, 0, ""},
		{"two records", append(record(good), record(good)...), 2, ""},
		{"truncated record", record(good)[:len(good)/2], 0, "truncated"},
		{"lying length", binary.AppendUvarint(nil, 1<<40), 0, "exceeds"},
		{"broken length", []byte{0xff}, 0, "length"},
		{"not protobuf", record([]byte{0xff, 0xff, 0xff}), 0, "decode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sent.otlp")
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadDelimited(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != tc.records {
				t.Fatalf("got %d records, err %v; want %d", len(got), err, tc.records)
			}
		})
	}
}

func TestReadOTLPFile(t *testing.T) {
	dir := t.TempDir()
	b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(request(t, [][2]any{{"f", 1}}, 2))
	if err != nil {
		t.Fatal(err)
	}
	record := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	two := append(record(b), record(b)...)
	for _, tc := range []struct {
		name    string
		data    []byte
		records int
		err     string
	}{
		{"two", two, 2, ""},
		{"empty", nil, 0, ""},
		{"short length", append(record(b), 0, 0), 0, "record 1: 2 trailing bytes"},
		{"truncated", two[:len(two)-1], 0, "record 1 of"},
		{"corrupt", record([]byte{0xff, 0xff}), 0, "record 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".otlp.pb")
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadOTLPFile(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), path) {
					t.Fatalf("err = %v, want one naming the file and containing %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != tc.records {
				t.Fatalf("got %d records, err %v; want %d", len(got), err, tc.records)
			}
		})
	}
	if got, err := ReadOTLPFile(filepath.Join(dir, "missing")); err != nil || len(got) != 0 {
		t.Fatalf("a file not written yet: %d records, %v; want none and no error", len(got), err)
	}
}
