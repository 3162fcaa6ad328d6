//go:build linux

// Package unwind feeds the collector's CFI unwinder: it builds each mapped file's unwind
// table from its call frame information once (keyed by device, inode, size and mtime, so
// every process mapping the file shares it), places the tables in the kernel's row array
// (evicting the least recently used when it is full), and tells the kernel, per process,
// which table covers which address range.
package unwind

import (
	"bytes"
	"cmp"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/profsym/profsym/pkg/debuginfo/cfi"
	"github.com/profsym/profsym/services/collector/internal/bpfprog"
	"github.com/profsym/profsym/services/collector/internal/procmaps"
)

// The kernel side's layout (bpf/profiler.c): MAX_PROC_MAPS and the rule values.
const (
	maxProcMaps = 256

	mapNone = 0
	mapCFI  = 1
	mapFP   = 2
)

// Config configures a Manager.
type Config struct {
	Maps bpfprog.UnwindMaps
	// Registerer receives the manager's metrics (nil: not registered).
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// procMap is struct psym_map.
type procMap struct {
	Start, End, Bias uint64
	File, Gen, Kind  uint32
	_                uint32
}

// procEntry is struct psym_proc.
type procEntry struct {
	StartStack uint64
	Count      uint32
	_          uint32
	Maps       [maxProcMaps]procMap
}

// fileSlot is struct psym_file.
type fileSlot struct {
	Base               uint64
	RowStart, RowCount uint32
	Gen                uint32
	_                  uint32
}

// fileEntry is what the manager knows of one file.
type fileEntry struct {
	key  procmaps.FileKey
	kind uint32
	// With kind mapCFI: the slot, its generation and the rows.
	slot, gen uint32
	rows      span
	base      uint64
	refs      int    // processes whose kernel entry names this file
	lastUsed  uint64 // the manager's clock when a process last named it
}

// Manager owns the unwinder's maps. Update and Forget may be called from any goroutine;
// the work happens on Run's.
type Manager struct {
	maps bpfprog.UnwindMaps
	log  *slog.Logger

	mu      sync.Mutex
	pending map[uint32]*procmaps.Process // nil value: forget the process
	order   map[uint32]uint64            // when each pending pid was first asked for
	seq     uint64
	wake    chan struct{}

	// Owned by Run's goroutine.
	files     map[procmaps.FileKey]*fileEntry
	procFiles map[uint32][]procmaps.FileKey
	rows      *rowAllocator
	freeSlots []uint32
	slotGens  []uint32
	clock     uint64
	vdso      *fileEntry
	vdsoZero  uint64 // the [vdso] image's address of file offset 0
	buf       procEntry
	mapsBuf   []pendingMap // apply's list of a process's mappings, reused

	m metrics
}

type metrics struct {
	builds        *prometheus.CounterVec
	buildSeconds  prometheus.Counter
	ehFrameBytes  prometheus.Counter
	evictions     *prometheus.CounterVec
	procUpdates   prometheus.Counter
	compactions   prometheus.Counter
	procTruncated prometheus.Counter
	rowsUsed      prometheus.Gauge
	filesLoaded   prometheus.Gauge
	processes     prometheus.Gauge
}

// Stats is a snapshot of the manager's work, for tests and logs.
type Stats struct {
	FilesLoaded int
	RowsUsed    uint32
	Processes   int
}

// New returns a manager of the given maps, with the kernel's [vdso] table loaded.
func New(cfg Config) (*Manager, error) {
	if cfg.Maps.Rows == nil || cfg.Maps.Files == nil || cfg.Maps.Procs == nil {
		return nil, errors.New("unwind: the sampler was opened without the CFI unwinder")
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	nrows, nslots := cfg.Maps.Rows.MaxEntries(), cfg.Maps.Files.MaxEntries()
	m := &Manager{
		maps: cfg.Maps, log: log,
		pending:   make(map[uint32]*procmaps.Process),
		order:     make(map[uint32]uint64),
		wake:      make(chan struct{}, 1),
		files:     make(map[procmaps.FileKey]*fileEntry),
		procFiles: make(map[uint32][]procmaps.FileKey),
		rows:      newRowAllocator(nrows),
		slotGens:  make([]uint32, nslots),
	}
	for i := nslots; i > 0; i-- {
		m.freeSlots = append(m.freeSlots, i-1)
	}
	m.registerMetrics(cfg.Registerer)
	if err := m.loadVdso(); err != nil {
		// Stacks through [vdso] then end there, counted; everything else unwinds.
		log.Warn("no unwind table for [vdso]", "err", err)
	}
	return m, nil
}

func (m *Manager) registerMetrics(reg prometheus.Registerer) {
	const ns, sub = "profsym_collector", "unwind"
	m.m = metrics{
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "table_builds_total",
			Help: "Unwind tables built from files' CFI, by result (cfi: a table; frame_pointers: Go or no CFI; error: unreadable CFI; full: no room even after eviction)."}, []string{"result"}),
		buildSeconds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "table_build_seconds_total",
			Help: "Time spent building unwind tables."}),
		ehFrameBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "cfi_bytes_total",
			Help: "Bytes of .eh_frame/.debug_frame turned into tables."}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "table_evictions_total",
			Help: "Tables evicted to make room, by whether a live process still mapped the file (its frames then end the stack, counted as no_table)."}, []string{"in_use"}),
		compactions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "table_compactions_total",
			Help: "Times the row array was packed to make a contiguous run for a new table."}),
		procUpdates: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "process_updates_total",
			Help: "Process mapping lists written to the kernel."}),
		procTruncated: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "process_mappings_truncated_total",
			Help: "Process updates that had more executable mappings than the kernel entry holds (256)."}),
		rowsUsed: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "table_rows",
			Help: "Rows of the kernel's unwind-row array in use (16 bytes each)."}),
		filesLoaded: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "tables_loaded",
			Help: "Files whose unwind table is in the kernel."}),
		processes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "processes",
			Help: "Processes whose mappings the kernel unwinder knows."}),
	}
	if reg == nil {
		return
	}
	rowBytes := func() float64 { return float64(m.maps.Rows.MaxEntries()) * float64(unsafe.Sizeof(row{})) }
	reg.MustRegister(m.m.builds, m.m.buildSeconds, m.m.ehFrameBytes, m.m.evictions, m.m.compactions, m.m.procUpdates, m.m.procTruncated,
		m.m.rowsUsed, m.m.filesLoaded, m.m.processes,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "table_capacity_bytes",
			Help: "Kernel memory of the unwind-row array (its size is --unwind-table-rows)."}, rowBytes))
}

