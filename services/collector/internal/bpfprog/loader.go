//go:build linux

package bpfprog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Event kinds, as bpf/profiler.c writes them in the first word of a record.
const (
	eventStack = 1
	eventExec  = 2
	eventExit  = 3
)

// Counter indices of the per-CPU counters map.
const (
	counterSamples  = 0
	counterLost     = 1
	counterFiltered = 2
	counterProcLost = 3
)

// MaxStackDepth is the deepest stack the program records (the kernel's
// default perf_event_max_stack).
const MaxStackDepth = 127

// Offsets inside a stack record (struct psym_stack_event).
const (
	offTgid   = 4
	offKtime  = 8
	offTid    = 16
	offCPU    = 20
	offKLen   = 24
	offULen   = 28
	offSPWord = 32
	offComm   = 40
	offKstack = 56
	offUstack = offKstack + 8*MaxStackDepth
	stackRec  = offUstack + 8*MaxStackDepth
)

// The decoder reads records by offset; this fails the build if the C struct
// and the offsets above drift apart.
var _ = [1]struct{}{}[unsafe.Sizeof(profilerPsymStackEvent{})-stackRec]

// pollInterval is how often user space drains the ring buffer when the
// kernel has not woken it earlier.
const pollInterval = 250 * time.Millisecond

// Options configure the sampler.
type Options struct {
	// FrequencyHz is the sampling frequency per CPU.
	FrequencyHz int
	// PIDs, when not empty, restricts sampling to these processes (tgids).
	PIDs []uint32
	// CgroupIDs, when not empty, restricts sampling to tasks in these
	// cgroup v2 cgroups or their descendants (a cgroup's ID is the inode
	// number of its directory).
	CgroupIDs []uint64
}

// Sample is one stack sample.
type Sample struct {
	Time time.Time
	TGID uint32
	TID  uint32
	CPU  uint32
	Comm string
	// Kernel and User hold return addresses, innermost first, as the
	// kernel's perf callchain walker reports them (user frames by frame
	// pointers). They alias a buffer that is reused after the callback
	// returns.
	Kernel []uint64
	User   []uint64
	// UserSPWord is the word at the user stack pointer (0 if unreadable): the return
	// address into the caller when the sampled function has no frame of its own.
	UserSPWord uint64
}

// ProcEventKind says what happened to a process.
type ProcEventKind int

const (
	// ProcExec: the process replaced its image; its mappings are stale.
	ProcExec ProcEventKind = iota + 1
	// ProcExit: the process ended.
	ProcExit
)

// ProcEvent is an exec or an exit of a process.
type ProcEvent struct {
	Kind ProcEventKind
	TGID uint32
}

// Handler receives what the ring buffer delivers, in order, on one goroutine.
type Handler interface {
	HandleSample(*Sample)
	HandleProcEvent(ProcEvent)
}

// Counters are the kernel-side counters summed over CPUs.
type Counters struct {
	Samples  uint64 // samples written to the ring buffer
	Lost     uint64 // samples dropped because the ring buffer was full
	Filtered uint64 // samples of processes the filters exclude
	ProcLost uint64 // exec/exit notifications dropped (ring full)
}

// Sampler owns the loaded programs, the perf events and the ring reader.
type Sampler struct {
	objs    profilerObjects
	events  []int
	links   []link.Link
	reader  *ringbuf.Reader
	monoOff time.Duration // wall clock minus CLOCK_MONOTONIC
	log     *slog.Logger
}

// ErrPrivileges marks a failure caused by missing privileges.
var ErrPrivileges = errors.New("insufficient privileges: the collector needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (CAP_SYS_ADMIN on kernels before 5.8)")

