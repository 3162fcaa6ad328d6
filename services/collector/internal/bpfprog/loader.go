//go:build linux

package bpfprog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Event kinds, as bpf/profiler.c writes them in the first word of a record.
const (
	eventStack  = 1
	eventExec   = 2
	eventExit   = 3
	eventOffCPU = 4
)

// Counter indices of the per-CPU counters map (enum psym_counter).
const (
	counterSamples        = 0
	counterLost           = 1
	counterFiltered       = 2
	counterProcLost       = 3
	counterEndBase        = uint32(4)
	counterLeafOnly       = counterEndBase + uint32(numUnwindEnds)
	counterOffCPURecorded = counterLeafOnly + 1
	counterOffCPUSent     = counterLeafOnly + 2
	counterOffCPUShort    = counterLeafOnly + 3
	counterOffCPULost     = counterLeafOnly + 4
	numCounters           = counterLeafOnly + 5
)

// MaxStackDepth is the deepest stack the program records (the kernel's
// default perf_event_max_stack).
const MaxStackDepth = 127

// Offsets inside a stack record (struct psym_stack_event).
const (
	offTgid    = 4
	offKtime   = 8
	offTid     = 16
	offCPU     = 20
	offKLen    = 24
	offULen    = 28
	offLeafRet = 32
	offUnwind  = 40
	offEnd     = 44
	offComm    = 48
	offKstack  = 64
	offUstack  = offKstack + 8*MaxStackDepth
	offOffCPU  = offUstack + 8*MaxStackDepth
	stackRec   = offOffCPU + 8
)

// The decoder reads records by offset; this fails the build if the C struct
// and the offsets above drift apart.
var _ = [1]struct{}{}[unsafe.Sizeof(profilerPsymStackEvent{})-stackRec]

// pollInterval is how often user space drains the ring buffer when the
// kernel has not woken it earlier.
const pollInterval = 250 * time.Millisecond

// Unwinder says how user stacks are walked.
type Unwinder uint32

const (
	// UnwindFramePointers is the kernel's frame-pointer walk only.
	UnwindFramePointers Unwinder = 0
	// UnwindCFI walks with unwind tables built from each file's CFI (.eh_frame), and with
	// frame pointers through files without CFI (Go).
	UnwindCFI Unwinder = 1
	// UnwindLeafOnly marks a CFI-mode sample of a process whose mappings the kernel side
	// did not know yet: its user stack is the sampled address only.
	UnwindLeafOnly Unwinder = 2
)

// UnwindEnd says why a CFI walk ended (enum psym_unwind_end).
type UnwindEnd uint32

// The reasons a CFI walk ends. The first three end a whole stack; the others cut it
// short where a frame could not be unwound.
const (
	EndNone UnwindEnd = iota
	EndOutermost
	EndZero
	EndDepth
	EndNotMapped
	EndNoTable
	EndUnsupported
	EndReadError
	numUnwindEnds
)

var unwindEndNames = [numUnwindEnds]string{"none", "outermost", "zero", "depth", "not_mapped", "no_table", "unsupported_rule", "read_error"}

// String names the reason as the metrics label it.
func (e UnwindEnd) String() string {
	if e < numUnwindEnds {
		return unwindEndNames[e]
	}
	return fmt.Sprintf("end(%d)", uint32(e))
}

// UnwindEnds lists the reasons, for metrics.
func UnwindEnds() []UnwindEnd {
	out := make([]UnwindEnd, 0, numUnwindEnds-1)
	for e := EndOutermost; e < numUnwindEnds; e++ {
		out = append(out, e)
	}
	return out
}

