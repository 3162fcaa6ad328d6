package perfmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options bound and tune a Table.
type Options struct {
	// ProcRoot is /proc outside tests.
	ProcRoot string
	// MaxBytesPerProcess and MaxBytes bound the symbols held for one process and for all:
	// beyond them a process's earliest symbols are dropped (counted).
	MaxBytesPerProcess, MaxBytes int64
	// MinRefresh is how often, at most, a process's file is looked at again for appended
	// or rewritten symbols (0: at every lookup).
	MinRefresh time.Duration
	Log        *slog.Logger
}

// Defaults of Options.
const (
	DefaultMaxBytesPerProcess = 16 << 20
	DefaultMaxBytes           = 64 << 20
)

// maxLine bounds one line: a longer one is counted malformed and skipped.
const maxLine = 64 << 10

// Stats are a table's counters.
type Stats struct {
	// Symbols read, lines skipped as malformed, and symbols dropped to stay in the bounds.
	Read, Malformed, Dropped uint64
	// FilesRead counts reads of a file from its start (new, shrunk or replaced); Appends
	// counts reads of what was appended since the last read.
	FilesRead, Appends uint64
	// Refused counts files not read: not a regular file, owned by another user, or older
	// than the process.
	Refused uint64
}

// Table holds the perf maps of the processes looked up. It is safe for concurrent use.
type Table struct {
	opts Options
	log  *slog.Logger
	// now is time.Now outside tests.
	now func() time.Time

	mu    sync.Mutex
	procs map[uint32]*process
	total int64
	stats Stats
}

// process is what is known of one process's perf map file.
type process struct {
	path string // the file from here: seen, below the root directory procRoot shows for the pid
	seen string // the file as the process names it: /tmp/perf-<nspid>.map
	uid  uint32
	// startedAt is when the process started: a file last written before is another's.
	startedAt time.Time
	err       error // why the process's status could not be read

	m Map
	// The file read so far: its identity, size and time when last read, and samples of its
	// bytes up to the offset, to tell an append from a rewrite in place (the JVM rewrites
	// the same file at each Compiler.perfmap).
	dev, ino uint64
	offset   int64
	mtime    time.Time
	probes   []probe

	checkedAt time.Time
	checked   bool
	exited    bool
	refused   string // why the current file is not read ("" when it is)
}

// NewTable returns an empty table.
func NewTable(opts Options) *Table {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.MaxBytesPerProcess <= 0 {
		opts.MaxBytesPerProcess = DefaultMaxBytesPerProcess
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Table{opts: opts, log: opts.Log, now: time.Now, procs: map[uint32]*process{}}
}

// Lookup returns the name the process's perf map gives addr and the map's path as the
// process sees it. The file is read at the first lookup and looked at again for growth at
// most every MinRefresh.
func (t *Table) Lookup(pid uint32, addr uint64) (name, file string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.procs[pid]
	if p == nil {
		p = t.newProcess(pid)
		t.procs[pid] = p
	}
	if p.err == nil && !p.exited {
		if now := t.now(); !p.checked || now.Sub(p.checkedAt) >= t.opts.MinRefresh {
			p.checked, p.checkedAt = true, now
			t.refresh(pid, p)
		}
	}
	name, ok = p.m.Lookup(addr)
	return name, p.seen, ok
}

func (t *Table) newProcess(pid uint32) *process {
	dir := filepath.Join(t.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10))
	p := &process{}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		p.err = err
		return p
	}
	nspid, uid, err := parseStatus(string(status))
	if err != nil {
		p.err = fmt.Errorf("%s: %w", filepath.Join(dir, "status"), err)
		return p
	}
	if nspid == 0 {
		nspid = pid // a kernel without NSpid (before 4.1): no PID namespaces to mind
	}
	p.uid = uid
	p.seen = "/tmp/perf-" + strconv.FormatUint(uint64(nspid), 10) + ".map"
	// Through the process's root: a process in a container writes its own /tmp.
	p.path = filepath.Join(dir, "root", p.seen)
	p.startedAt = t.startTime(dir)
	return p
}

