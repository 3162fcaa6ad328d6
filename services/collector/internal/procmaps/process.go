package procmaps

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
)

// Mapping is an executable file mapping of a process with its place in the file's ELF
// virtual-address space.
type Mapping struct {
	// Start, End and Offset are the mapping as /proc/<pid>/maps shows it.
	Start, End, Offset uint64
	Path               string
	// Bias is the load bias: process address minus ELF virtual address. It is computed
	// with modular arithmetic, so a library loaded below its link base still converts.
	Bias uint64
	File *FileInfo
	// OpenPath reaches the mapped file from this collector (through map_files or the
	// process's root); empty when the file was not reachable.
	OpenPath string
}

// ELFAddress converts a process address inside the mapping into an ELF virtual address.
func (m *Mapping) ELFAddress(pc uint64) uint64 { return pc - m.Bias }

// ELFMapping is the mapping in ELF virtual-address space, as the reference profiler reports
// it: applying the design's formula to ELFAddress(pc) with it yields ELFAddress(pc) again.
func (m *Mapping) ELFMapping() addrmap.Mapping {
	return addrmap.Mapping{Start: m.Start - m.Bias, Limit: m.End - m.Bias, Offset: m.Offset}
}

// LoadBias returns the bias of a mapping of [start, end) at file offset off of a file with
// the given PT_LOAD headers: start minus the ELF virtual address of offset off. The kernel
// maps a segment from the page holding p_offset, so the segment is the one whose p_offset
// rounds down to off; failing that, the one whose file image overlaps the mapped range most.
// ok is false when no segment fits, such as for a file that is not ELF; the bias then takes
// file offsets as addresses.
func LoadBias(start, end, off uint64, loads []addrmap.Load) (bias uint64, ok bool) {
	const pageMask = 4096 - 1
	size := end - start
	best, bestOverlap := -1, uint64(0)
	for i, l := range loads {
		if l.Filesz == 0 {
			continue
		}
		if l.Offset&^pageMask == off {
			best = i
			break
		}
		lo, hi := max(off, l.Offset), min(off+size, l.Offset+l.Filesz)
		if lo < hi && hi-lo > bestOverlap {
			best, bestOverlap = i, hi-lo
		}
	}
	if best < 0 {
		return start - off, false
	}
	l := loads[best]
	return start - (off - l.Offset + l.Vaddr), true
}

// Process is what is known of one process.
type Process struct {
	PID      uint32
	ExePath  string
	ExeName  string
	Comm     string
	Cgroup   string
	Mappings []Mapping // executable file mappings, sorted by Start
	// Anonymous holds executable mappings without a file ([vdso], JIT code), sorted by
	// start: an address in them is known to have no file, so it does not make the maps be
	// read again.
	Anonymous []Range
	// Vdso is the kernel's [vdso] mapping (zero when the process has none).
	Vdso Range
	// StartStack is the start of the process's stack (field 28 of /proc/<pid>/stat): it
	// tells one image of a process from the next after an exec.
	StartStack uint64
	// Err is why the maps could not be read (the process may have exited already).
	Err error

	// Guarded by the table's lock: a Process is shared with report builders, which only
	// read the fields above.
	exited      bool // ended; its knowledge stays until Sweep
	stale       bool // exec'd since the maps were read
	refreshedAt time.Time
}

// Range is an address range [Start, End).
type Range struct{ Start, End uint64 }

// inAnonymous reports whether pc lies in an executable mapping without a file.
func (p *Process) inAnonymous(pc uint64) bool {
	i := sort.Search(len(p.Anonymous), func(i int) bool { return p.Anonymous[i].End > pc })
	return i < len(p.Anonymous) && p.Anonymous[i].Start <= pc
}

// Find returns the mapping holding pc, or nil.
func (p *Process) Find(pc uint64) *Mapping {
	i := sort.Search(len(p.Mappings), func(i int) bool { return p.Mappings[i].End > pc })
	if i < len(p.Mappings) && p.Mappings[i].Start <= pc {
		return &p.Mappings[i]
	}
	return nil
}

// ContainerID returns the container ID found in the process's cgroup path, or "".
func (p *Process) ContainerID() string { return ContainerIDFromCgroup(p.Cgroup) }

// containerIDRe matches the 64-hex-digit IDs that Docker, containerd and CRI-O put in cgroup
// paths ("docker-<id>.scope", "cri-containerd-<id>.scope", "/docker/<id>", "crio-<id>").
var containerIDRe = regexp.MustCompile(`[0-9a-f]{64}`)