// Options configure the sampler.
type Options struct {
	// FrequencyHz is the sampling frequency per CPU.
	FrequencyHz int
	// Unwinder is UnwindFramePointers or UnwindCFI.
	Unwinder Unwinder
	// UnwindRows, UnwindFiles and UnwindProcs size the CFI unwinder's maps: table rows
	// (16 bytes each), files with a table, and processes (zero: the defaults).
	UnwindRows, UnwindFiles, UnwindProcs uint32
	// Paused leaves the perf events disabled until Start: the caller first fills the
	// unwinder's maps for the processes already running.
	Paused bool
	// PIDs, when not empty, restricts sampling to these processes (tgids).
	PIDs []uint32
	// CgroupIDs, when not empty, restricts sampling to tasks in these
	// cgroup v2 cgroups or their descendants (a cgroup's ID is the inode
	// number of its directory).
	CgroupIDs []uint64
	// OffCPU, when set, also records the stacks of tasks that block, weighted by the time
	// until they run again.
	OffCPU *OffCPUOptions
	// FallBack lets a kernel that refuses the CFI unwinder (or off-CPU profiling) give
	// frame-pointer profiles (or CPU profiles only) instead of an error: Mode and OffCPUOff
	// then say why.
	FallBack bool
}

// OffCPUOptions bound the cost of off-CPU profiling.
type OffCPUOptions struct {
	// Probability is the share of blocking switches whose stack is recorded, in (0, 1].
	Probability float64
	// MinBlocked drops the blockings of tasks that ran again sooner, before their stacks are
	// walked.
	MinBlocked time.Duration
}

// threshold is Probability scaled to the u32 the kernel compares a random number with.
func (o *OffCPUOptions) threshold() uint32 {
	switch {
	case o.Probability >= 1:
		return math.MaxUint32
	case o.Probability <= 0:
		return 0
	}
	return uint32(o.Probability * math.MaxUint32)
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
	// LeafReturn is where the sampled function keeps its return address if it has no
	// frame of its own: the word at the user stack pointer on x86-64, the link register
	// on arm64 (0 if unreadable). Set by the frame-pointer walks only.
	LeafReturn uint64
	// Unwinder is how User was walked; UnwindEnd why a CFI walk ended.
	Unwinder  Unwinder
	UnwindEnd UnwindEnd
	// OffCPU is zero for a CPU sample. For an off-CPU sample it is how long the task was
	// off the CPU; Time is when it blocked and the stacks are where it blocked.
	OffCPU time.Duration
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
	// UnwindEnds counts CFI walks by how they ended; LeafOnly the CFI-mode samples of
	// processes the unwinder did not know yet.
	UnwindEnds [numUnwindEnds]uint64
	LeafOnly   uint64
	// Off-CPU: blocking switches recorded, stacks sent when their task ran again,
	// blockings shorter than the minimum (not unwound), and blockings lost (no task
	// storage, or the ring buffer full).
	OffCPURecorded, OffCPUSent, OffCPUShort, OffCPULost uint64
}

// samplerMaps are the kernel objects both sampling programs share.
type samplerMaps struct {
	OnExec       *ebpf.Program `ebpf:"on_exec"`
	OnExit       *ebpf.Program `ebpf:"on_exit"`
	Events       *ebpf.Map     `ebpf:"events"`
	Counters     *ebpf.Map     `ebpf:"counters"`
	PidFilter    *ebpf.Map     `ebpf:"pid_filter"`
	CgroupFilter *ebpf.Map     `ebpf:"cgroup_filter"`
	UnwindProcs  *ebpf.Map     `ebpf:"unwind_procs"`
}

// Only the chosen sampling program is loaded, so frame-pointer sampling still works on
// kernels older than the CFI unwinder needs.
type fpObjects struct {
	samplerMaps
	Profile *ebpf.Program `ebpf:"profile_cpu"`
}

// fpCompatObjects is the frame-pointer program for kernels without bpf_task_pt_regs.
type fpCompatObjects struct {
	samplerMaps
	Profile *ebpf.Program `ebpf:"profile_cpu_compat"`
}

type cfiObjects struct {
	samplerMaps
	Profile       *ebpf.Program `ebpf:"profile_cpu_cfi"`
	UnwindRows    *ebpf.Map     `ebpf:"unwind_rows"`
	UnwindFiles   *ebpf.Map     `ebpf:"unwind_files"`
	UnwindScratch *ebpf.Map     `ebpf:"unwind_scratch"`
}

