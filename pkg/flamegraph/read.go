package flamegraph

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpprofiles"
)

// Format names the encodings Parse reads.
type Format string

const (
	FormatPprof Format = "pprof"
	// FormatOTLP is one ExportProfilesServiceRequest, plain protobuf.
	FormatOTLP Format = "otlp"
	// FormatOTLPUvarint is a stream of requests, each after its length as a uvarint: what the
	// node collector's --output-file writes.
	FormatOTLPUvarint Format = "otlp-uvarint-delimited"
	// FormatOTLPLength32 is a stream of requests, each after its length as 4 big-endian bytes:
	// what the gateway's file exporter writes (format: proto).
	FormatOTLPLength32 Format = "otlp-length32-delimited"
)

// MaxFileBytes bounds a file Read accepts: far above any profile profsym writes.
const MaxFileBytes = 1 << 30

// Profile is what Parse read: the stacks, the unit of their values and the file's format.
type Profile struct {
	Format Format
	Unit   string
	Stacks []Stack
}

// Read reads and parses the file at path; see Parse.
func Read(path, sampleType string) (Profile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Profile{}, err
	}
	if st.Size() > MaxFileBytes {
		return Profile{}, fmt.Errorf("%s: %d bytes, more than the %d a profile may have", path, st.Size(), MaxFileBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, err
	}
	p, err := Parse(b, sampleType)
	if err != nil {
		return Profile{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Parse reads a pprof profile (gzipped or not) or OTLP profiles (plain, uvarint-delimited or
// length32-delimited), telling them apart by their bytes. sampleType picks a pprof sample type
// by name (empty: the last one, pprof's default). Every index is checked: a file that points
// outside its own tables is an error, never a panic.
func Parse(b []byte, sampleType string) (Profile, error) {
	if len(b) == 0 {
		return Profile{}, errors.New("empty file: not a profile")
	}
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		p, err := profile.ParseData(b)
		if err != nil {
			return Profile{}, fmt.Errorf("gzipped, but not a pprof profile: %w", err)
		}
		return fromPprof(p, sampleType)
	}
	if reqs, ok := splitLength32(b); ok {
		if p, err := fromOTLPRecords(reqs, FormatOTLPLength32); err == nil {
			return p, nil
		}
	}
	if reqs, ok := splitUvarint(b); ok {
		if p, err := fromOTLPRecords(reqs, FormatOTLPUvarint); err == nil {
			return p, nil
		}
	}
	otlpP, otlpErr := fromOTLPRecords([][]byte{b}, FormatOTLP)
	if otlpErr == nil {
		return otlpP, nil
	}
	pp, err := profile.ParseData(b)
	if err == nil {
		return fromPprof(pp, sampleType)
	}
	return Profile{}, fmt.Errorf("neither a pprof profile (%w) nor OTLP profiles, plain (%w) or length-delimited", err, otlpErr)
}

// splitLength32 splits b into records, each after a 4-byte big-endian length; false unless
// the records cover b exactly.
func splitLength32(b []byte) ([][]byte, bool) {
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, false
		}
		n := binary.BigEndian.Uint32(b)
		if n == 0 || uint64(n) > uint64(len(b)-4) {
			return nil, false
		}
		out = append(out, b[4:4+n])
		b = b[4+n:]
	}
	return out, true
}

// splitUvarint splits b into records, each after its length as a uvarint; false unless the
// records cover b exactly.
func splitUvarint(b []byte) ([][]byte, bool) {
	var out [][]byte
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n == 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		out = append(out, b[k:k+int(n)])
		b = b[k+int(n):]
	}
	return out, true
}

func fromOTLPRecords(recs [][]byte, f Format) (Profile, error) {
	p := Profile{Format: f}
	profiles := 0
	for i, rec := range recs {
		pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(rec)
		if err != nil {
			return Profile{}, fmt.Errorf("record %d: %w", i, err)
		}
		n, err := otlpStacks(pd, &p)
		if err != nil {
			return Profile{}, fmt.Errorf("record %d: %w", i, err)
		}
		profiles += n
	}
	if profiles == 0 {
		return Profile{}, errors.New("no profile in the OTLP data")
	}
	if p.Unit == "" {
		p.Unit = "samples"
	}
	return p, nil
}