// parseStatus returns the PID in the process's own namespace (the last NSpid value; 0 when
// the line is absent) and its real user ID.
func parseStatus(s string) (nspid, uid uint32, err error) {
	uidSeen := false
	for _, line := range strings.Split(s, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		switch key {
		case "NSpid":
			if len(f) == 0 {
				return 0, 0, errors.New("empty NSpid line")
			}
			v, err := strconv.ParseUint(f[len(f)-1], 10, 32)
			if err != nil {
				return 0, 0, fmt.Errorf("NSpid: %w", err)
			}
			nspid = uint32(v)
		case "Uid":
			if len(f) == 0 {
				return 0, 0, errors.New("empty Uid line")
			}
			v, err := strconv.ParseUint(f[0], 10, 32)
			if err != nil {
				return 0, 0, fmt.Errorf("uid: %w", err)
			}
			uid, uidSeen = uint32(v), true
		}
	}
	if !uidSeen {
		return 0, 0, errors.New("no Uid line")
	}
	return nspid, uid, nil
}

// startTime returns when the process started (zero when unknown): /proc/stat's btime plus
// the process's starttime in clock ticks (100 a second on Linux's user interface).
func (t *Table) startTime(dir string) time.Time {
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return time.Time{}
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 {
		return time.Time{}
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return time.Time{}
	}
	sys, err := os.ReadFile(filepath.Join(t.opts.ProcRoot, "stat"))
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(sys), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			btime, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}
			}
			return time.Unix(btime, 0).Add(time.Duration(ticks) * (time.Second / 100))
		}
	}
	return time.Time{}
}

// refresh reads what the file holds beyond what was read, or the whole file when it is new,
// shrank, or was replaced or rewritten.
func (t *Table) refresh(pid uint32, p *process) {
	f, err := t.open(p)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			t.refuse(pid, p, err.Error())
		}
		// A file removed after it was read: the code it named is still there.
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.refuse(pid, p, err.Error())
		return
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular() || !ok:
		t.refuse(pid, p, "not a regular file")
		return
	case st.Uid != 0 && st.Uid != p.uid:
		// As perf does: only the process's own user (or root) speaks for its code.
		t.refuse(pid, p, fmt.Sprintf("owned by uid %d, not the process's %d", st.Uid, p.uid))
		return
	case !p.startedAt.IsZero() && fi.ModTime().Before(p.startedAt.Add(-time.Second)):
		t.refuse(pid, p, "last written before the process started")
		return
	}
	p.refused = ""
	size := fi.Size()
	same := p.offset > 0 && uint64(st.Dev) == p.dev && st.Ino == p.ino //nolint:unconvert // Dev is uint64 on amd64, uint32 on some other architectures
	if same && size == p.offset && fi.ModTime().Equal(p.mtime) {
		return
	}
	from := int64(0)
	if same && size >= p.offset && unchanged(f, p.probes) {
		from = p.offset
	} else {
		t.total -= p.m.Bytes()
		p.m.Reset()
		p.probes = nil
		t.stats.FilesRead++
	}
	p.dev, p.ino, p.mtime = uint64(st.Dev), st.Ino, fi.ModTime() //nolint:unconvert // as above
	end, err := t.read(p, f, from)
	if err != nil {
		t.log.Debug("read perf map", "pid", pid, "file", p.seen, "err", err)
	}
	if from > 0 && end > from {
		t.stats.Appends++
	}
	p.offset = end
	p.probes = takeProbes(f, end)
}

// open opens the process's perf map with every symbolic link resolved inside the process's
// root (a link in a container must not reach the node's files) and none at the end (/tmp is
// anyone's); without openat2 (before Linux 5.6), only the last component is checked.
func (t *Table) open(p *process) (*os.File, error) {
	root, rel := filepath.Dir(filepath.Dir(p.path)), strings.TrimPrefix(p.seen, "/")
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer func() { _ = unix.Close(dir) }() // an O_PATH descriptor: nothing to flush
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		return os.OpenFile(p.path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p.path, Err: err}
	}
	return os.NewFile(uintptr(fd), p.path), nil
}

func (t *Table) refuse(pid uint32, p *process, why string) {
	if p.refused != why {
		t.stats.Refused++
		t.log.Debug("perf map not read", "pid", pid, "file", p.seen, "reason", why)
	}
	p.refused = why
}