// With off-CPU profiling, the sched_switch program of the same unwinder is loaded too.
type fpOffCPUObjects struct {
	fpObjects
	OffCPU *ebpf.Program `ebpf:"off_cpu_switch"`
}

type cfiOffCPUObjects struct {
	cfiObjects
	OffCPU *ebpf.Program `ebpf:"off_cpu_switch_cfi"`
}

// Default sizes of the unwinder's maps: 4 Mi rows (48 MiB of kernel memory) hold the
// tables of a few hundred typical binaries (libc has about 30 Ki rows).
const (
	DefaultUnwindRows  = 4 << 20
	DefaultUnwindFiles = 4096
	DefaultUnwindProcs = 8192
)

// UnwindMaps are the maps user space fills for the CFI unwinder.
type UnwindMaps struct {
	Rows, Files, Procs *ebpf.Map
}

// Sampler owns the loaded programs, the perf events and the ring reader.
type Sampler struct {
	objs    samplerMaps
	profile *ebpf.Program
	unwind  UnwindMaps
	scratch *ebpf.Map
	// offCPUProg is the off-CPU program until it is attached (at Open, or at Start when
	// paused).
	offCPUProg *ebpf.Program
	cfi        bool
	// fellBack is why the CFI unwinder, asked for, did not load; compat why the frame-pointer
	// program is the compatible one; offCPUOff why off-CPU profiling, asked for, is off.
	fellBack, compat, offCPUOff error
	events                      []int
	links                       []link.Link
	reader                      *ringbuf.Reader
	monoOff                     time.Duration // wall clock minus CLOCK_MONOTONIC
	log                         *slog.Logger
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

	if err := CheckKernel(); err != nil {
		return nil, err
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

	if o := opts.OffCPU; o != nil {
		if err := spec.Variables["off_cpu_threshold"].Set(o.threshold()); err != nil {
			return nil, fmt.Errorf("set off-CPU probability: %w", err)
		}
		if err := spec.Variables["off_cpu_min_ns"].Set(uint64(max(o.MinBlocked, 0))); err != nil {
			return nil, fmt.Errorf("set off-CPU minimum: %w", err)
		}
	}

	s := &Sampler{log: log}
	var offCPU *ebpf.Program
	switch opts.Unwinder {
	case UnwindFramePointers:
	case UnwindCFI:
		offCPU, err = s.loadCFI(spec, opts)
		if err != nil {
			if !opts.FallBack || errors.Is(err, ErrPrivileges) {
				return nil, err
			}
			s.fellBack = err
			log.Warn("the kernel refuses the CFI unwinder: user stacks are walked by frame pointers instead, "+
				"and come out short through code built without them (--unwinder=cfi makes this an error)",
				"kernel", kernelRelease(), "reason", err)
		}
	default:
		return nil, fmt.Errorf("unknown unwinder %d", opts.Unwinder)
	}
	if !s.cfi {
		if offCPU, err = s.loadFramePointers(spec, opts); err != nil {
			return nil, err
		}
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
	if offCPU != nil {
		s.offCPUProg = offCPU
		if !opts.Paused {
			if err := s.attachOffCPU(); err != nil {
				return nil, err
			}
		}
	}

	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	for _, cpu := range cpus {
		fd, err := openCPUClock(cpu, opts.FrequencyHz, s.profile.FD(), !opts.Paused)
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
	log.Info("eBPF sampler attached", "cpus", len(cpus), "frequency_hz", opts.FrequencyHz, "cfi_unwinding", s.cfi,
		"pid_filter", len(opts.PIDs), "cgroup_filter", len(opts.CgroupIDs))
	return s, nil
}

// loadCFI loads the CFI unwinder's programs and maps, with its off-CPU program when asked.
func (s *Sampler) loadCFI(spec *ebpf.CollectionSpec, opts Options) (*ebpf.Program, error) {
	if err := CheckCFISupport(); err != nil {
		return nil, err
	}
	sizes := []struct {
		name     string
		n, deflt uint32
	}{{"unwind_rows", opts.UnwindRows, DefaultUnwindRows}, {"unwind_files", opts.UnwindFiles, DefaultUnwindFiles}, {"unwind_procs", opts.UnwindProcs, DefaultUnwindProcs}}
	for _, sz := range sizes {
		if sz.n == 0 {
			sz.n = sz.deflt
		}
		spec.Maps[sz.name].MaxEntries = sz.n
	}
	var objs cfiObjects
	var offCPU *ebpf.Program
	if opts.OffCPU != nil {
		var all cfiOffCPUObjects
		if err := spec.LoadAndAssign(&all, nil); err != nil {
			return nil, privilegeError("load eBPF programs", err)
		}
		objs, offCPU = all.cfiObjects, all.OffCPU
	} else if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, privilegeError("load eBPF programs", err)
	}
	s.objs, s.profile, s.scratch = objs.samplerMaps, objs.Profile, objs.UnwindScratch
	s.unwind = UnwindMaps{Rows: objs.UnwindRows, Files: objs.UnwindFiles, Procs: objs.UnwindProcs}
	s.cfi = true
	return offCPU, nil
}

// loadFramePointers loads the frame-pointer sampling program, and the off-CPU one when asked.
// On a kernel without bpf_get_current_task_btf or bpf_task_pt_regs (5.10) it is the
// compatible program, which reads the user registers from the perf event; there off-CPU
// profiling, which needs task storage (5.11), is left off when opts.FallBack allows, with the
// reason kept, and is an error otherwise.
func (s *Sampler) loadFramePointers(spec *ebpf.CollectionSpec, opts Options) (*ebpf.Program, error) {
	compat := s.compatReason()
	var objs fpObjects
	var offCPU *ebpf.Program
	if opts.OffCPU != nil && compat == nil {
		var all fpOffCPUObjects
		err := spec.LoadAndAssign(&all, nil)
		if err == nil {
			s.objs, s.profile = all.samplerMaps, all.Profile
			return all.OffCPU, nil
		}
		err = privilegeError("load the off-CPU program", err)
		if !opts.FallBack || errors.Is(err, ErrPrivileges) {
			return nil, err
		}
		s.offCPUOff = err
	} else if opts.OffCPU != nil {
		err := fmt.Errorf("off-CPU profiling needs Linux 5.15 or later (task storage, bpf_get_current_task_btf), this kernel is %s: %w", kernelRelease(), compat)
		if !opts.FallBack {
			return nil, err
		}
		s.offCPUOff = err
	}
	if s.offCPUOff != nil {
		s.log.Warn("off-CPU profiling is off: the kernel cannot run it (--unwinder=cfi or frame-pointers makes this an error)", "kernel", kernelRelease(), "reason", s.offCPUOff)
	}
	if compat != nil {
		var c fpCompatObjects
		if err := spec.LoadAndAssign(&c, nil); err != nil {
			return nil, privilegeError("load eBPF programs", err)
		}
		objs = fpObjects(c)
		s.log.Info("this kernel has no bpf_task_pt_regs: the leaf's return address is read only for samples taken in user mode", "kernel", kernelRelease(), "reason", compat)
	} else if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, privilegeError("load eBPF programs", err)
	}
	s.objs, s.profile, s.compat = objs.samplerMaps, objs.Profile, compat
	return offCPU, nil
}

// compatReason says why the frame-pointer program cannot run here (a helper it calls is
// missing), or nil.
func (s *Sampler) compatReason() error {
	missing, err := missingHelper(helper{asm.FnGetCurrentTaskBtf, "bpf_get_current_task_btf"}, helper{asm.FnTaskPtRegs, "bpf_task_pt_regs"})
	if err != nil {
		// A probe that cannot run says nothing: the full program is tried.
		s.log.Debug("probe for the frame-pointer program's helpers", "err", err)
		return nil
	}
	if missing != "" {
		return fmt.Errorf("the kernel has no %s helper", missing)
	}
	return nil
}

func openCPUClock(cpu, freq, progFD int, enable bool) (int, error) {
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
	if enable {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return -1, abandon(fmt.Errorf("enable perf event on CPU %d: %w", cpu, err))
		}
	}
	return fd, nil
}

