// Package profilebuilder turns stack samples into one OTLP profiles request per interval:
// a resource per process, a deduplicated dictionary, user frames as ELF virtual addresses
// with their mapping and build IDs (unsymbolized), kernel frames symbolized from kallsyms.
// It follows the reference OTel eBPF profiler's conventions (see the design's "Addresses").
package profilebuilder

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/services/collector/internal/kallsyms"
	"github.com/profsym/profsym/services/collector/internal/kernelid"
	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

// Sample is one stack sample as the sampler delivers it.
type Sample struct {
	Time time.Time
	PID  uint32
	TID  uint32
	Comm string
	// Kernel and User are innermost first; non-leaf entries are return addresses.
	Kernel []uint64
	User   []uint64
	// LeafReturn is where a function without a frame keeps its return address: the word at
	// the user stack pointer on x86-64, the link register on arm64 (0: unknown). When it is
	// the return address of a caller the frame-pointer walk skipped, it is inserted as the
	// leaf's caller.
	LeafReturn uint64
	// OffCPU is zero for a CPU sample; for an off-CPU sample, the time the task was off
	// the CPU, which is the sample's value in the process's off-CPU profile.
	OffCPU time.Duration
}

// Options are the fixed parts of every request.
type Options struct {
	FrequencyHz int
	// Resource attributes added to every process's resource (host.name, k8s.node.name...).
	HostAttributes map[string]string
	// MaxSamples bounds the distinct samples held per interval; beyond it samples are
	// dropped and counted, so memory stays bounded whatever the load.
	MaxSamples int
	// ScopeName and ScopeVersion name the producer.
	ScopeName, ScopeVersion string

	// JIT, when set, names code in a process's anonymous executable memory (see jit.go).
	JIT JITSymbols
	// KernelID, when set, makes kernel frames symbolizable centrally: a frame of the kernel
	// image or of a module whose identity is known keeps its kallsyms name and travels as an
	// address of the file with its debuginfo, under a mapping with that file's build ID.
	KernelID *kernelid.Kernel
}

// Builder accumulates one interval. It is not safe for concurrent use.
type Builder struct {
	opts   Options
	procs  *procmaps.Table
	kernel *kallsyms.Table

	profiles pprofile.Profiles
	dict     pprofile.ProfilesDictionary

	strings   map[string]int32
	attrs     map[attrKey]int32
	mappings  map[mappingKey]int32
	locations map[locationKey]int32
	functions map[string]int32
	stacks    map[string]int32
	perPID    map[uint32]*processProfile

	kernelMappings map[string]int32

	// jitLocations and jitMappings are created at the first JIT frame (see jit.go).
	jitLocations map[jitLocationKey]int32
	jitMappings  map[string]int32

	stackBuf []int32
	keyBuf   []byte

	samples, dropped int
	first, last      time.Time
}

type attrKey struct {
	key    int32
	str    string
	isBool bool
}

type mappingKey struct {
	file             procmaps.FileKey
	path             string
	start, limit, of uint64
}

type locationKey struct {
	mapping int32
	addr    uint64
	kind    string
}

type sampleKey struct {
	stack int32
	comm  string
}

// processProfile holds a process's profiles of the interval: CPU samples, and the off-CPU
// profile when a task of the process blocked (made on its first off-CPU sample).
type processProfile struct {
	scope   pprofile.ScopeProfiles
	profile pprofile.Profile
	samples map[sampleKey]int

	offCPU        pprofile.Profile
	offCPUSamples map[sampleKey]int
	hasOffCPU     bool
}

