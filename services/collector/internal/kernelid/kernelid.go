// Package kernelid identifies the running kernel and its modules, so that kernel frames can be
// symbolized centrally like user frames: the kernel's GNU build ID, its release, how far KASLR
// moved its text from where vmlinux was linked, and each loaded module's build ID and the
// address of its .text section.
//
// A kernel frame then travels as an address of the file that has its debuginfo:
//
//   - in the kernel image: runtime address - KASLR offset, an ELF virtual address of vmlinux;
//   - in a module: runtime address - runtime address of the module's .text section, the
//     address the symbolizer gives it after laying out the module's .ko as the kernel's module
//     loader does (executable sections in section-header order, .text at 0).
//
// Nothing here guesses: a kernel whose KASLR offset cannot be read, or a module whose notes or
// sections are hidden, is reported as such, and its frames keep only their kallsyms names.
package kernelid

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/profsym/profsym/pkg/debuginfo/buildid"
)

// Sources of the KASLR offset, best first.
const (
	// SourceVmcoreinfo: KERNELOFFSET= in the VMCOREINFO note of /proc/kcore (Linux 4.19+),
	// what crash and drgn read. Needs CAP_SYS_RAWIO and a /proc/kcore (CONFIG_PROC_KCORE;
	// container runtimes mask it in unprivileged containers).
	SourceVmcoreinfo = "vmcoreinfo"
	// SourceXenEntry: x86-64 kernels built for Xen PV carry the link-time address of
	// startup_xen in a note of /sys/kernel/notes; kallsyms has its runtime address.
	SourceXenEntry = "xen_entry_note"
	// SourceNoKASLR: the kernel was booted with nokaslr.
	SourceNoKASLR = "nokaslr"
	// SourceDefaultBase: an x86-64 kernel whose _text is at the architecture's default
	// link address (0xffffffff81000000) was not moved.
	SourceDefaultBase = "default_base"
)

// hostArch is the architecture this collector was built for, which is the kernel's.
var hostArch = runtime.GOARCH

// x86DefaultText is __START_KERNEL on x86-64 with the default CONFIG_PHYSICAL_START and
// CONFIG_PHYSICAL_ALIGN, which every distribution keeps.
const x86DefaultText = 0xffffffff81000000

// Symbols is what this package needs of the node's kallsyms: a symbol's runtime address.
type Symbols interface {
	Address(name string) (uint64, bool)
}

// Options say where the kernel's files are (tests point them at a made-up tree).
type Options struct {
	ProcRoot string // default /proc
	SysRoot  string // default /sys
	// Arch is the kernel's architecture as GOARCH names it (default: this program's).
	Arch string
	// ByteOrder of the notes the kernel writes (default: little endian, every architecture
	// profsym runs on).
	ByteOrder binary.ByteOrder
}

// Kernel is the running kernel's identity. Its module lookups are cached and safe for
// concurrent use.
type Kernel struct {
	// Release is the kernel release (uname -r), which names its debug package.
	Release string
	// BuildID is vmlinux's GNU build ID (lower-case hex); "" when /sys/kernel/notes has none.
	BuildID string
	// Offset is how far KASLR moved the kernel's text (runtime - link address), from Source.
	Offset uint64
	// Source says where Offset comes from (a Source* constant); "" when it is not known, and
	// then kernel image frames cannot be normalized (OffsetErr says why).
	Source    string
	OffsetErr error
	// textStart and textEnd bound the image's text at runtime (kallsyms _stext/_text and
	// _etext; 0 when unknown): code outside it (BPF programs, trampolines) is no part of
	// vmlinux, although kallsyms names it after the image's last function.
	textStart, textEnd uint64

	opt     Options
	mu      sync.Mutex
	modules map[string]*Module
}

// Module is a loaded module's identity.
type Module struct {
	Name    string
	BuildID string
	// Text is the runtime address of the module's .text section; 0 when unknown.
	Text uint64
	// sections are the runtime addresses of the module's sections by name, to tell an address
	// in an .init section (freed after loading, laid out elsewhere) from one in its text.
	sections map[string]uint64
	// Err says why the module cannot be normalized (nil when it can).
	Err error
}