// attachOffCPU attaches the sched_switch program: from then on, blocking tasks are recorded.
func (s *Sampler) attachOffCPU() error {
	l, err := link.AttachTracing(link.TracingOptions{Program: s.offCPUProg})
	if err != nil {
		return privilegeError("attach the off-CPU program to the sched_switch BTF tracepoint (tp_btf)", err)
	}
	s.links = append(s.links, l)
	s.offCPUProg = nil
	return nil
}

// Start enables sampling of a sampler opened with Options.Paused.
func (s *Sampler) Start() error {
	if s.offCPUProg != nil {
		if err := s.attachOffCPU(); err != nil {
			return err
		}
	}
	for i, fd := range s.events {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("enable perf event %d: %w", i, err)
		}
	}
	return nil
}

// privilegeError wraps err with ErrPrivileges when the kernel refused for
// lack of privileges, naming the capabilities this process lacks.
func privilegeError(what string, err error) error {
	// The verifier refuses a program it cannot prove safe with EACCES too, after it ran:
	// its log says so, which a refusal for privileges (before any verification) has not.
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) && len(ve.Log) > 0 {
		return fmt.Errorf("%s: the kernel's verifier refused it: %w", what, err)
	}
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
	case eventStack, eventOffCPU:
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
		sample.User = decodeStack(sample.User[:0], raw[offUstack:offOffCPU], int32(le.Uint32(raw[offULen:])))
		sample.LeafReturn = le.Uint64(raw[offLeafRet:])
		sample.Unwinder = Unwinder(le.Uint32(raw[offUnwind:]))
		sample.UnwindEnd = UnwindEnd(le.Uint32(raw[offEnd:]))
		sample.OffCPU = 0
		if kind == eventOffCPU {
			// At least a nanosecond: zero means a CPU sample.
			sample.OffCPU = time.Duration(max(le.Uint64(raw[offOffCPU:]), 1))
		}
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