// New returns an empty builder.
func New(opts Options, procs *procmaps.Table, kernel *kallsyms.Table) *Builder {
	if opts.MaxSamples <= 0 {
		opts.MaxSamples = 1 << 16
	}
	b := &Builder{
		opts: opts, procs: procs, kernel: kernel,
		profiles:       pprofile.NewProfiles(),
		strings:        map[string]int32{},
		attrs:          map[attrKey]int32{},
		mappings:       map[mappingKey]int32{},
		locations:      map[locationKey]int32{},
		functions:      map[string]int32{},
		stacks:         map[string]int32{},
		perPID:         map[uint32]*processProfile{},
		kernelMappings: map[string]int32{},
	}
	b.dict = b.profiles.Dictionary()
	// Index 0 of every dictionary table is the zero value: references of 0 mean "none".
	b.dict.StringTable().Append("")
	b.strings[""] = 0
	b.dict.MappingTable().AppendEmpty()
	b.dict.LocationTable().AppendEmpty()
	b.dict.FunctionTable().AppendEmpty()
	b.dict.LinkTable().AppendEmpty()
	b.dict.AttributeTable().AppendEmpty()
	b.dict.StackTable().AppendEmpty()
	b.stacks[""] = 0
	return b
}

// Len is the number of samples added.
func (b *Builder) Len() int { return b.samples }

// Dropped is the number of samples dropped because MaxSamples was reached.
func (b *Builder) Dropped() int { return b.dropped }

// Add records one sample.
func (b *Builder) Add(s *Sample) {
	pp := b.processProfile(s.PID)
	b.stackBuf = b.stackBuf[:0]
	for i, pc := range s.Kernel {
		if i > 0 {
			pc--
		}
		b.stackBuf = append(b.stackBuf, b.kernelLocation(pc))
	}
	for i, pc := range s.User {
		// The first user frame is the interrupted (or syscall-entry) program counter;
		// the others are return addresses, which point after the call.
		if i > 0 {
			pc--
		}
		b.stackBuf = append(b.stackBuf, b.userLocation(s.PID, pc))
		if i == 0 && b.skippedCaller(s) {
			b.stackBuf = append(b.stackBuf, b.userLocation(s.PID, s.LeafReturn-1))
		}
	}
	stack := b.stack(b.stackBuf)
	key := sampleKey{stack: stack, comm: s.Comm}
	prof, samples, value := pp.profile, pp.samples, int64(1)
	if s.OffCPU > 0 {
		prof, samples, value = b.offCPUProfile(pp), pp.offCPUSamples, int64(s.OffCPU)
	}
	idx, ok := samples[key]
	if !ok {
		if b.samples >= b.opts.MaxSamples {
			b.dropped++
			return
		}
		smp := prof.Samples().AppendEmpty()
		smp.SetStackIndex(stack)
		if s.Comm != "" {
			smp.AttributeIndices().Append(b.attrStr(otlpattr.ThreadName, s.Comm))
		}
		idx = prof.Samples().Len() - 1
		samples[key] = idx
	}
	smp := prof.Samples().At(idx)
	// One value per timestamp, so the sample's values and timestamps correspond.
	smp.Values().Append(value)
	smp.TimestampsUnixNano().Append(uint64(s.Time.UnixNano()))
	b.samples++
	if b.first.IsZero() || s.Time.Before(b.first) {
		b.first = s.Time
	}
	if s.Time.After(b.last) {
		b.last = s.Time
	}
}

// Finish returns the request for the interval [start, end): every profile's time range
// covers its samples' timestamps. The builder must not be used afterwards.
func (b *Builder) Finish(start, end time.Time) pprofile.Profiles {
	if !b.first.IsZero() && b.first.Before(start) {
		start = b.first
	}
	if !b.last.IsZero() && !b.last.Before(end) {
		end = b.last.Add(time.Nanosecond)
	}
	for _, pp := range b.perPID {
		pp.profile.SetTime(pcommon.NewTimestampFromTime(start))
		pp.profile.SetDurationNano(uint64(end.Sub(start)))
		if pp.hasOffCPU {
			pp.offCPU.SetTime(pcommon.NewTimestampFromTime(start))
			pp.offCPU.SetDurationNano(uint64(end.Sub(start)))
		}
	}
	return b.profiles
}