// ContainerIDFromCgroup returns the last container ID in a cgroup path.
func ContainerIDFromCgroup(cgroup string) string {
	ids := containerIDRe.FindAllString(cgroup, -1)
	if len(ids) == 0 {
		return ""
	}
	return ids[len(ids)-1]
}

// Table caches process knowledge. It is safe for concurrent use.
type Table struct {
	procRoot string
	files    *FileCache
	log      *slog.Logger
	// minRefresh bounds how often a process's maps are re-read when an address falls
	// outside every known mapping (a JIT or a process that keeps mapping files).
	minRefresh time.Duration

	// fileHook, when set, sees every mapped file reached (see SetFileHook).
	fileHook func(MappedFile)
	// procHook, when set, sees every process whose maps were read (see SetProcessHook).
	procHook func(*Process)

	mu        sync.Mutex
	procs     map[uint32]*Process
	reads     uint64
	callSites map[callSiteKey]callSite
	// arch is the GOARCH of the processes' code: the collector's own.
	arch string
}

// NewTable returns a table reading /proc below procRoot ("/proc" outside tests).
func NewTable(procRoot string, files *FileCache, log *slog.Logger) *Table {
	if log == nil {
		log = slog.Default()
	}
	return &Table{procRoot: procRoot, files: files, log: log, minRefresh: time.Second,
		procs: make(map[uint32]*Process), callSites: make(map[callSiteKey]callSite), arch: runtime.GOARCH}
}

// MappedFile is an executable file mapping a maps read reached.
type MappedFile struct {
	// Path opens the file now (through map_files or the process's root).
	Path string
	// Mapped is the path the process mapped, as its maps file names it.
	Mapped string
	// Root is the process's root directory (/proc/<pid>/root): the files the process sees,
	// such as the separate debug files its image installed, are below it.
	Root string
	// Info is what the table knows of the file (nil when it could not be read).
	Info *FileInfo
}

// SetFileHook makes every maps read call fn for each executable file mapping it reaches. fn
// must not block; set it before the first lookup.
func (t *Table) SetFileHook(fn func(MappedFile)) { t.fileHook = fn }

// SetProcessHook makes every successful maps read call fn with the process it describes, so
// the unwinder learns each process's mappings (new, after an exec, after a dlopen). fn must
// not block; set it before the first lookup.
func (t *Table) SetProcessHook(fn func(*Process)) { t.procHook = fn }

// Process returns what is known of pid, reading /proc the first time and after an exec.
func (t *Table) Process(pid uint32) *Process {
	t.mu.Lock()
	p := t.procs[pid]
	fresh := p != nil && !p.stale
	t.mu.Unlock()
	if fresh {
		return p
	}
	return t.load(pid, p)
}

// Resolve returns the process and the mapping holding pc; the mapping is nil when pc is in
// no known file mapping even after a re-read.
func (t *Table) Resolve(pid uint32, pc uint64) (*Process, *Mapping) {
	p := t.Process(pid)
	if m := p.Find(pc); m != nil {
		return p, m
	}
	if p.inAnonymous(pc) {
		return p, nil
	}
	// The process may have mapped a new file since the last read.
	t.mu.Lock()
	reread := !p.exited && time.Since(p.refreshedAt) >= t.minRefresh
	t.mu.Unlock()
	if reread {
		p = t.load(pid, p)
		return p, p.Find(pc)
	}
	return p, nil
}

// MarkExec makes the next lookup of pid re-read its maps.
func (t *Table) MarkExec(pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil {
		p.stale = true
	}
}

// MarkExit records that pid ended; Sweep forgets it.
func (t *Table) MarkExit(pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil {
		p.exited = true
	}
}

// Sweep forgets exited processes and those whose /proc entry is gone (an exit
// notification can be lost), returning how many it dropped. Call it after a report, so a
// process that exited between sampling and reporting still reports with what is known.
func (t *Table) Sweep() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for pid, p := range t.procs {
		if !p.exited {
			if _, err := os.Stat(filepath.Join(t.procRoot, strconv.FormatUint(uint64(pid), 10))); errors.Is(err, fs.ErrNotExist) {
				p.exited = true
			}
		}
		if p.exited {
			delete(t.procs, pid)
			n++
		}
	}
	return n
}

// Len is the number of processes tracked.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.procs)
}

// MapsReads is how many times a maps file was read.
func (t *Table) MapsReads() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reads
}