// Load reads the kernel's identity. syms resolves kallsyms names (nil: the KASLR sources that
// need a symbol are skipped). It fails only when the release cannot be read; a missing build
// ID or offset is recorded in the Kernel.
func Load(opt Options, syms Symbols) (*Kernel, error) {
	if opt.ProcRoot == "" {
		opt.ProcRoot = "/proc"
	}
	if opt.SysRoot == "" {
		opt.SysRoot = "/sys"
	}
	if opt.Arch == "" {
		opt.Arch = hostArch
	}
	if opt.ByteOrder == nil {
		opt.ByteOrder = binary.LittleEndian
	}
	rel, err := os.ReadFile(filepath.Join(opt.ProcRoot, "sys/kernel/osrelease"))
	if err != nil {
		return nil, fmt.Errorf("kernel release: %w", err)
	}
	k := &Kernel{Release: strings.TrimSpace(string(rel)), opt: opt, modules: map[string]*Module{}}
	notes, err := os.ReadFile(filepath.Join(opt.SysRoot, "kernel/notes"))
	if err == nil {
		k.BuildID = buildid.GNUFromNotes(notes, opt.ByteOrder)
	}
	k.Offset, k.Source, k.OffsetErr = offset(opt, notes, syms)
	if syms != nil {
		k.textStart, _ = syms.Address("_text")
		if a, ok := syms.Address("_stext"); ok && (k.textStart == 0 || a < k.textStart) {
			k.textStart = a
		}
		k.textEnd, _ = syms.Address("_etext")
	}
	return k, nil
}

// InText reports whether a runtime address lies in the kernel image's text, as far as
// kallsyms bounds it (true where it does not).
func (k *Kernel) InText(addr uint64) bool {
	return (k.textStart == 0 || addr >= k.textStart) && (k.textEnd == 0 || addr < k.textEnd)
}

// Normalizable reports whether kernel image addresses can be normalized: both the build ID
// and the KASLR offset are known.
func (k *Kernel) Normalizable() bool { return k != nil && k.BuildID != "" && k.Source != "" }

// Normalize returns a kernel image address as a vmlinux virtual address.
func (k *Kernel) Normalize(addr uint64) uint64 { return addr - k.Offset }

// Module returns the identity of a loaded module, read from /sys/module/<name> on first use.
// A module that is unloaded and loaded again at another address keeps its first answer: the
// collector's kallsyms table, which named the frame, is as old.
func (k *Kernel) Module(name string) *Module {
	k.mu.Lock()
	defer k.mu.Unlock()
	if m, ok := k.modules[name]; ok {
		return m
	}
	m := k.readModule(name)
	k.modules[name] = m
	return m
}

// NormalizeModule returns a module address as an address of the module's .ko laid out as the
// kernel lays it out, .text at 0. ok is false for a module that cannot be normalized and for
// an address in one of its .init sections.
func (m *Module) NormalizeModule(addr uint64) (uint64, bool) {
	if m.Err != nil || addr < m.Text {
		return 0, false
	}
	// The section that starts closest below addr holds it; .init sections live apart from
	// the module's text and are freed once it has loaded.
	best, bestAddr := "", uint64(0)
	for name, a := range m.sections {
		if a <= addr && a >= bestAddr {
			best, bestAddr = name, a
		}
	}
	if strings.HasPrefix(best, ".init") {
		return 0, false
	}
	return addr - m.Text, true
}

func (k *Kernel) readModule(name string) *Module {
	m := &Module{Name: name}
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		m.Err = fmt.Errorf("module name %q", name)
		return m
	}
	dir := filepath.Join(k.opt.SysRoot, "module", name)
	note, err := os.ReadFile(filepath.Join(dir, "notes", ".note.gnu.build-id"))
	if err != nil {
		m.Err = fmt.Errorf("module %s build ID: %w", name, err)
		return m
	}
	if m.BuildID = buildid.GNUFromNotes(note, k.opt.ByteOrder); m.BuildID == "" {
		m.Err = fmt.Errorf("module %s: no GNU build ID in its notes", name)
		return m
	}
	ents, err := os.ReadDir(filepath.Join(dir, "sections"))
	if err != nil {
		m.Err = fmt.Errorf("module %s sections: %w", name, err)
		return m
	}
	m.sections = make(map[string]uint64, len(ents))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, "sections", e.Name()))
		if err != nil {
			continue
		}
		a, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 64)
		if err != nil || a == 0 {
			// Zero: the addresses are hidden from this reader (kptr_restrict).
			continue
		}
		m.sections[e.Name()] = a
	}
	text, ok := m.sections[".text"]
	if !ok {
		m.Err = fmt.Errorf("module %s: no readable address of its .text section (needs root)", name)
		return m
	}
	m.Text = text
	return m
}