func (b *Builder) processProfile(pid uint32) *processProfile {
	if pp := b.perPID[pid]; pp != nil {
		return pp
	}
	rp := b.profiles.ResourceProfiles().AppendEmpty()
	res := rp.Resource().Attributes()
	res.PutInt(otlpattr.ProcessPID, int64(pid))
	if b.procs != nil {
		p := b.procs.Process(pid)
		if p.ExeName != "" {
			res.PutStr(otlpattr.ProcessExecutableName, p.ExeName)
		} else if p.Comm != "" {
			res.PutStr(otlpattr.ProcessExecutableName, p.Comm)
		}
		if p.ExePath != "" {
			res.PutStr(otlpattr.ProcessExecutablePath, p.ExePath)
		}
		if id := p.ContainerID(); id != "" {
			res.PutStr(otlpattr.ContainerID, id)
		}
	}
	for k, v := range b.opts.HostAttributes {
		if v != "" {
			res.PutStr(k, v)
		}
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName(b.opts.ScopeName)
	sp.Scope().SetVersion(b.opts.ScopeVersion)
	prof := sp.Profiles().AppendEmpty()
	prof.SetProfileID(newProfileID(pid))
	prof.SampleType().SetTypeStrindex(b.str("samples"))
	prof.SampleType().SetUnitStrindex(b.str("count"))
	prof.PeriodType().SetTypeStrindex(b.str("cpu"))
	prof.PeriodType().SetUnitStrindex(b.str("nanoseconds"))
	if b.opts.FrequencyHz > 0 {
		prof.SetPeriod(int64(time.Second) / int64(b.opts.FrequencyHz))
	}
	pp := &processProfile{scope: sp, profile: prof, samples: map[sampleKey]int{}}
	b.perPID[pid] = pp
	return pp
}

// offCPUProfile returns the process's off-CPU profile, made beside its CPU profile in the
// same scope (so with the same resource attributes) on first use. Its sample type is the
// one the OpenTelemetry eBPF profiler gives off-CPU time: "events" in "nanoseconds", one
// value per blocking, the time the task was off the CPU.
func (b *Builder) offCPUProfile(pp *processProfile) pprofile.Profile {
	if pp.hasOffCPU {
		return pp.offCPU
	}
	prof := pp.scope.Profiles().AppendEmpty()
	prof.SetProfileID(newProfileID(0))
	prof.SampleType().SetTypeStrindex(b.str("events"))
	prof.SampleType().SetUnitStrindex(b.str("nanoseconds"))
	pp.offCPU, pp.offCPUSamples, pp.hasOffCPU = prof, map[sampleKey]int{}, true
	// AppendEmpty may move the profiles: the CPU profile is looked up again.
	pp.profile = pp.scope.Profiles().At(0)
	return prof
}

func newProfileID(salt uint32) pprofile.ProfileID {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		// crypto/rand does not fail on Linux; a time-derived ID keeps IDs distinct anyway.
		binary.LittleEndian.PutUint64(id[:], uint64(time.Now().UnixNano()))
		binary.LittleEndian.PutUint32(id[8:], salt)
	}
	return pprofile.ProfileID(id)
}

func (b *Builder) str(s string) int32 {
	if i, ok := b.strings[s]; ok {
		return i
	}
	i := int32(b.dict.StringTable().Len())
	b.dict.StringTable().Append(s)
	b.strings[s] = i
	return i
}

func (b *Builder) attrStr(key, val string) int32 {
	k := attrKey{key: b.str(key), str: val}
	if i, ok := b.attrs[k]; ok {
		return i
	}
	i := int32(b.dict.AttributeTable().Len())
	kv := b.dict.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(k.key)
	kv.Value().SetStr(val)
	b.attrs[k] = i
	return i
}

