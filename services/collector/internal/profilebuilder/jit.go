package profilebuilder

import (
	"sort"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/services/collector/internal/perfmap"
	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

// JITSymbols names code a runtime generated: perfmap.Table reads the perf-PID.map files
// JIT runtimes write.
type JITSymbols interface {
	// Lookup returns the name of the code at addr in process pid and the file that named
	// it, as the process sees it.
	Lookup(pid uint32, addr uint64) (name, file string, ok bool)
}

type jitLocationKey struct {
	addr       uint64
	name, kind string
	mapping    int32
}

// jitLocation returns a location for pc, an address of process p outside its file
// mappings, when pc lies in anonymous executable memory and the process's perf map names
// it. Such a frame goes out symbolized, as kernel frames do: the symbolizer has no binary
// for it, and a location with lines is one it leaves alone. The frame type is the runtime's
// (v8js, jvm...), judged by the process's executable.
func (b *Builder) jitLocation(p *procmaps.Process, pc uint64) (int32, bool) {
	if b.opts.JIT == nil || p == nil || !inJITRange(p, pc) {
		return 0, false
	}
	name, file, ok := b.opts.JIT.Lookup(p.PID, pc)
	if !ok {
		return 0, false
	}
	exe := p.ExeName
	if exe == "" {
		exe = p.Comm
	}
	kind := perfmap.FrameType(exe)
	mi := b.jitMapping(file)
	// The name is part of the key: the same address may hold other code in another process
	// (or later in this one).
	k := jitLocationKey{addr: pc, name: name, kind: kind, mapping: mi}
	if i, ok := b.jitLocations[k]; ok {
		return i, true
	}
	if b.jitLocations == nil {
		b.jitLocations = map[jitLocationKey]int32{}
	}
	i := int32(b.dict.LocationTable().Len())
	loc := b.dict.LocationTable().AppendEmpty()
	loc.SetMappingIndex(mi)
	loc.SetAddress(pc)
	loc.AttributeIndices().Append(b.attrStr(otlpattr.FrameType, kind))
	loc.Lines().AppendEmpty().SetFunctionIndex(b.function(name))
	b.jitLocations[k] = i
	return i, true
}

// jitMapping is one mapping per perf-map file name, carrying only the name and
// pprof.mapping.has_functions: no build ID, so nothing downstream looks for a binary.
func (b *Builder) jitMapping(file string) int32 {
	if i, ok := b.jitMappings[file]; ok {
		return i
	}
	if b.jitMappings == nil {
		b.jitMappings = map[string]int32{}
	}
	i := int32(b.dict.MappingTable().Len())
	m := b.dict.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(b.str(file))
	m.AttributeIndices().Append(b.attrTrue(otlpattr.MappingHasFunctions))
	b.jitMappings[file] = i
	return i
}

// inJITRange reports whether pc lies in the process's anonymous executable memory other
// than the kernel's [vdso]: an address anywhere else is no generated code.
func inJITRange(p *procmaps.Process, pc uint64) bool {
	if p.Vdso.Start <= pc && pc < p.Vdso.End {
		return false
	}
	i := sort.Search(len(p.Anonymous), func(i int) bool { return p.Anonymous[i].End > pc })
	return i < len(p.Anonymous) && p.Anonymous[i].Start <= pc
}