func otlpString(d pprofile.ProfilesDictionary, i int32) (string, error) {
	return otlpprofiles.CheckedString(d, i)
}

// otlpStacks appends the request's samples to p and returns how many profiles it held. A
// sample counts its values, or its timestamps when it has none (as the OTel eBPF profiler
// sends them).
func otlpStacks(pd pprofile.Profiles, p *Profile) (int, error) {
	d := pd.Dictionary()
	n := 0
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			ps := sps.At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				n++
				prof := ps.At(k)
				if p.Unit == "" {
					if u, err := otlpString(d, prof.SampleType().TypeStrindex()); err == nil && u != "" {
						p.Unit = u
					}
				}
				ss := prof.Samples()
				for s := 0; s < ss.Len(); s++ {
					st, err := otlpSample(d, ss.At(s))
					if err != nil {
						return 0, fmt.Errorf("resource %d profile %d sample %d: %w", i, k, s, err)
					}
					p.Stacks = append(p.Stacks, st)
				}
			}
		}
	}
	return n, nil
}

func otlpSample(d pprofile.ProfilesDictionary, s pprofile.Sample) (Stack, error) {
	var st Stack
	vals := s.Values()
	for i := 0; i < vals.Len(); i++ {
		st.Value += vals.At(i)
	}
	if vals.Len() == 0 {
		st.Value = int64(s.TimestampsUnixNano().Len())
	}
	frames, err := otlpprofiles.StackFrames(d, s.StackIndex())
	if err != nil {
		return st, err
	}
	for _, f := range frames {
		st.Frames = append(st.Frames, Frame{Function: f.Function, File: f.File, Line: f.Line, Inlined: f.Inlined, Kind: f.Kind, Module: f.Mapping, Address: f.Address})
	}
	return st, nil
}

// fromPprof turns a pprof profile's samples into stacks, valued by the sample type named (the
// last one when empty).
func fromPprof(p *profile.Profile, sampleType string) (Profile, error) {
	if len(p.SampleType) == 0 {
		return Profile{}, errors.New("pprof profile without sample types")
	}
	vi := len(p.SampleType) - 1
	if sampleType != "" {
		vi = -1
		var names []string
		for i, st := range p.SampleType {
			names = append(names, st.Type)
			if st.Type == sampleType {
				vi = i
			}
		}
		if vi < 0 {
			return Profile{}, fmt.Errorf("pprof profile has no sample type %q (it has %v)", sampleType, names)
		}
	}
	out := Profile{Format: FormatPprof, Unit: p.SampleType[vi].Unit}
	if t := p.SampleType[vi].Type; t != "" && out.Unit != "" && t != out.Unit {
		out.Unit = t + " (" + out.Unit + ")"
	} else if out.Unit == "" {
		out.Unit = t
	}
	for _, s := range p.Sample {
		if vi >= len(s.Value) {
			return Profile{}, fmt.Errorf("pprof sample with %d values, %d sample types", len(s.Value), len(p.SampleType))
		}
		st := Stack{Value: s.Value[vi]}
		for _, loc := range s.Location {
			if loc == nil {
				continue
			}
			base := Frame{Address: loc.Address}
			if loc.Mapping != nil {
				base.Module = loc.Mapping.File
			}
			if len(loc.Line) == 0 {
				st.Frames = append(st.Frames, base)
				continue
			}
			for i, ln := range loc.Line {
				f := base
				f.Line = ln.Line
				f.Inlined = i < len(loc.Line)-1
				if ln.Function != nil {
					f.Function, f.File = ln.Function.Name, ln.Function.Filename
				}
				st.Frames = append(st.Frames, f)
			}
		}
		out.Stacks = append(out.Stacks, st)
	}
	return out, nil
}

// TreeOf merges stacks into a tree.
func TreeOf(stacks []Stack) *Tree {
	t := NewTree()
	for _, s := range stacks {
		t.Add(s)
	}
	return t
}