func (b *Builder) attrTrue(key string) int32 {
	k := attrKey{key: b.str(key), isBool: true}
	if i, ok := b.attrs[k]; ok {
		return i
	}
	i := int32(b.dict.AttributeTable().Len())
	kv := b.dict.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(k.key)
	kv.Value().SetBool(true)
	b.attrs[k] = i
	return i
}

func (b *Builder) function(name string) int32 {
	if i, ok := b.functions[name]; ok {
		return i
	}
	i := int32(b.dict.FunctionTable().Len())
	f := b.dict.FunctionTable().AppendEmpty()
	f.SetNameStrindex(b.str(name))
	f.SetSystemNameStrindex(b.str(name))
	b.functions[name] = i
	return i
}

func (b *Builder) stack(locs []int32) int32 {
	b.keyBuf = b.keyBuf[:0]
	for _, l := range locs {
		b.keyBuf = binary.LittleEndian.AppendUint32(b.keyBuf, uint32(l))
	}
	if i, ok := b.stacks[string(b.keyBuf)]; ok {
		return i
	}
	i := int32(b.dict.StackTable().Len())
	st := b.dict.StackTable().AppendEmpty()
	st.LocationIndices().Append(locs...)
	b.stacks[string(b.keyBuf)] = i
	return i
}

// kernelMapping is one mapping per kernel module ("vmlinux" for the image) whose identity is
// not known: the kernel's frames are symbolized here, so the mapping carries only a name.
func (b *Builder) kernelMapping(module string) int32 {
	if i, ok := b.kernelMappings[module]; ok {
		return i
	}
	i := int32(b.dict.MappingTable().Len())
	m := b.dict.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(b.str(module))
	m.AttributeIndices().Append(b.attrTrue(otlpattr.MappingHasFunctions))
	b.kernelMappings[module] = i
	return i
}

// kernelFileMapping is the mapping of the kernel image or of a module whose build ID and
// load address are known: all zero (its locations' addresses are ELF virtual addresses of
// the file named), with the file's GNU build ID, and named as distributions name the debug
// files (vmlinux-RELEASE; a module by the release's module folder and its name).
func (b *Builder) kernelFileMapping(module, buildID string) int32 {
	key := module + "\x00" + buildID
	if i, ok := b.kernelMappings[key]; ok {
		return i
	}
	rel := b.opts.KernelID.Release
	name := "vmlinux-" + rel
	if module != kallsyms.Kernel {
		name = "/lib/modules/" + rel + "/" + module + ".ko"
	}
	i := int32(b.dict.MappingTable().Len())
	m := b.dict.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(b.str(name))
	m.AttributeIndices().Append(b.attrTrue(otlpattr.MappingHasFunctions), b.attrStr(otlpattr.BuildIDGNU, buildID))
	b.kernelMappings[key] = i
	return i
}

func (b *Builder) kernelLocation(pc uint64) int32 {
	k := locationKey{mapping: -1, addr: pc, kind: otlpattr.FrameTypeKernel}
	if i, ok := b.locations[k]; ok {
		return i
	}
	var sym kallsyms.Symbol
	ok := false
	if b.kernel != nil {
		sym, ok = b.kernel.Lookup(pc)
	}
	i := int32(b.dict.LocationTable().Len())
	loc := b.dict.LocationTable().AppendEmpty()
	loc.SetAddress(pc)
	loc.AttributeIndices().Append(b.attrStr(otlpattr.FrameType, otlpattr.FrameTypeKernel))
	if ok {
		mapping := int32(-1)
		if id := b.opts.KernelID; id != nil {
			if sym.Module == kallsyms.Kernel {
				if id.Normalizable() && id.InText(pc) {
					loc.SetAddress(id.Normalize(pc))
					mapping = b.kernelFileMapping(sym.Module, id.BuildID)
				}
			} else if m := id.Module(sym.Module); m.Err == nil {
				if addr, ok := m.NormalizeModule(pc); ok {
					loc.SetAddress(addr)
					mapping = b.kernelFileMapping(sym.Module, m.BuildID)
				}
			}
		}
		if mapping < 0 {
			mapping = b.kernelMapping(sym.Module)
		}
		loc.SetMappingIndex(mapping)
		loc.Lines().AppendEmpty().SetFunctionIndex(b.function(sym.Name))
	}
	b.locations[k] = i
	return i
}