// read parses whole lines from offset from, adds them to the process's map within the
// bounds, and returns the offset after the last whole line. At most 4 times the
// per-process bound is read at once: a huge file costs time in slices, not all at once.
func (t *Table) read(p *process, f *os.File, from int64) (int64, error) {
	limit := max(4*t.opts.MaxBytesPerProcess, 1<<20)
	r := bufio.NewReaderSize(io.NewSectionReader(f, from, limit), maxLine)
	off := from
	var syms []Symbol
	skipping := false // inside a line longer than maxLine
	var err error
	for {
		var line []byte
		line, err = r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			off += int64(len(line))
			if !skipping {
				t.stats.Malformed++
			}
			skipping = true
			continue
		}
		if err != nil {
			// A line without its newline is being written: it is read once whole.
			if errors.Is(err, io.EOF) {
				err = nil
			}
			break
		}
		off += int64(len(line))
		if skipping {
			skipping = false
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		s, perr := ParseLine(line)
		if perr != nil {
			t.stats.Malformed++
			continue
		}
		syms = append(syms, s)
	}
	t.stats.Read += uint64(len(syms))
	before := p.m.Bytes()
	p.m.Add(syms)
	t.total += p.m.Bytes() - before
	t.bound(p)
	return off, err
}

// bound shrinks the process's map to its share: at most MaxBytesPerProcess, and no more
// than what the other processes leave of MaxBytes. It shrinks to 7/8 of the share, so a
// map at its bound is not shrunk again at every append.
func (t *Table) bound(p *process) {
	share := min(t.opts.MaxBytesPerProcess, t.opts.MaxBytes-(t.total-p.m.Bytes()))
	if p.m.Bytes() <= share {
		return
	}
	before := p.m.Bytes()
	t.stats.Dropped += uint64(p.m.Shrink(max(share-share/8, 0)))
	t.total -= before - p.m.Bytes()
}

// probe is a sample of a file's bytes.
type probe struct {
	at   int64
	data []byte
}

// Probes sample the part of a file read: its first and last bytes and some between, so a
// rewrite in place (the same file, as long or longer) is told from an append without
// reading the file again. A rewrite that differs from the old content only between the
// probes passes for an append; a snapshot taken again after the runtime generated more
// code differs from the first difference on, which a probe after it sees.
const (
	probeCount = 10
	probeBytes = 64
)

func takeProbes(f *os.File, end int64) []probe {
	if end == 0 {
		return nil
	}
	ps := make([]probe, 0, probeCount)
	for i := int64(0); i < probeCount; i++ {
		at := max((end-probeBytes)*i/(probeCount-1), 0)
		if len(ps) > 0 && ps[len(ps)-1].at == at {
			continue
		}
		ps = append(ps, probe{at: at, data: readAt(f, at, min(probeBytes, end-at))})
	}
	return ps
}

// unchanged reports whether the file still holds the probed bytes.
func unchanged(f *os.File, ps []probe) bool {
	for _, p := range ps {
		if !bytes.Equal(readAt(f, p.at, int64(len(p.data))), p.data) {
			return false
		}
	}
	return true
}

func readAt(f *os.File, at, n int64) []byte {
	if n <= 0 {
		return nil
	}
	b := make([]byte, n)
	k, _ := f.ReadAt(b, at)
	return b[:k]
}

// MarkExit records that pid ended; Sweep forgets it.
func (t *Table) MarkExit(pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil {
		p.exited = true
	}
}

// MarkExec forgets pid's map now: the new program's code is not the old one's.
func (t *Table) MarkExec(pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forget(pid)
}

func (t *Table) forget(pid uint32) {
	if p := t.procs[pid]; p != nil {
		t.total -= p.m.Bytes()
		delete(t.procs, pid)
	}
}

// Sweep forgets exited processes and those whose /proc entry is gone (an exit notification
// can be lost), returning how many it dropped. Call it after a report, so the samples of a
// process that just exited were named first.
func (t *Table) Sweep() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for pid, p := range t.procs {
		if !p.exited {
			if _, err := os.Stat(filepath.Join(t.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10))); errors.Is(err, fs.ErrNotExist) {
				p.exited = true
			}
		}
		if p.exited {
			t.forget(pid)
			n++
		}
	}
	return n
}

// Stats returns the table's counters.
func (t *Table) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Usage returns the processes tracked, the symbols' entries held and their bytes.
func (t *Table) Usage() (procs, entries int, bytes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.procs {
		entries += p.m.Len()
	}
	return len(t.procs), entries, t.total
}