// Open loads the programs and attaches them: sampling starts at once and
// the ring buffer fills until Run reads it.
func Open(opts Options, log *slog.Logger) (_ *Sampler, err error) {
	if log == nil {
		log = slog.Default()
	}
	if opts.FrequencyHz <= 0 || opts.FrequencyHz > 10000 {
		return nil, fmt.Errorf("sampling frequency %d Hz out of range 1..10000", opts.FrequencyHz)
	}
	// Kernels since 5.11 charge BPF memory to the memory cgroup and ignore
	// RLIMIT_MEMLOCK; raising the limit needs CAP_SYS_RESOURCE, which a
	// least-privilege deployment does not have, so failing is not an error.
	if err := rlimit.RemoveMemlock(); err != nil {
		log.Debug("memlock limit not raised", "err", err)
	}

	spec, err := loadProfiler()
	if err != nil {
		return nil, fmt.Errorf("load eBPF spec: %w", err)
	}
	if len(opts.PIDs) > 0 {
		if err := spec.Variables["filter_pids"].Set(uint32(1)); err != nil {
			return nil, fmt.Errorf("set pid filter: %w", err)
		}
	}
	if len(opts.CgroupIDs) > 0 {
		if err := spec.Variables["filter_cgroups"].Set(uint32(1)); err != nil {
			return nil, fmt.Errorf("set cgroup filter: %w", err)
		}
	}

	s := &Sampler{log: log}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		return nil, privilegeError("load eBPF programs", err)
	}
	defer func() {
		if err != nil {
			if cerr := s.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("release after failed open: %w", cerr))
			}
		}
	}()
	for _, pid := range opts.PIDs {
		if err := s.objs.PidFilter.Put(pid, uint8(1)); err != nil {
			return nil, fmt.Errorf("add pid %d to filter: %w", pid, err)
		}
	}
	for _, id := range opts.CgroupIDs {
		if err := s.objs.CgroupFilter.Put(id, uint8(1)); err != nil {
			return nil, fmt.Errorf("add cgroup %d to filter: %w", id, err)
		}
	}

	s.reader, err = ringbuf.NewReader(s.objs.Events)
	if err != nil {
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	// Exec and exit notifications first, so no process starts unseen
	// between the first sample and the tracepoints.
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{{"sched_process_exec", s.objs.OnExec}, {"sched_process_exit", s.objs.OnExit}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp.name, Program: tp.prog})
		if err != nil {
			return nil, privilegeError("attach raw tracepoint "+tp.name, err)
		}
		s.links = append(s.links, l)
	}

	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	for _, cpu := range cpus {
		fd, err := openCPUClock(cpu, opts.FrequencyHz, s.objs.ProfileCpu.FD())
		if err != nil {
			return nil, err
		}
		s.events = append(s.events, fd)
	}

	var mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return nil, fmt.Errorf("read monotonic clock: %w", err)
	}
	s.monoOff = time.Duration(time.Now().UnixNano() - mono.Nano())
	log.Info("eBPF sampler attached", "cpus", len(cpus), "frequency_hz", opts.FrequencyHz,
		"pid_filter", len(opts.PIDs), "cgroup_filter", len(opts.CgroupIDs))
	return s, nil
}

func openCPUClock(cpu, freq, progFD int) (int, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(freq),
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			// A CPU can go offline between reading the list and opening.
			return -1, fmt.Errorf("open CPU-clock perf event on CPU %d (offline?): %w", cpu, err)
		}
		return -1, privilegeError(fmt.Sprintf("open CPU-clock perf event on CPU %d", cpu), err)
	}
	// An event that cannot be closed keeps its perf buffer; say so beside the reason it was
	// abandoned.
	abandon := func(err error) error {
		if cerr := unix.Close(fd); cerr != nil {
			return errors.Join(err, fmt.Errorf("close perf event on CPU %d: %w", cpu, cerr))
		}
		return err
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, progFD); err != nil {
		return -1, abandon(privilegeError(fmt.Sprintf("attach eBPF program to perf event on CPU %d", cpu), err))
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return -1, abandon(fmt.Errorf("enable perf event on CPU %d: %w", cpu, err))
	}
	return fd, nil
}

// privilegeError wraps err with ErrPrivileges when the kernel refused for
// lack of privileges, naming the capabilities this process lacks.
func privilegeError(what string, err error) error {
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%s: %w", what, err)
	}
	missing := MissingCapabilities()
	if len(missing) > 0 {
		return fmt.Errorf("%s: %w (missing: %s): %w", what, ErrPrivileges, strings.Join(missing, ", "), err)
	}
	return fmt.Errorf("%s: %w: %w", what, ErrPrivileges, err)
}

// MissingCapabilities lists which of the capabilities the collector needs
// this process does not hold in its effective set.
func MissingCapabilities() []string {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	var eff uint64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			eff, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return nil
			}
		}
	}
	const sysAdmin = 21
	var missing []string
	for _, c := range []struct {
		bit  uint
		name string
	}{{39, "CAP_BPF"}, {38, "CAP_PERFMON"}, {19, "CAP_SYS_PTRACE"}} {
		// CAP_SYS_ADMIN implies CAP_BPF and CAP_PERFMON.
		if eff&(1<<c.bit) == 0 && (c.bit == 19 || eff&(1<<sysAdmin) == 0) {
			missing = append(missing, c.name)
		}
	}
	return missing
}

// onlineCPUs parses /sys/devices/system/cpu/online ("0-3,5,7-8").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("read online CPUs: %w", err)
	}
	return parseCPUList(string(b))
}