// CFI reports whether user stacks are walked with unwind tables.
func (s *Sampler) CFI() bool { return s.cfi }

// Mode says how user stacks are walked ("cfi", "frame-pointers", or "frame-pointers-compat"
// on kernels without bpf_task_pt_regs) and, when that is not what was asked for, why (nil
// otherwise).
func (s *Sampler) Mode() (string, error) {
	switch {
	case s.cfi:
		return "cfi", nil
	case s.compat != nil:
		return "frame-pointers-compat", s.fellBack
	}
	return "frame-pointers", s.fellBack
}

// OffCPUOff says why off-CPU profiling, asked for, is off (nil when it runs or was not asked).
func (s *Sampler) OffCPUOff() error { return s.offCPUOff }

// Unwind returns the maps of the CFI unwinder (nil maps in frame-pointer mode).
func (s *Sampler) Unwind() UnwindMaps { return s.unwind }

// Counters reads the kernel-side counters.
func (s *Sampler) Counters() (Counters, error) {
	var c Counters
	dsts := map[uint32]*uint64{
		counterSamples: &c.Samples, counterLost: &c.Lost,
		counterFiltered: &c.Filtered, counterProcLost: &c.ProcLost,
		counterLeafOnly:       &c.LeafOnly,
		counterOffCPURecorded: &c.OffCPURecorded, counterOffCPUSent: &c.OffCPUSent,
		counterOffCPUShort: &c.OffCPUShort, counterOffCPULost: &c.OffCPULost,
	}
	for e := range c.UnwindEnds {
		dsts[counterEndBase+uint32(e)] = &c.UnwindEnds[e]
	}
	for idx, dst := range dsts {
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
	for _, c := range []interface{ Close() error }{s.objs.OnExec, s.objs.OnExit, s.objs.Events, s.objs.Counters,
		s.objs.PidFilter, s.objs.CgroupFilter, s.objs.UnwindProcs, s.profile, s.unwind.Rows, s.unwind.Files, s.scratch} {
		if reflect.ValueOf(c).IsNil() {
			continue
		}
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close eBPF object: %w", err))
		}
	}
	return errors.Join(errs...)
}