// ErrNoOffset: no source gave the KASLR offset.
var ErrNoOffset = errors.New("KASLR offset unknown")

func offset(opt Options, notes []byte, syms Symbols) (uint64, string, error) {
	var why []string
	off, err := vmcoreinfoOffset(filepath.Join(opt.ProcRoot, "kcore"))
	if err == nil {
		return off, SourceVmcoreinfo, nil
	}
	why = append(why, err.Error())
	if syms != nil && opt.Arch == "amd64" {
		if link, ok := xenEntry(notes, opt.ByteOrder); ok {
			if rt, ok := syms.Address("startup_xen"); ok {
				return rt - link, SourceXenEntry, nil
			}
		}
	}
	cmdline, _ := os.ReadFile(filepath.Join(opt.ProcRoot, "cmdline"))
	for _, f := range strings.Fields(string(cmdline)) {
		if f == "nokaslr" {
			return 0, SourceNoKASLR, nil
		}
	}
	if syms != nil && opt.Arch == "amd64" {
		if rt, ok := syms.Address("_text"); ok && rt == x86DefaultText {
			return 0, SourceDefaultBase, nil
		}
	}
	why = append(why, "no Xen entry note, no nokaslr, _text not at the default base")
	return 0, "", fmt.Errorf("%w: %s", ErrNoOffset, strings.Join(why, "; "))
}

// xenEntry returns the link-time address of startup_xen from the XEN_ELFNOTE_ENTRY note.
func xenEntry(notes []byte, bo binary.ByteOrder) (uint64, bool) {
	const xenElfnoteEntry = 1
	var addr uint64
	found := false
	buildid.ForEachNote(notes, bo, 4, func(name string, typ uint32, desc []byte) {
		if name == "Xen" && typ == xenElfnoteEntry && len(desc) == 8 && !found {
			addr, found = bo.Uint64(desc), true
		}
	})
	return addr, found
}

// maxKcoreNotes bounds what is read of /proc/kcore's note segment (a few KB in practice).
const maxKcoreNotes = 1 << 20

// vmcoreinfoOffset reads KERNELOFFSET from the VMCOREINFO note of /proc/kcore.
func vmcoreinfoOffset(path string) (uint64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("vmcoreinfo: %w", err)
	}
	defer fh.Close()
	ef, err := elf.NewFile(fh)
	if err != nil {
		return 0, fmt.Errorf("vmcoreinfo: %s: %w", path, err)
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxKcoreNotes {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := fh.ReadAt(data, int64(p.Off)); err != nil {
			return 0, fmt.Errorf("vmcoreinfo: %s notes: %w", path, err)
		}
		var info []byte
		buildid.ForEachNote(data, ef.ByteOrder, 4, func(name string, _ uint32, desc []byte) {
			if name == "VMCOREINFO" && info == nil {
				info = desc
			}
		})
		if info == nil {
			continue
		}
		for line := range bytes.SplitSeq(info, []byte("\n")) {
			if v, ok := bytes.CutPrefix(line, []byte("KERNELOFFSET=")); ok {
				off, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64)
				if err != nil {
					return 0, fmt.Errorf("vmcoreinfo: KERNELOFFSET=%q: %w", v, err)
				}
				return off, nil
			}
		}
		return 0, fmt.Errorf("vmcoreinfo: %s: no KERNELOFFSET", path)
	}
	return 0, fmt.Errorf("vmcoreinfo: %s: no VMCOREINFO note", path)
}