// skippedCaller reports whether the leaf's return-address candidate is the return address
// of a caller the frame-pointer walk missed: the leaf had no frame of its own, so the walk
// went from the leaf straight to its caller's caller.
func (b *Builder) skippedCaller(s *Sample) bool {
	ret := s.LeafReturn
	if ret == 0 || b.procs == nil || (len(s.User) > 1 && s.User[1] == ret) {
		return false
	}
	// Find, not Resolve: a word that is no code address must not make the maps be re-read.
	m := b.procs.Process(s.PID).Find(ret)
	return m != nil && b.procs.IsLeafReturn(s.PID, m, s.User[0], ret)
}

func (b *Builder) userLocation(pid uint32, pc uint64) int32 {
	var p *procmaps.Process
	var m *procmaps.Mapping
	if b.procs != nil {
		p, m = b.procs.Resolve(pid, pc)
	}
	if m == nil {
		if i, ok := b.jitLocation(p, pc); ok {
			return i
		}
		// Outside every file mapping (JIT code no perf map names, [vdso], a vanished
		// process): the address stays as sampled, with no mapping and so no binary to
		// symbolize it against.
		k := locationKey{mapping: 0, addr: pc, kind: otlpattr.FrameTypeNative}
		if i, ok := b.locations[k]; ok {
			return i
		}
		i := int32(b.dict.LocationTable().Len())
		loc := b.dict.LocationTable().AppendEmpty()
		loc.SetAddress(pc)
		loc.AttributeIndices().Append(b.attrStr(otlpattr.FrameType, otlpattr.FrameTypeNative))
		b.locations[k] = i
		return i
	}
	kind := otlpattr.FrameTypeNative
	if m.File != nil && m.File.IsGo {
		kind = otlpattr.FrameTypeGo
	}
	mi := b.mapping(m)
	addr := m.ELFAddress(pc)
	k := locationKey{mapping: mi, addr: addr, kind: kind}
	if i, ok := b.locations[k]; ok {
		return i
	}
	i := int32(b.dict.LocationTable().Len())
	loc := b.dict.LocationTable().AppendEmpty()
	loc.SetMappingIndex(mi)
	loc.SetAddress(addr)
	loc.AttributeIndices().Append(b.attrStr(otlpattr.FrameType, kind))
	b.locations[k] = i
	return i
}

func (b *Builder) mapping(m *procmaps.Mapping) int32 {
	el := m.ELFMapping()
	k := mappingKey{path: m.Path, start: el.Start, limit: el.Limit, of: el.Offset}
	if m.File != nil {
		k.file = m.File.Key
	}
	if i, ok := b.mappings[k]; ok {
		return i
	}
	i := int32(b.dict.MappingTable().Len())
	mp := b.dict.MappingTable().AppendEmpty()
	mp.SetMemoryStart(el.Start)
	mp.SetMemoryLimit(el.Limit)
	mp.SetFileOffset(el.Offset)
	mp.SetFilenameStrindex(b.str(strings.TrimSuffix(m.Path, " (deleted)")))
	if f := m.File; f != nil {
		for _, a := range []struct{ key, val string }{
			{otlpattr.BuildIDGNU, f.IDs.GNU},
			{otlpattr.BuildIDGo, f.IDs.Go},
			{otlpattr.BuildIDHTLHash, f.IDs.HTLHash},
		} {
			if a.val != "" {
				mp.AttributeIndices().Append(b.attrStr(a.key, a.val))
			}
		}
	}
	b.mappings[k] = i
	return i
}