func (t *Table) load(pid uint32, old *Process) *Process {
	p := t.read(pid)
	gone := errors.Is(p.Err, fs.ErrNotExist) || errors.Is(p.Err, errNoProcess)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reads++
	if p.Err != nil && old != nil {
		// Gone (or unreadable) now: keep what was known, so its samples still report.
		old.stale = false
		old.refreshedAt = p.refreshedAt
		old.exited = old.exited || gone
		return old
	}
	p.exited = gone
	t.procs[pid] = p
	if t.procHook != nil && p.Err == nil {
		t.procHook(p)
	}
	return p
}

var errNoProcess = errors.New("no such process")

func (t *Table) read(pid uint32) *Process {
	dir := filepath.Join(t.procRoot, strconv.FormatUint(uint64(pid), 10))
	p := &Process{PID: pid, refreshedAt: time.Now()}
	if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		p.Comm = strings.TrimSuffix(string(comm), "\n")
	}
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		p.ExePath = strings.TrimSuffix(exe, " (deleted)")
		p.ExeName = filepath.Base(p.ExePath)
	}
	if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		p.Cgroup = cgroupPath(string(cg))
	}
	if stat, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
		p.StartStack = StartStack(string(stat))
	}
	fh, err := os.Open(filepath.Join(dir, "maps"))
	if err != nil {
		p.Err = fmt.Errorf("pid %d: %w", pid, err)
		return p
	}
	entries, err := Parse(bufio.NewReaderSize(fh, 64<<10))
	fh.Close()
	if err != nil {
		p.Err = fmt.Errorf("pid %d: %w", pid, err)
		return p
	}
	if len(entries) == 0 {
		// A zombie or a kernel thread: maps reads empty.
		p.Err = fmt.Errorf("pid %d: %w (empty maps)", pid, errNoProcess)
		return p
	}
	for _, e := range entries {
		if !e.Exec {
			continue
		}
		if !e.FileBacked() {
			p.Anonymous = append(p.Anonymous, Range{e.Start, e.End})
			if e.Path == "[vdso]" {
				p.Vdso = Range{e.Start, e.End}
			}
			continue
		}
		fi, openPath := t.fileOf(dir, e)
		var loads []addrmap.Load
		if fi != nil {
			loads = fi.Loads
		}
		bias, _ := LoadBias(e.Start, e.End, e.Offset, loads)
		p.Mappings = append(p.Mappings, Mapping{Start: e.Start, End: e.End, Offset: e.Offset, Path: e.Path, Bias: bias, File: fi, OpenPath: openPath})
	}
	sort.Slice(p.Mappings, func(i, j int) bool { return p.Mappings[i].Start < p.Mappings[j].Start })
	sort.Slice(p.Anonymous, func(i, j int) bool { return p.Anonymous[i].Start < p.Anonymous[j].Start })
	return p
}

// fileOf returns the info of the file an entry maps. The file is reached through map_files
// (which works for deleted files and across mount namespaces), else through the process's
// root; a file whose inode differs from the maps entry is not the mapped file.
func (t *Table) fileOf(procDir string, e Entry) (*FileInfo, string) {
	candidates := []string{
		filepath.Join(procDir, "map_files", strconv.FormatUint(e.Start, 16)+"-"+strconv.FormatUint(e.End, 16)),
		filepath.Join(procDir, "root", e.Path),
	}
	for _, path := range candidates {
		st, err := os.Stat(path)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		key, err := KeyOf(st)
		if err != nil || key.Inode != e.Inode {
			continue
		}
		fi := t.files.Get(key, func() (*os.File, error) { return os.Open(path) })
		if t.fileHook != nil {
			t.fileHook(MappedFile{Path: path, Mapped: e.Path, Root: filepath.Join(procDir, "root"), Info: fi})
		}
		return fi, path
	}
	t.log.Debug("mapped file not reachable", "dir", procDir, "path", e.Path, "inode", e.Inode)
	return nil, ""
}

// StartStack returns field 28 (startstack) of a /proc/<pid>/stat line, or 0. The command
// name in parentheses may hold spaces and parentheses, so fields count from the last ')'.
func StartStack(stat string) uint64 {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(stat[i+1:])
	// fields[0] is field 3 (state); field 28 is fields[25].
	if len(fields) < 26 {
		return 0
	}
	v, err := strconv.ParseUint(fields[25], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// cgroupPath picks the cgroup v2 path ("0::/...") from /proc/<pid>/cgroup, else the first
// path that names a container.
func cgroupPath(s string) string {
	var first string
	for _, line := range strings.Split(s, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" && parts[2] != "/" {
			return parts[2]
		}
		if first == "" && ContainerIDFromCgroup(parts[2]) != "" {
			first = parts[2]
		}
	}
	return first
}
