package profilebuilder

import (
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize/symbolizetest"
	"github.com/profsym/profsym/services/collector/internal/perfmap"
	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

// TestBuilderJITFrames: this process maps anonymous executable memory and writes a perf map
// for it, as a JIT runtime does; its frames there go out named, the others as before.
func TestBuilderJITFrames(t *testing.T) {
	code, err := unix.Mmap(-1, 0, 1<<16, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Munmap(code); err != nil {
			t.Error(err)
		}
	}()
	base := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(code))))
	pid := uint32(os.Getpid())
	path := fmt.Sprintf("/tmp/perf-%d.map", pid)
	t.Cleanup(func() { os.Remove(path) })
	procs := procmaps.NewTable("/proc", procmaps.NewFileCache(16), nil)
	p := procs.Process(pid)
	if len(p.Mappings) == 0 || p.Vdso.Start == 0 {
		t.Fatalf("this process's maps: %+v", p)
	}
	// The perf map also names the [vdso]: no file mapping, but no JIT code either.
	perf := fmt.Sprintf("%x 40 JS:*leaf /app.js:1:1\n%x 40 JS:*caller /app.js:5:1\n%x %x not JIT code\n",
		base, base+0x40, p.Vdso.Start, p.Vdso.End-p.Vdso.Start)
	if err := os.WriteFile(path, []byte(perf), 0o644); err != nil {
		t.Fatal(err)
	}
	native := p.Mappings[0].Start + 0x10
	stack := []uint64{base + 0x10, base + 0x40 + 0x8 + 1, p.Vdso.Start + 0x10 + 1, base + 0x100 + 1, native + 1}

	for _, tc := range []struct {
		name string
		jit  JITSymbols
		want []string // per user frame: the function name, "" for an address
	}{
		{name: "with perf maps", jit: perfmap.NewTable(perfmap.Options{}), want: []string{"JS:*leaf /app.js:1:1", "JS:*caller /app.js:5:1", "", "", ""}},
		{name: "without", want: []string{"", "", "", "", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Options{FrequencyHz: 19, ScopeName: "profsym-collector", JIT: tc.jit}, procs, nil)
			t0 := time.Now()
			for i := 0; i < 2; i++ {
				b.Add(&Sample{Time: t0.Add(time.Duration(i)), PID: pid, TID: pid, Comm: "main", User: stack})
			}
			out := b.Finish(t0, t0.Add(time.Second))
			if err := otlpprofiles.ValidateStrict(out); err != nil {
				t.Fatalf("ValidateStrict: %v", err)
			}
			// The gateway's symbolizer asks only for the frames that are addresses; the named
			// ones pass through as they are (checked below, after it ran).
			rep := symbolize.New(symbolize.Config{Client: symbolizetest.Client(t, &symbolizetest.Synthetic{})}).Process(t.Context(), out)
			unnamed := 0
			for _, w := range tc.want {
				if w == "" {
					unnamed++
				}
			}
			if rep.Seen != unnamed {
				t.Errorf("the symbolizer saw %d locations to symbolize, want the %d unnamed ones", rep.Seen, unnamed)
			}
			d := out.Dictionary()
			prof := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
			if prof.Samples().Len() != 1 {
				t.Fatalf("%d samples, want one with two values", prof.Samples().Len())
			}
			locs := d.StackTable().At(int(prof.Samples().At(0).StackIndex())).LocationIndices()
			if locs.Len() != len(stack) {
				t.Fatalf("%d frames, want %d: the order and number of frames stay", locs.Len(), len(stack))
			}
			for i := 0; i < locs.Len(); i++ {
				loc := d.LocationTable().At(int(locs.At(i)))
				attrs := attrMap(out, loc.AttributeIndices())
				want := tc.want[i]
				if want == "" {
					if ft := attrs[otlpattr.FrameType]; ft != otlpattr.FrameTypeNative && ft != otlpattr.FrameTypeGo {
						t.Errorf("frame %d: frame type %q", i, attrs[otlpattr.FrameType])
					}
					continue
				}
				if loc.Lines().Len() != 1 {
					t.Fatalf("frame %d: %d lines, want 1", i, loc.Lines().Len())
				}
				fn := d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex()))
				if got := d.StringTable().At(int(fn.NameStrindex())); got != want {
					t.Errorf("frame %d: %q, want %q", i, got, want)
				}
				// The test binary is no runtime the collector knows: its JIT frames are native.
				if attrs[otlpattr.FrameType] != perfmap.FrameType("profilebuilder.test") {
					t.Errorf("frame %d: frame type %q", i, attrs[otlpattr.FrameType])
				}
				if loc.Address() != stack[i]-min(uint64(i), 1) {
					t.Errorf("frame %d: address %#x, want the sampled one", i, loc.Address())
				}
				m := d.MappingTable().At(int(loc.MappingIndex()))
				mattrs := attrMap(out, m.AttributeIndices())
				if name := d.StringTable().At(int(m.FilenameStrindex())); name != path || mattrs[otlpattr.MappingHasFunctions] != "true" {
					t.Errorf("frame %d: mapping %q %v, want %s with functions", i, name, mattrs, path)
				}
				for _, k := range []string{otlpattr.BuildIDGNU, otlpattr.BuildIDGo, otlpattr.BuildIDHTLHash} {
					if mattrs[k] != "" {
						t.Errorf("frame %d: mapping with %s", i, k)
					}
				}
			}
		})
	}
}
