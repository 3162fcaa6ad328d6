package kernels

import (
	"debug/elf"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
)

// chain is the workload's call chain (e2e/arm64/testdata/chain6.c) from the busy leaf out to
// main.
var chain = []string{"leaf", "f6", "f5", "f4", "f3", "f2", "f1", "main"}

// wholeStack says whether a sample's user stack, its frames named innermost first, is whole:
// from the innermost frame in the chain outwards, every frame is the caller the chain says,
// then glibc's start-up functions (__libc_start_call_main, __libc_start_main) call main, and
// the outermost frame is _start, whose unwind information ends every stack. Frames inside of
// the chain (time(2) in libc or the vDSO, called from main) may be anything. A stack cut
// short, with a frame skipped or with garbage past _start is not whole.
func wholeStack(names []string) bool {
	i := slices.IndexFunc(names, func(n string) bool { return slices.Contains(chain, n) })
	if i < 0 {
		return false
	}
	rest := names[i:]
	from := slices.Index(chain, rest[0])
	if len(rest) < len(chain)-from || !slices.Equal(rest[:len(chain)-from], chain[from:]) {
		return false
	}
	start := rest[len(chain)-from:]
	if len(start) < 2 || start[len(start)-1] != "_start" {
		return false
	}
	for _, n := range start[:len(start)-1] {
		if !strings.HasPrefix(n, "__libc_start") {
			return false
		}
	}
	return true
}

// symtab names addresses of one ELF file from its symbol table (the workloads are static and
// not stripped: the table names libc's functions as well as the program's).
type symtab struct {
	syms []elf.Symbol // functions, by address
}

func openSymtab(path string) (*symtab, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	all, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("symbols of %s: %w", path, err)
	}
	s := &symtab{}
	for _, sym := range all {
		if elf.ST_TYPE(sym.Info) == elf.STT_FUNC && sym.Value != 0 && sym.Size != 0 {
			s.syms = append(s.syms, sym)
		}
	}
	sort.Slice(s.syms, func(i, j int) bool { return s.syms[i].Value < s.syms[j].Value })
	return s, nil
}

// name returns the function holding addr, or "" outside every function. Of two symbols at
// the same address (__libc_start_main and __libc_start_main_impl) either may come back.
func (s *symtab) name(addr uint64) string {
	i := sort.Search(len(s.syms), func(i int) bool { return s.syms[i].Value > addr })
	for j := i - 1; j >= 0 && j >= i-4; j-- {
		if sym := s.syms[j]; addr >= sym.Value && addr < sym.Value+sym.Size {
			return sym.Name
		}
	}
	return ""
}

// userFrame is one user-space location of a sample.
type userFrame struct {
	file string // the mapped file's name as the guest saw it; "" outside every file mapping
	addr uint64 // ELF virtual address in file (or the process's address outside a file)
}

// forEachSample calls fn with each sample's process, count and user frames, innermost first
// (kernel frames left out).
func forEachSample(p pprofile.Profiles, fn func(pid int64, count int, frames []userFrame)) {
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	for r := 0; r < p.ResourceProfiles().Len(); r++ {
		rp := p.ResourceProfiles().At(r)
		pid, _ := rp.Resource().Attributes().Get(otlpattr.ProcessPID)
		for sp := 0; sp < rp.ScopeProfiles().Len(); sp++ {
			profs := rp.ScopeProfiles().At(sp).Profiles()
			for pi := 0; pi < profs.Len(); pi++ {
				prof := profs.At(pi)
				for s := 0; s < prof.Samples().Len(); s++ {
					smp := prof.Samples().At(s)
					count := 0
					for v := 0; v < smp.Values().Len(); v++ {
						count += int(smp.Values().At(v))
					}
					locs := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
					var frames []userFrame
					for l := 0; l < locs.Len(); l++ {
						loc := d.LocationTable().At(int(locs.At(l)))
						kernel := false
						for a := 0; a < loc.AttributeIndices().Len(); a++ {
							kv := d.AttributeTable().At(int(loc.AttributeIndices().At(a)))
							if str(kv.KeyStrindex()) == otlpattr.FrameType && kv.Value().AsString() == otlpattr.FrameTypeKernel {
								kernel = true
							}
						}
						if kernel {
							continue
						}
						f := userFrame{addr: loc.Address()}
						if loc.MappingIndex() != 0 {
							f.file = str(d.MappingTable().At(int(loc.MappingIndex())).FilenameStrindex())
						}
						frames = append(frames, f)
					}
					fn(pid.Int(), count, frames)
				}
			}
		}
	}
}