// Update makes the kernel unwinder follow p's mappings. It does not block.
func (m *Manager) Update(p *procmaps.Process) {
	m.mu.Lock()
	m.pending[p.PID] = p
	m.enqueue(p.PID)
	m.mu.Unlock()
	m.signal()
}

// enqueue remembers when pid was first asked for since the last drain; m.mu is held.
func (m *Manager) enqueue(pid uint32) {
	if _, ok := m.order[pid]; !ok {
		m.seq++
		m.order[pid] = m.seq
	}
}

// Forget drops what the unwinder knows of an ended process.
func (m *Manager) Forget(pid uint32) {
	m.mu.Lock()
	m.pending[pid] = nil
	m.enqueue(pid)
	m.mu.Unlock()
	m.signal()
}

func (m *Manager) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run applies updates until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		}
		m.drain()
	}
}

// Flush applies what is pending on the calling goroutine; call it only while Run is not
// running (at start, before sampling begins).
func (m *Manager) Flush() { m.drain() }

func (m *Manager) drain() {
	m.mu.Lock()
	batch := m.pending
	m.pending = make(map[uint32]*procmaps.Process, len(batch))
	order := m.order
	m.order = make(map[uint32]uint64, len(order))
	m.mu.Unlock()
	// Oldest request first: a process waits behind those that came before it, not behind
	// every process with a lower pid.
	pids := make([]uint32, 0, len(batch))
	for pid := range batch {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return order[pids[i]] < order[pids[j]] })
	for _, pid := range pids {
		if p := batch[pid]; p != nil {
			m.apply(p)
		} else {
			m.forget(pid)
		}
	}
}

// Stats returns a snapshot; call it from Run's goroutine or after Run returned.
func (m *Manager) Stats() Stats {
	n := 0
	for _, f := range m.files {
		if f.kind == mapCFI {
			n++
		}
	}
	return Stats{FilesLoaded: n, RowsUsed: m.rows.used, Processes: len(m.procFiles)}
}

// pendingMap is a process mapping before it is written: file is the mapped file's mapping,
// nil for anonymous memory and the [vdso].
type pendingMap struct {
	procMap
	file *procmaps.Mapping
}

