package pipeline

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
)

// maxFileBytes bounds one OTLP file or record read back: the gateway refuses requests
// above 16 MiB by default, and the demo and tests write a few, so anything far larger is not
// ours.
const maxFileBytes = 256 << 20

// ReadDelimited reads a file of length-delimited OTLP requests (a uvarint byte count, then
// the message), as the collector's --output-file writes them.
func ReadDelimited(path string) ([]pprofile.Profiles, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var out []pprofile.Profiles
	for {
		n, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: record %d: length: %w", path, len(out), err)
		}
		if n > maxFileBytes {
			return nil, fmt.Errorf("%s: record %d: length %d exceeds %d", path, len(out), n, maxFileBytes)
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(br, rec); err != nil {
			return nil, fmt.Errorf("%s: record %d: truncated: %w", path, len(out), err)
		}
		pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(rec)
		if err != nil {
			return nil, fmt.Errorf("%s: record %d: decode: %w", path, len(out), err)
		}
		out = append(out, pd)
	}
}

// Frame is one frame of a resolved stack.
type Frame struct {
	Function string // empty when unsymbolized
	File     string
	Line     int64
	// Inlined is true for a frame that was inlined into the frame after it (same location).
	Inlined bool
	Kind    string // profile.frame.type: native, kernel, go, ...
	Mapping string // the mapping's file name
	Address uint64
}

// Name is the function name, or the mapping and address when there is none.
func (f Frame) Name() string {
	if f.Function != "" {
		return f.Function
	}
	if f.Mapping != "" {
		return fmt.Sprintf("%s+%#x", filepath.Base(f.Mapping), f.Address)
	}
	return fmt.Sprintf("%#x", f.Address)
}

// Stack is one sample: the process it belongs to, its frames leaf first (inline frames
// expanded, innermost first) and its count.
type Stack struct {
	PID     string
	Exe     string // process.executable.name
	Comm    string // thread.name
	Frames  []Frame
	Samples int64
}

// Stacks resolves every sample of the requests into stacks. A sample counts its values, or
// its timestamps when it has no values (as the OTel eBPF profiler sends them). Indices are
// checked before use: a request that references outside its tables is an error, not a
// panic.
func Stacks(reqs []pprofile.Profiles) ([]Stack, error) {
	var out []Stack
	for ri, pd := range reqs {
		d := pd.Dictionary()
		rps := pd.ResourceProfiles()
		for i := 0; i < rps.Len(); i++ {
			res := rps.At(i).Resource()
			pid := resAttr(res, otlpattr.ProcessPID)
			exe := resAttr(res, otlpattr.ProcessExecutableName)
			sps := rps.At(i).ScopeProfiles()
			for j := 0; j < sps.Len(); j++ {
				ps := sps.At(j).Profiles()
				for k := 0; k < ps.Len(); k++ {
					ss := ps.At(k).Samples()
					for s := 0; s < ss.Len(); s++ {
						st, err := resolveSample(d, ss.At(s))
						if err != nil {
							return nil, fmt.Errorf("request %d resource %d profile %d sample %d: %w", ri, i, k, s, err)
						}
						st.PID, st.Exe = pid, exe
						out = append(out, st)
					}
				}
			}
		}
	}
	return out, nil
}

func resAttr(res pcommon.Resource, key string) string {
	if v, ok := res.Attributes().Get(key); ok {
		return v.AsString()
	}
	return ""
}

func str(d pprofile.ProfilesDictionary, i int32) (string, error) {
	return otlpprofiles.CheckedString(d, i)
}

func resolveSample(d pprofile.ProfilesDictionary, s pprofile.Sample) (Stack, error) {
	var st Stack
	n := int64(0)
	vals := s.Values()
	for i := 0; i < vals.Len(); i++ {
		n += vals.At(i)
	}
	if vals.Len() == 0 {
		n = int64(s.TimestampsUnixNano().Len())
	}
	st.Samples = n
	attrs := d.AttributeTable()
	idx := s.AttributeIndices()
	for i := 0; i < idx.Len(); i++ {
		a := idx.At(i)
		if a < 0 || int(a) >= attrs.Len() {
			return st, fmt.Errorf("attribute index %d outside the table of %d", a, attrs.Len())
		}
		k, err := str(d, attrs.At(int(a)).KeyStrindex())
		if err != nil {
			return st, err
		}
		if k == otlpattr.ThreadName {
			st.Comm = attrs.At(int(a)).Value().AsString()
		}
	}
	frames, err := otlpprofiles.StackFrames(d, s.StackIndex())
	if err != nil {
		return st, err
	}
	for _, f := range frames {
		st.Frames = append(st.Frames, Frame(f))
	}
	return st, nil
}

// TotalSamples is the sum of the stacks' counts.
func TotalSamples(stacks []Stack) int64 {
	var n int64
	for _, s := range stacks {
		n += s.Samples
	}
	return n
}

// FuncStat is a function's share of the samples where it is the leaf (self time).
type FuncStat struct {
	Function string
	// File and Line are of the hottest location of the function.
	File string
	Line int64
	// InlinedInto is the chain of functions the hottest location was inlined into,
	// innermost first; empty when the function was not inlined there.
	InlinedInto []string
	Kind        string
	Self        int64
}

// TopFunctions returns the n functions with the most self samples among stacks, hottest
// first. A function is keyed by name (or mapping and address when unsymbolized).
func TopFunctions(stacks []Stack, n int) []FuncStat {
	type lineKey struct {
		file   string
		line   int64
		inline string
	}
	type agg struct {
		stat  FuncStat
		lines map[lineKey]int64
		chain map[lineKey][]string
	}
	by := map[string]*agg{}
	for _, s := range stacks {
		if len(s.Frames) == 0 {
			continue
		}
		leaf := s.Frames[0]
		var chain []string
		for i := 0; i < len(s.Frames) && s.Frames[i].Inlined; i++ {
			chain = append(chain, s.Frames[i+1].Name())
		}
		name := leaf.Name()
		a := by[name]
		if a == nil {
			a = &agg{stat: FuncStat{Function: name, Kind: leaf.Kind}, lines: map[lineKey]int64{}, chain: map[lineKey][]string{}}
			by[name] = a
		}
		a.stat.Self += s.Samples
		k := lineKey{leaf.File, leaf.Line, strings.Join(chain, "\x00")}
		a.lines[k] += s.Samples
		a.chain[k] = chain
	}
	out := make([]FuncStat, 0, len(by))
	for _, a := range by {
		var best lineKey
		bestN := int64(-1)
		for k, v := range a.lines {
			if v > bestN || (v == bestN && (k.file < best.file || (k.file == best.file && k.line < best.line))) {
				best, bestN = k, v
			}
		}
		a.stat.File, a.stat.Line, a.stat.InlinedInto = best.file, best.line, a.chain[best]
		out = append(out, a.stat)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Self != out[j].Self {
			return out[i].Self > out[j].Self
		}
		return out[i].Function < out[j].Function
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