// share is how many of a workload's samples have a whole user stack.
type share struct {
	samples, whole int
	example        string // the longest stack that is not whole, for a failure's report
}

func (s share) fraction() float64 { return float64(s.whole) / float64(max(s.samples, 1)) }

func (s share) String() string {
	return fmt.Sprintf("%.1f%% of %d", 100*s.fraction(), s.samples)
}

// tallyStacks counts each workload's samples and whole stacks; workloads maps the pid of each
// to its binary (guest path) and syms names that binary's addresses.
func tallyStacks(p pprofile.Profiles, workloads map[int64]string, syms map[string]*symtab, into map[string]*share) {
	forEachSample(p, func(pid int64, count int, frames []userFrame) {
		bin, ok := workloads[pid]
		if !ok {
			return
		}
		sh := into[bin]
		if sh == nil {
			sh = &share{}
			into[bin] = sh
		}
		sh.samples += count
		names := make([]string, len(frames))
		for i, f := range frames {
			switch f.file {
			case bin:
				names[i] = syms[bin].name(f.addr)
				if names[i] == "" {
					names[i] = fmt.Sprintf("%#x", f.addr)
				}
			case "":
				names[i] = fmt.Sprintf("?%#x", f.addr)
			default:
				names[i] = fmt.Sprintf("%s+%#x", f.file, f.addr)
			}
		}
		if wholeStack(names) {
			sh.whole += count
		} else if len(names) >= strings.Count(sh.example, ";")+1 {
			sh.example = strings.Join(names, ";")
		}
	})
}

func TestWholeStack(t *testing.T) {
	start := []string{"__libc_start_call_main", "__libc_start_main_impl", "_start"}
	for _, tt := range []struct {
		names []string
		whole bool
	}{
		{append(slices.Clone(chain), start...), true},
		{append([]string{"f3", "f2", "f1", "main"}, start...), true},
		{append([]string{"?0xffff1234", "clock_gettime", "main"}, start...), true}, // main calling time(2)
		{append([]string{"main"}, "__libc_start_call_main", "__libc_start_main", "_start"), true},
		{append([]string{"leaf", "f6", "f4", "f3", "f2", "f1", "main"}, start...), false},        // f5 skipped
		{append(slices.Clone(chain), "__libc_start_call_main", "__libc_start_main_impl"), false}, // cut short
		{append(slices.Clone(chain), append(slices.Clone(start), "?0x0")...), false},             // past _start
		{append(slices.Clone(chain), "_start"), false},                                           // no libc start-up
		{append(slices.Clone(chain), "0x401234", "_start"), false},
		{[]string{"leaf"}, false},
		{[]string{"leaf", "?0x7ffd0000"}, false},
		{[]string{"?0x1"}, false},
		{nil, false},
	} {
		if got := wholeStack(tt.names); got != tt.whole {
			t.Errorf("wholeStack(%v) = %v, want %v", tt.names, got, tt.whole)
		}
	}
}

func TestSymtabName(t *testing.T) {
	s := &symtab{syms: []elf.Symbol{
		{Name: "_start", Value: 0x1000, Size: 0x20},
		{Name: "__libc_start_main", Value: 0x2000, Size: 0x100},
		{Name: "__libc_start_main_impl", Value: 0x2000, Size: 0x100},
		{Name: "main", Value: 0x2100, Size: 0x10},
	}}
	for _, tt := range []struct {
		addr uint64
		name string
	}{
		{0xfff, ""}, {0x1000, "_start"}, {0x101f, "_start"}, {0x1020, ""},
		{0x2080, "__libc_start_main_impl"}, {0x2100, "main"}, {0x210f, "main"}, {0x2110, ""},
	} {
		if got := s.name(tt.addr); got != tt.name {
			t.Errorf("name(%#x) = %q, want %q", tt.addr, got, tt.name)
		}
	}
}