func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parse CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("parse CPU list %q: %w", s, err)
			}
		}
		if a < 0 || b < a || b-a > 1<<16 {
			return nil, fmt.Errorf("parse CPU list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		return nil, fmt.Errorf("parse CPU list %q: no CPUs", s)
	}
	return cpus, nil
}

// Run reads the ring buffer until ctx ends or the sampler is closed,
// delivering records to h on the calling goroutine.
func (s *Sampler) Run(ctx context.Context, h Handler) error {
	// Closing the reader is what ends a blocked ReadInto; Close may have got there first.
	stop := context.AfterFunc(ctx, func() {
		if err := s.reader.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			s.log.Warn("close ring buffer", "err", err)
		}
	})
	defer stop()
	var rec ringbuf.Record
	var sample Sample
	sample.Kernel = make([]uint64, 0, MaxStackDepth)
	sample.User = make([]uint64, 0, MaxStackDepth)
	for {
		s.reader.SetDeadline(time.Now().Add(pollInterval))
		err := s.reader.ReadInto(&rec)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			continue
		case errors.Is(err, ringbuf.ErrClosed):
			return nil
		default:
			return fmt.Errorf("read ring buffer: %w", err)
		}
		s.dispatch(rec.RawSample, &sample, h)
	}
}

func (s *Sampler) dispatch(raw []byte, sample *Sample, h Handler) {
	if len(raw) < 8 {
		s.log.Warn("short ring buffer record", "bytes", len(raw))
		return
	}
	le := binary.LittleEndian
	kind := le.Uint32(raw)
	tgid := le.Uint32(raw[offTgid:])
	switch kind {
	case eventExec:
		h.HandleProcEvent(ProcEvent{Kind: ProcExec, TGID: tgid})
	case eventExit:
		h.HandleProcEvent(ProcEvent{Kind: ProcExit, TGID: tgid})
	case eventStack:
		if len(raw) < stackRec {
			s.log.Warn("short stack record", "bytes", len(raw))
			return
		}
		sample.TGID = tgid
		sample.Time = time.Unix(0, int64(le.Uint64(raw[offKtime:]))).Add(s.monoOff)
		sample.TID = le.Uint32(raw[offTid:])
		sample.CPU = le.Uint32(raw[offCPU:])
		comm := raw[offComm : offComm+16]
		if i := bytes.IndexByte(comm, 0); i >= 0 {
			comm = comm[:i]
		}
		sample.Comm = string(comm)
		sample.Kernel = decodeStack(sample.Kernel[:0], raw[offKstack:offUstack], int32(le.Uint32(raw[offKLen:])))
		sample.User = decodeStack(sample.User[:0], raw[offUstack:stackRec], int32(le.Uint32(raw[offULen:])))
		sample.UserSPWord = le.Uint64(raw[offSPWord:])
		h.HandleSample(sample)
	default:
		s.log.Warn("unknown ring buffer record", "kind", kind)
	}
}

// decodeStack returns the frames bpf_get_stack wrote; n is its return value
// (bytes written, or a negative errno such as -EFAULT for a kernel thread's
// absent user stack).
func decodeStack(dst []uint64, b []byte, n int32) []uint64 {
	if n <= 0 {
		return dst
	}
	if int(n) > len(b) {
		n = int32(len(b))
	}
	for i := 0; i+8 <= int(n); i += 8 {
		pc := binary.LittleEndian.Uint64(b[i:])
		if pc == 0 {
			break
		}
		dst = append(dst, pc)
	}
	return dst
}

// Counters reads the kernel-side counters.
func (s *Sampler) Counters() (Counters, error) {
	var c Counters
	for idx, dst := range map[uint32]*uint64{
		counterSamples: &c.Samples, counterLost: &c.Lost,
		counterFiltered: &c.Filtered, counterProcLost: &c.ProcLost,
	} {
		var perCPU []uint64
		if err := s.objs.Counters.Lookup(idx, &perCPU); err != nil {
			return c, fmt.Errorf("read counter %d: %w", idx, err)
		}
		for _, v := range perCPU {
			*dst += v
		}
	}
	return c, nil
}

// Close detaches everything and frees the kernel objects.
func (s *Sampler) Close() error {
	var errs []error
	for _, fd := range s.events {
		if err := unix.Close(fd); err != nil {
			errs = append(errs, fmt.Errorf("close perf event: %w", err))
		}
	}
	s.events = nil
	for _, l := range s.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close link: %w", err))
		}
	}
	s.links = nil
	if s.reader != nil {
		if err := s.reader.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, fmt.Errorf("close ring buffer: %w", err))
		}
	}
	if err := s.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close eBPF objects: %w", err))
	}
	return errors.Join(errs...)
}