func (m *Manager) apply(p *procmaps.Process) {
	m.clock++
	e := &m.buf
	*e = procEntry{StartStack: p.StartStack}
	var keys []procmaps.FileKey
	n := 0
	// The file mappings, the [vdso] and the other anonymous executable mappings (JIT code,
	// walked by frame pointers), in address order; a process with more than the entry holds
	// keeps its lowest, and no table is built for a file past them.
	all := m.mapsBuf[:0]
	for i := range p.Mappings {
		mp := &p.Mappings[i]
		all = append(all, pendingMap{procMap: procMap{Start: mp.Start, End: mp.End, Bias: mp.Bias, Kind: mapNone}, file: mp})
	}
	for _, r := range p.Anonymous {
		if r == p.Vdso {
			continue
		}
		all = append(all, pendingMap{procMap: procMap{Start: r.Start, End: r.End, Kind: mapFP}})
	}
	if p.Vdso.End != 0 && m.vdso != nil {
		m.vdso.lastUsed = m.clock
		all = append(all, pendingMap{procMap: procMap{Start: p.Vdso.Start, End: p.Vdso.End, Bias: p.Vdso.Start - m.vdsoZero, File: m.vdso.slot, Gen: m.vdso.gen, Kind: mapCFI}})
	}
	slices.SortFunc(all, func(a, b pendingMap) int { return cmp.Compare(a.Start, b.Start) })
	m.mapsBuf = all
	truncated := false
	for _, pm := range all {
		if n == maxProcMaps {
			truncated = true
			break
		}
		if pm.file != nil {
			if f := m.fileFor(pm.file); f != nil {
				pm.Kind = f.kind
				if f.kind == mapCFI {
					pm.File, pm.Gen = f.slot, f.gen
				}
				keys = append(keys, f.key)
			}
		}
		e.Maps[n] = pm.procMap
		n++
	}
	if truncated {
		m.m.procTruncated.Inc()
	}
	e.Count = uint32(n)
	// Only the used part of the entry varies; the rest is zero from the reset above.
	if err := m.maps.Procs.Put(p.PID, e); err != nil {
		m.log.Debug("write process unwind entry", "pid", p.PID, "err", err)
		m.release(keys)
		m.releasePID(p.PID)
		return
	}
	m.m.procUpdates.Inc()
	m.releasePID(p.PID)
	for _, k := range keys {
		if f := m.files[k]; f != nil {
			f.refs++
		}
	}
	m.procFiles[p.PID] = keys
	m.m.processes.Set(float64(len(m.procFiles)))
}

func (m *Manager) release(keys []procmaps.FileKey) {
	for _, k := range keys {
		if f := m.files[k]; f != nil && f.refs > 0 {
			f.refs--
		}
	}
}

func (m *Manager) releasePID(pid uint32) {
	if old, ok := m.procFiles[pid]; ok {
		m.release(old)
		delete(m.procFiles, pid)
	}
}

func (m *Manager) forget(pid uint32) {
	m.releasePID(pid)
	m.m.processes.Set(float64(len(m.procFiles)))
	if err := m.maps.Procs.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		m.log.Debug("delete process unwind entry", "pid", pid, "err", err)
	}
}

// fileFor returns the file's entry, building its table the first time it is seen; nil
// when the file cannot be reached.
func (m *Manager) fileFor(mp *procmaps.Mapping) *fileEntry {
	if mp.File == nil {
		return nil
	}
	key := mp.File.Key
	if f := m.files[key]; f != nil {
		f.lastUsed = m.clock
		return f
	}
	f := &fileEntry{key: key, lastUsed: m.clock}
	switch {
	case mp.File.IsGo:
		// Go keeps frame pointers, and its binaries carry no .eh_frame.
		f.kind = mapFP
		m.m.builds.WithLabelValues("frame_pointers").Inc()
	case mp.OpenPath == "":
		return nil
	default:
		table, err := buildTable(mp.OpenPath, key, &m.m)
		switch {
		case errors.Is(err, cfi.ErrNoCFI) || err == nil && len(table.rows) == 0:
			f.kind = mapFP
			m.m.builds.WithLabelValues("frame_pointers").Inc()
		case errors.Is(err, errUnreachable):
			// The process ended (or the file was replaced) before its table was built: the
			// next process that maps the file tries again.
			m.log.Debug("mapped file gone before its unwind table was built", "path", mp.Path, "err", err)
			return nil
		case err != nil:
			m.log.Debug("unwind table not built", "path", mp.Path, "err", err)
			f.kind = mapNone
			m.m.builds.WithLabelValues("error").Inc()
		default:
			if !m.load(f, table) {
				m.log.Debug("no room for an unwind table", "path", mp.Path, "rows", len(table.rows), "free", m.rows.size-m.rows.used)
				m.m.builds.WithLabelValues("full").Inc()
				// Not cached: a later update tries again once room is made.
				f.kind = mapNone
				return f
			}
			m.m.builds.WithLabelValues("cfi").Inc()
		}
	}
	m.files[key] = f
	m.pruneDecisions()
	return f
}

// pruneDecisions bounds the entries of files without a table (their decision is cheap
// to make again).
func (m *Manager) pruneDecisions() {
	const maxEntries = 1 << 15
	if len(m.files) <= maxEntries {
		return
	}
	for k, f := range m.files {
		if f.kind != mapCFI && f.refs == 0 {
			delete(m.files, k)
		}
	}
}

// load places an encoded table in the kernel, evicting least recently used tables to make
// room.
func (m *Manager) load(f *fileEntry, t *encoded) bool {
	n := uint32(len(t.rows))
	if n == 0 || n > m.rows.size {
		return false
	}
	for {
		start, ok := m.rows.alloc(n)
		if ok && len(m.freeSlots) > 0 {
			slot := m.freeSlots[len(m.freeSlots)-1]
			m.freeSlots = m.freeSlots[:len(m.freeSlots)-1]
			f.kind, f.slot, f.rows, f.base = mapCFI, slot, span{start, n}, t.base
			m.slotGens[slot]++
			f.gen = m.slotGens[slot]
			if err := m.writeRows(start, t.rows); err != nil {
				m.log.Warn("write unwind rows", "err", err)
				m.rows.release(start, n)
				m.freeSlots = append(m.freeSlots, slot)
				return false
			}
			if err := m.maps.Files.Put(slot, fileSlot{Base: t.base, RowStart: start, RowCount: n, Gen: f.gen}); err != nil {
				m.log.Warn("write unwind file slot", "err", err)
				m.rows.release(start, n)
				m.freeSlots = append(m.freeSlots, slot)
				return false
			}
			m.m.rowsUsed.Set(float64(m.rows.used))
			m.m.filesLoaded.Inc()
			return true
		}
		if ok {
			m.rows.release(start, n)
		}
		if m.rows.size-m.rows.used >= n && m.rows.largest() < n {
			// Room enough, in pieces: pack the tables together instead of evicting one.
			if err := m.compact(); err != nil {
				m.log.Warn("compact unwind rows", "err", err)
				return false
			}
			continue
		}
		if !m.evictOne() {
			return false
		}
	}
}

// compact moves every table to the front of the row array, in address order, leaving one
// free run at the end. A table's rows are copied before its slot is pointed at them; a
// walk that read the slot just before the move may read moved rows for that one frame,
// which the kernel's bounds keep inside the array.
func (m *Manager) compact() error {
	var loaded []*fileEntry
	for _, f := range m.files {
		if f.kind == mapCFI {
			loaded = append(loaded, f)
		}
	}
	sort.Slice(loaded, func(i, j int) bool { return loaded[i].rows.start < loaded[j].rows.start })
	var cursor uint32
	buf := make([]row, 0, 1024)
	for _, f := range loaded {
		if f.rows.start == cursor {
			cursor += f.rows.n
			continue
		}
		buf = buf[:0]
		for i := uint32(0); i < f.rows.n; i++ {
			var r row
			if err := m.maps.Rows.Lookup(f.rows.start+i, &r); err != nil {
				return fmt.Errorf("read row %d: %w", f.rows.start+i, err)
			}
			buf = append(buf, r)
		}
		if err := m.writeRows(cursor, buf); err != nil {
			return err
		}
		if err := m.maps.Files.Put(f.slot, fileSlot{Base: f.base, RowStart: cursor, RowCount: f.rows.n, Gen: f.gen}); err != nil {
			return fmt.Errorf("move unwind file slot: %w", err)
		}
		f.rows.start = cursor
		cursor += f.rows.n
	}
	m.rows = newRowAllocator(m.rows.size)
	if cursor > 0 {
		if _, ok := m.rows.alloc(cursor); !ok {
			return fmt.Errorf("%d rows do not fit in %d after compaction", cursor, m.rows.size)
		}
	}
	m.m.compactions.Inc()
	return nil
}

// evictOne drops the least recently used table, preferring one no live process maps.
func (m *Manager) evictOne() bool {
	var victim *fileEntry
	for _, f := range m.files {
		if f.kind != mapCFI || f == m.vdso {
			continue
		}
		if victim == nil || (f.refs == 0) != (victim.refs == 0) && f.refs == 0 ||
			(f.refs == 0) == (victim.refs == 0) && f.lastUsed < victim.lastUsed {
			victim = f
		}
	}
	if victim == nil {
		return false
	}
	inUse := "false"
	if victim.refs > 0 {
		inUse = "true"
	}
	m.m.evictions.WithLabelValues(inUse).Inc()
	// A new generation first, so a process entry naming the old one finds no table from
	// now on, then the rows can be given to another file.
	m.slotGens[victim.slot]++
	if err := m.maps.Files.Put(victim.slot, fileSlot{Gen: m.slotGens[victim.slot]}); err != nil {
		m.log.Warn("clear unwind file slot", "err", err)
	}
	m.rows.release(victim.rows.start, victim.rows.n)
	m.freeSlots = append(m.freeSlots, victim.slot)
	delete(m.files, victim.key)
	m.m.rowsUsed.Set(float64(m.rows.used))
	m.m.filesLoaded.Dec()
	return true
}

// writeRows writes rows at start with batched updates (one system call per batch instead
// of one per row).
func (m *Manager) writeRows(start uint32, rows []row) error {
	const batch = 1 << 14
	keys := make([]uint32, 0, batch)
	for off := 0; off < len(rows); off += batch {
		chunk := rows[off:min(off+batch, len(rows))]
		keys = keys[:0]
		for i := range chunk {
			keys = append(keys, start+uint32(off+i))
		}
		if _, err := m.maps.Rows.BatchUpdate(keys, chunk, nil); err != nil {
			if !errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("batch update of %d rows: %w", len(chunk), err)
			}
			for i := range chunk {
				if err := m.maps.Rows.Put(keys[i], chunk[i]); err != nil {
					return fmt.Errorf("update row %d: %w", keys[i], err)
				}
			}
		}
	}
	return nil
}

// errUnreachable marks a file that could not be opened as the mapped version any more.
var errUnreachable = errors.New("mapped file unreachable")

// buildTable reads the file at path, checking that it is still the file key names.
func buildTable(path string, key procmaps.FileKey, mt *metrics) (*encoded, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnreachable, err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnreachable, err)
	}
	if k, err := procmaps.KeyOf(st); err != nil || k != key {
		return nil, fmt.Errorf("%w: %s changed since it was mapped", errUnreachable, path)
	}
	f, err := elf.NewFile(fh)
	if err != nil {
		return nil, fmt.Errorf("parse ELF: %w", err)
	}
	return build(f, mt)
}

func build(f *elf.File, mt *metrics) (*encoded, error) {
	began := time.Now()
	t, err := cfi.Build(f)
	if err != nil {
		return nil, err
	}
	// Rows of another architecture's file (a foreign binary mapped as code) would name
	// the wrong registers.
	if err := t.CheckArch(hostMachine); err != nil {
		return nil, err
	}
	if t.Arch == elf.EM_AARCH64 {
		addAArch64PLT(t, f)
	}
	mt.buildSeconds.Add(time.Since(began).Seconds())
	if s := f.Section(t.Source); s != nil {
		mt.ehFrameBytes.Add(float64(s.Size))
	}
	return encode(t), nil
}

// loadVdso builds the table of the kernel's [vdso], which every process maps and no file
// holds: it is read from this process's own mapping.
func (m *Manager) loadVdso() error {
	image, err := readOwnVdso()
	if err != nil {
		return err
	}
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		return fmt.Errorf("parse [vdso]: %w", err)
	}
	t, err := build(f, &m.m)
	if errors.Is(err, cfi.ErrNoCFI) && hostMachine == elf.EM_AARCH64 {
		// arm64 kernels link their vDSO without .eh_frame: only the signal trampoline needs
		// a rule, and its symbol says where it is.
		t, err = aarch64VdsoTable(f)
	}
	if err != nil {
		return fmt.Errorf("[vdso] CFI: %w", err)
	}
	// The mapping starts at file offset 0: the bias is its start minus the address of
	// offset 0 in the image.
	var zeroVaddr uint64
	found := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			zeroVaddr, found = p.Vaddr-p.Off, true
			break
		}
	}
	if !found {
		return errors.New("[vdso] has no PT_LOAD")
	}
	v := &fileEntry{key: procmaps.FileKey{Dev: math.MaxUint64, Inode: math.MaxUint64}}
	if !m.load(v, t) {
		return errors.New("no room for the [vdso] table")
	}
	m.vdsoZero = zeroVaddr
	m.files[v.key] = v
	m.vdso = v
	return nil
}
