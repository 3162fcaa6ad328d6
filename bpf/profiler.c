// SPDX-License-Identifier: GPL-2.0
//
// profsym node collector: CPU-clock sampling of kernel and user stacks.
//
// One perf_event program runs on every sample of a per-CPU software CPU-clock
// event. It streams each sample through a ring buffer instead of aggregating
// in kernel maps: at 19-99 Hz per CPU the stream is a few hundred records a
// second, user space sees a new process at its first sample (so it can read
// /proc/<pid>/maps before a short-lived process is gone), every sample keeps
// its own timestamp, and there is no stack-trace map whose hash collisions
// silently replace stacks.
//
// With off-CPU profiling on, a BTF tracepoint on sched_switch records the stacks of a
// sampled share of the tasks that block, in the blocking task's own context, and when such a
// task runs again sends them, weighted by the time it was off the CPU.
//
// Two raw tracepoints tell user space when a process execs (its mappings are
// stale) or exits (its cached knowledge can be dropped after the next report).
// User space reads the ring every quarter second; the kernel wakes it sooner
// only when the ring fills up, so sampling costs no wakeup per sample.
//
// The program is built once per architecture (bpf2go -target amd64,arm64, which defines
// __TARGET_ARCH_x86 or __TARGET_ARCH_arm64): only the user registers, the return-address
// rules and the signal frame's layout differ, in the arch section below.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define MAX_STACK_DEPTH 127
#define TASK_COMM_LEN 16
#define MAX_CGROUP_LEVELS 16
// User space drains the ring on a timer; the kernel only wakes it early when
// this much data waits, so a quiet ring costs no wakeup per sample.
#define WAKEUP_BYTES (256 * 1024)
// Executable mappings of one process the CFI unwinder knows (a process with more keeps
// its first ones by address; user space counts the rest).
#define MAX_PROC_MAPS 256
// Binary search bounds: 2^9 > MAX_PROC_MAPS mappings, 2^25 rows > any table's size.
#define MAP_SEARCH_STEPS 9
#define ROW_SEARCH_STEPS 25

#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))
#define WRITE_ONCE(x, v) (*(volatile typeof(x) *)&(x) = (v))

char LICENSE[] SEC("license") = "GPL";

// The struct is not called "sample": vmlinux.h already has a kernel type of
// that name.
struct psym_stack_event {
	__u32 kind; // PSYM_EVENT_STACK
	__u32 tgid;
	__u64 ktime_ns;
	__u32 tid;
	__u32 cpu;
	__s32 kstack_len; // bytes written by bpf_get_stack, or a negative errno
	__s32 ustack_len;
	// Where the return address into the caller is when the sampled user function has no
	// frame of its own (a frameless leaf, a function's first instruction, a libc syscall
	// wrapper), which the frame-pointer walk skips: the word at the user stack pointer on
	// x86-64, the link register (x30) on arm64. User space decides whether it is one.
	__u64 leaf_ret;
	__u32 unwinder;   // PSYM_UNWINDER_*: how ustack was walked
	__u32 unwind_end; // PSYM_END_*: why the CFI walk stopped
	__u8 comm[TASK_COMM_LEN];
	__u64 kstack[MAX_STACK_DEPTH];
	__u64 ustack[MAX_STACK_DEPTH];
	// PSYM_EVENT_OFF_CPU: nanoseconds from the switch-out (ktime_ns) to the switch-in.
	__u64 off_cpu_ns;
};

// Samples and process notifications share one ring buffer so that user space
// sees an exec before the samples taken after it.
enum psym_event_kind {
	PSYM_EVENT_STACK = 1,
	PSYM_EVENT_EXEC = 2,
	PSYM_EVENT_EXIT = 3,
	PSYM_EVENT_OFF_CPU = 4, // a struct psym_stack_event of a task that blocked
};

// How a stack record's user frames were found.
enum psym_unwinder {
	PSYM_UNWINDER_FP = 0,   // the kernel's frame-pointer walk (bpf_get_stack)
	PSYM_UNWINDER_CFI = 1,  // the CFI unwinder below, frame pointers for files without CFI
	PSYM_UNWINDER_LEAF = 2, // the process's mappings are not known yet: the leaf only
};

// Why the CFI walk ended. The first three are clean ends; the others are stacks cut short
// where a frame could not be unwound, rather than a guessed frame.
enum psym_unwind_end {
	PSYM_END_NONE = 0,
	PSYM_END_OUTERMOST = 1, // return address undefined in the CFI (_start, thread start)
	PSYM_END_ZERO = 2,      // a zero return address or frame pointer: the stack's bottom
	PSYM_END_DEPTH = 3,     // MAX_STACK_DEPTH frames
	PSYM_END_NOT_MAPPED = 4,// an address in no known executable mapping
	PSYM_END_NO_TABLE = 5,  // a mapping without a table (not built, evicted), or an address no CFI row covers and the frame pointer unknown
	PSYM_END_UNSUPPORTED = 6, // a CFI rule the table cannot express (DWARF expression)
	PSYM_END_READ_ERROR = 7,  // the stack could not be read
	PSYM_END_MAX = 8,
};

// One row of an unwind table: from pc (relative to the file's base) up to the next row,
// how to find the canonical frame address, the caller's frame pointer (RBP, x29) and the
// return address.
struct psym_row {
	__u32 pc;
	__s32 cfa_offset;
	__u8 cfa_rule; // PSYM_CFA_*
	__u8 fp_rule;  // PSYM_FP_*
	__u8 ra_rule;  // PSYM_RA_*
	__u8 pad;
	__s16 fp_offset;
	__s16 ra_offset;
};

enum psym_cfa_rule {
	PSYM_CFA_UNDEFINED = 0, // no CFI here
	PSYM_CFA_SP = 1,        // CFA = SP + cfa_offset
	PSYM_CFA_FP = 2,        // CFA = FP (RBP, x29) + cfa_offset
	PSYM_CFA_PLT = 3,       // x86-64 PLT: CFA = RSP + 8 + ((RIP & 15) >= cfa_offset ? 8 : 0)
	PSYM_CFA_UNSUPPORTED = 4,
	PSYM_CFA_OUTERMOST = 5,
	PSYM_CFA_SIGNAL = 6,    // a signal trampoline: the interrupted registers are in the signal frame at SP
};

enum psym_ra_rule {
	PSYM_RA_OFFSET = 0, // saved at CFA + ra_offset
	PSYM_RA_LINK = 1,   // still in the link register (arm64 leaves and prologues)
};

enum psym_fp_rule {
	PSYM_FP_SAME = 0,    // the frame pointer unchanged in this frame
	PSYM_FP_OFFSET = 1,  // saved at CFA + fp_offset
	PSYM_FP_UNKNOWN = 2, // saved in a way the table cannot express
};

// A file's table: rows [row_start, row_start + row_count) of the rows array. gen changes
// whenever the slot is given to another file, so a process entry naming an older
// generation finds no table instead of another file's rows.
struct psym_file {
	__u64 base;
	__u32 row_start;
	__u32 row_count;
	__u32 gen;
	__u32 pad;
};

enum psym_map_kind {
	PSYM_MAP_NONE = 0, // no table (not built yet, or the file's CFI is unreadable): stop
	PSYM_MAP_CFI = 1,  // unwind with the file's table
	PSYM_MAP_FP = 2,   // frame pointers: Go, files without CFI, anonymous executable memory (JIT code)
};

struct psym_map {
	__u64 start;
	__u64 end;
	__u64 bias; // process address minus ELF virtual address
	__u32 file; // index into files
	__u32 gen;  // the file slot's generation this entry was written for
	__u32 kind; // PSYM_MAP_*
	__u32 pad;
};

// What the unwinder knows of one process. start_stack tells one image of the process
// from the next: an entry written for the image before an exec is never applied to the
// image after it (on_exec also deletes it, but user space may write it back late).
struct psym_proc {
	__u64 start_stack;
	__u32 count;
	__u32 pad;
	struct psym_map maps[MAX_PROC_MAPS];
};

struct psym_proc_event {
	__u32 kind; // PSYM_EVENT_EXEC or PSYM_EVENT_EXIT
	__u32 tgid;
};

// Indices into the counters array.
enum psym_counter {
	PSYM_COUNTER_SAMPLES = 0,
	PSYM_COUNTER_LOST = 1,         // ring buffer full
	PSYM_COUNTER_FILTERED = 2,     // dropped by the pid/cgroup filters
	PSYM_COUNTER_PROC_LOST = 3,    // exec/exit notification lost (ring full)
	// Stacks walked with CFI, by how the walk ended (PSYM_END_*).
	PSYM_COUNTER_END_BASE = 4,
	// Stacks whose process the unwinder did not know: the leaf only.
	PSYM_COUNTER_LEAF_ONLY = PSYM_COUNTER_END_BASE + PSYM_END_MAX,
	// Off-CPU: blocking switch-outs whose stacks were recorded, stacks sent when their
	// task ran again, blockings shorter than the minimum, and those lost (no task storage
	// could be had, or the ring buffer was full).
	PSYM_COUNTER_OFF_CPU_RECORDED,
	PSYM_COUNTER_OFF_CPU_SENT,
	PSYM_COUNTER_OFF_CPU_SHORT,
	PSYM_COUNTER_OFF_CPU_LOST,
	PSYM_COUNTER_MAX,
};

// Set by the loader before the program is loaded.
volatile const __u32 filter_pids = 0;
volatile const __u32 filter_cgroups = 0;
// Off-CPU: a switch-out is recorded when a random u32 is at most off_cpu_threshold (the
// sampling probability scaled to 2^32-1), and sent when the task was off the CPU for at
// least off_cpu_min_ns.
volatile const __u32 off_cpu_threshold = 0;
volatile const __u64 off_cpu_min_ns = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PSYM_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} pid_filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} cgroup_filter SEC(".maps");

// The unwind tables. Sizes are set by the loader from the collector's flags.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 20);
	__type(key, __u32);
	__type(value, struct psym_row);
} unwind_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct psym_file);
} unwind_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct psym_proc);
} unwind_procs SEC(".maps");

// ---- What differs between architectures: the user registers, how a return address is
// read, and where the kernel's signal frame keeps the interrupted registers.
#if defined(__TARGET_ARCH_x86)

// The word at the stack pointer holds the return address of a function without a frame.
#define LEAF_RET_IN_LINK 0
// A frame record sits right below the caller's stack pointer (push rbp after the call): a
// frame-pointer step knows the caller's SP exactly.
#define FP_STEP_SP_EXACT 1

static __always_inline void user_regs(struct task_struct *task, __u64 *pc, __u64 *sp, __u64 *fp,
				      __u64 *lr)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	*pc = BPF_CORE_READ(regs, ip);
	*sp = BPF_CORE_READ(regs, sp);
	*fp = BPF_CORE_READ(regs, bp);
	*lr = 0;
}

static __always_inline __u64 code_addr(__u64 ra)
{
	return ra;
}

// The registers a perf event interrupted, from the program's context (uapi struct pt_regs:
// r15 ... ip, cs, flags, sp, ss), and whether they are user mode's (the privilege level in
// cs). Kernels before 5.15 have no bpf_task_pt_regs to find the user registers otherwise.
static __always_inline bool ctx_user_regs(struct bpf_perf_event_data *ctx, __u64 *sp, __u64 *lr)
{
	__u64 *r = (__u64 *)ctx;
	*sp = r[19];
	*lr = 0;
	return (r[17] & 3) == 3;
}

// After a signal handler returns into the trampoline (glibc's __restore_rt) the stack
// pointer is at the ucontext of the kernel's rt_sigframe; its sigcontext starts 40 bytes in
// (r8-r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip: the uapi layout).
#define SIGFRAME_FP 120
#define SIGFRAME_SP 160
#define SIGFRAME_PC 168

#elif defined(__TARGET_ARCH_arm64)

// A function without a frame record returns through the link register, x30.
#define LEAF_RET_IN_LINK 1
// A frame record may sit anywhere in its frame (Go's sits at the bottom): a frame-pointer
// step does not know the caller's SP.
#define FP_STEP_SP_EXACT 0

// The uapi user_pt_regs at the start of arm64's struct pt_regs. vmlinux.h is generated
// from an x86-64 kernel; the flavour suffix makes CO-RE match the running kernel's
// user_pt_regs by name.
struct user_pt_regs___psym {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
} __attribute__((preserve_access_index));

static __always_inline void user_regs(struct task_struct *task, __u64 *pc, __u64 *sp, __u64 *fp,
				      __u64 *lr)
{
	struct user_pt_regs___psym *regs = (struct user_pt_regs___psym *)bpf_task_pt_regs(task);
	*pc = BPF_CORE_READ(regs, pc);
	*sp = BPF_CORE_READ(regs, sp);
	*fp = BPF_CORE_READ(regs, regs[29]);
	*lr = BPF_CORE_READ(regs, regs[30]);
}

// Return addresses signed by pointer authentication (-mbranch-protection=pac-ret, as Debian
// and Ubuntu build) carry the signature in the bits above the virtual address. User code
// lies below 2^48 (48-bit VAs, and 52-bit kernels map above it only on request), so the
// mask strips any signature and no signed value is ever followed raw.
#define USER_ADDR_MASK ((1ULL << 48) - 1)

static __always_inline __u64 code_addr(__u64 ra)
{
	return ra & USER_ADDR_MASK;
}

// The registers a perf event interrupted, from the program's context (uapi user_pt_regs:
// regs[31], sp, pc, pstate), and whether they are user mode's (EL0 in pstate's mode bits).
// Kernels before 5.15 have no bpf_task_pt_regs to find the user registers otherwise.
static __always_inline bool ctx_user_regs(struct bpf_perf_event_data *ctx, __u64 *sp, __u64 *lr)
{
	__u64 *r = (__u64 *)ctx;
	*sp = r[31];
	*lr = r[30];
	return (r[33] & 0xf) == 0;
}

// At the vDSO's __kernel_rt_sigreturn the stack pointer is at the kernel's rt_sigframe: a
// 128-byte siginfo, then the ucontext, whose sigcontext starts 176 bytes in (uapi layout:
// fault_address, regs[31], sp, pc).
#define SIGFRAME_MCTX (128 + 176)
#define SIGFRAME_FP (SIGFRAME_MCTX + 8 + 29 * 8)
#define SIGFRAME_LR (SIGFRAME_MCTX + 8 + 30 * 8)
#define SIGFRAME_SP (SIGFRAME_MCTX + 8 + 31 * 8)
#define SIGFRAME_PC (SIGFRAME_MCTX + 8 + 32 * 8)

#else
#error "the profiler is built for x86-64 (__TARGET_ARCH_x86) or arm64 (__TARGET_ARCH_arm64)"
#endif

// Off-CPU: the stacks of each sampled blocked task, kept with the task (freed when it runs
// again or exits), so the check at every switch-in is a pointer in the task and the memory
// is held only for tasks that are blocked.
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct psym_stack_event);
} off_cpu_pending SEC(".maps");

// The CFI walk's per-CPU working state: the record being built (too large for the BPF
// stack) and the registers of the frame being unwound.
struct psym_unwind_scratch {
	__u64 pc;
	__u64 sp;
	__u64 fp;
	__u64 lr;
	__u32 n;
	__u32 end;
	__u8 fp_known; // fp holds the frame's frame pointer
	__u8 lr_known; // lr holds the frame's link register (arm64: the first frame, or after a signal frame)
	__u8 exact_pc; // pc is where the frame was interrupted (after a signal frame), not a return address
	__u8 sp_exact; // sp is the frame's stack pointer, not an estimate from its frame record
	__u8 pad[4];
	// A binary search's bounds. They live in map memory, which the verifier does not track,
	// rather than in registers: there, each step's two outcomes left different bounds that
	// the verifier had to follow separately (the index into the mappings needs exact bounds),
	// and the searches' paths multiplied.
	__u32 lo;
	__u32 hi;
	struct psym_stack_event event;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct psym_unwind_scratch);
} unwind_scratch SEC(".maps");

// bpf2go -type needs the types in BTF.
const struct psym_row *unused_row __attribute__((unused));
const struct psym_file *unused_file __attribute__((unused));
const struct psym_proc *unused_proc __attribute__((unused));
const struct psym_stack_event *unused_stack_event __attribute__((unused));
const struct psym_proc_event *unused_proc_event __attribute__((unused));

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

static __always_inline bool wanted(__u32 tgid)
{
	if (filter_pids && !bpf_map_lookup_elem(&pid_filter, &tgid))
		return false;
	if (filter_cgroups) {
		__u64 id = bpf_get_current_cgroup_id();
		if (bpf_map_lookup_elem(&cgroup_filter, &id))
			return true;
		// A filter on a pod's or a service's cgroup also catches the
		// processes of its child cgroups.
		for (int level = 1; level < MAX_CGROUP_LEVELS; level++) {
			id = bpf_get_current_ancestor_cgroup_id(level);
			if (id == 0)
				break;
			if (bpf_map_lookup_elem(&cgroup_filter, &id))
				return true;
		}
		return false;
	}
	return true;
}

static __always_inline __u64 wakeup_flag(void)
{
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

// sampled reports whether the current task's sample is wanted: not the idle task (a CPU
// with nothing to run is not a profile sample), and within the pid and cgroup filters.
static __always_inline bool sampled(__u32 tgid)
{
	if (tgid == 0)
		return false;
	if (!wanted(tgid)) {
		count(PSYM_COUNTER_FILTERED);
		return false;
	}
	return true;
}

// fill_header writes what every stack record carries besides its user stack.
static __always_inline void fill_header(void *ctx, struct psym_stack_event *e,
					__u64 id, __u32 unwinder)
{
	e->kind = PSYM_EVENT_STACK;
	e->tgid = id >> 32;
	e->ktime_ns = bpf_ktime_get_ns();
	e->tid = (__u32)id;
	e->cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->kstack_len = bpf_get_stack(ctx, e->kstack, sizeof(e->kstack), 0);
	e->leaf_ret = 0;
	e->unwinder = unwinder;
	e->unwind_end = PSYM_END_NONE;
	e->off_cpu_ns = 0;
}

// leaf_ret returns where a function without a frame keeps its return address: the word
// at sp (x86-64) or the link register (arm64); 0 when unreadable.
static __always_inline __u64 leaf_ret(__u64 sp, __u64 lr)
{
#if LEAF_RET_IN_LINK
	return code_addr(lr);
#else
	__u64 w;
	if (bpf_probe_read_user(&w, sizeof(w), (void *)sp) < 0)
		return 0;
	return w;
#endif
}

// fp_user_stack records the current task's user stack as the kernel's frame-pointer walk
// finds it, with the leaf's return-address candidate.
static __always_inline void fp_user_stack(void *ctx, struct psym_stack_event *e)
{
	e->ustack_len = bpf_get_stack(ctx, e->ustack, sizeof(e->ustack), BPF_F_USER_STACK);
	if (e->ustack_len > 0) {
		// The user registers, also when the sample interrupted the kernel.
		__u64 pc, sp, fp, lr;
		user_regs(bpf_get_current_task_btf(), &pc, &sp, &fp, &lr);
		e->leaf_ret = leaf_ret(sp, lr);
	}
}

// profile_fp records one sample with the kernel's frame-pointer walk of the user stack. With
// compat (a constant: each program keeps only its branch) the user registers come from the
// perf event, for kernels without bpf_get_current_task_btf (5.11) and bpf_task_pt_regs (5.15):
// the leaf's return-address candidate then only when the sample interrupted user mode.
static __always_inline int profile_fp(struct bpf_perf_event_data *ctx, bool compat)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!sampled(id >> 32))
		return 0;

	struct psym_stack_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(PSYM_COUNTER_LOST);
		return 0;
	}
	fill_header(ctx, e, id, PSYM_UNWINDER_FP);
	if (compat) {
		e->ustack_len = bpf_get_stack(ctx, e->ustack, sizeof(e->ustack), BPF_F_USER_STACK);
		__u64 sp, lr;
		if (e->ustack_len > 0 && ctx_user_regs(ctx, &sp, &lr))
			e->leaf_ret = leaf_ret(sp, lr);
	} else {
		fp_user_stack(ctx, e);
	}
	bpf_ringbuf_submit(e, wakeup_flag());
	count(PSYM_COUNTER_SAMPLES);
	return 0;
}

SEC("perf_event")
int profile_cpu(struct bpf_perf_event_data *ctx)
{
	return profile_fp(ctx, false);
}

// The same sampling for kernels such as 5.10 (see profile_fp).
SEC("perf_event")
int profile_cpu_compat(struct bpf_perf_event_data *ctx)
{
	return profile_fp(ctx, true);
}

// The frame-pointer step: the frame's caller is found through the chain of frame records
// (saved frame pointer, return address) that RBP or x29 points to. For Go (which keeps frame
// pointers) and for files without CFI.
static __always_inline long fp_step(struct psym_unwind_scratch *s)
{
	__u64 frame[2]; // saved frame pointer, return address
	if (!s->fp_known || s->fp == 0) {
		s->end = PSYM_END_ZERO;
		return 1;
	}
	if (bpf_probe_read_user(frame, sizeof(frame), (void *)s->fp) < 0) {
		s->end = PSYM_END_READ_ERROR;
		return 1;
	}
	s->sp = s->fp + 16;
	s->sp_exact = FP_STEP_SP_EXACT;
	s->fp = frame[0];
	s->pc = code_addr(frame[1]);
	s->lr_known = 0;
	s->exact_pc = 0;
	if (s->pc == 0) {
		s->end = PSYM_END_ZERO;
		return 1;
	}
	return 0;
}

// signal_step restores the registers a signal interrupted from the kernel's signal frame at
// SP: the next frame is the interrupted one, at its exact pc, with its link register. Only
// where SP is known exactly: read at a wrong place, the frame would be garbage.
static __always_inline long signal_step(struct psym_unwind_scratch *s)
{
	if (!s->sp_exact) {
		s->end = PSYM_END_UNSUPPORTED;
		return 1;
	}
	__u64 sp = s->sp;
	__u64 pc, fp, nsp;
	if (bpf_probe_read_user(&pc, sizeof(pc), (void *)(sp + SIGFRAME_PC)) < 0 ||
	    bpf_probe_read_user(&nsp, sizeof(nsp), (void *)(sp + SIGFRAME_SP)) < 0 ||
	    bpf_probe_read_user(&fp, sizeof(fp), (void *)(sp + SIGFRAME_FP)) < 0) {
		s->end = PSYM_END_READ_ERROR;
		return 1;
	}
	s->lr_known = 0;
#ifdef SIGFRAME_LR
	if (bpf_probe_read_user(&s->lr, sizeof(s->lr), (void *)(sp + SIGFRAME_LR)) == 0)
		s->lr_known = 1;
#endif
	s->pc = code_addr(pc);
	s->sp = nsp;
	s->fp = fp;
	s->fp_known = 1;
	s->sp_exact = 1;
	s->exact_pc = 1;
	if (s->pc == 0) {
		s->end = PSYM_END_ZERO;
		return 1;
	}
	return 0;
}

// fp_frame walks a frame by frame pointers. A frameless leaf (Go makes small leaves
// frameless) leaves the frame pointer at its caller's frame, so the walk skips the caller;
// its return address is then at SP or in the link register, and user space checks that it
// is one before use.
static __always_inline long fp_frame(struct psym_unwind_scratch *s, __u32 n)
{
	if (n == 0)
		s->event.leaf_ret = leaf_ret(s->sp, s->lr_known ? s->lr : 0);
	return fp_step(s);
}

// uncovered handles a frame in a file whose CFI has no row for it: code without CFI inside
// a file that has some, such as V8's builtins embedded in the node binary, which keep frame
// pointers and sit between JIT-compiled code and the runtime's C++. Such a frame is walked by
// frame pointers where the frame pointer is known, and ends the walk otherwise.
static __always_inline long uncovered(struct psym_unwind_scratch *s, __u32 n)
{
	if (!s->fp_known) {
		s->end = PSYM_END_NO_TABLE;
		return 1;
	}
	return fp_frame(s, n);
}

// One frame of the CFI walk: record the frame's address, find its mapping and table row,
// and restore the caller's registers. Returns 1 to stop.
static long unwind_step(__u64 index, void *ctx)
{
	__u32 zero = 0;
	struct psym_unwind_scratch *s = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!s)
		return 1;
	__u32 n = s->n;
	if (n >= MAX_STACK_DEPTH) {
		s->end = PSYM_END_DEPTH;
		return 1;
	}
	__u64 pc = s->pc;
	// User space reads every frame but the first as a return address and looks up the
	// byte before it; a frame a signal interrupted is recorded one byte on, so that this
	// lookup finds the interrupted instruction itself.
	bool ret_addr = n > 0 && !s->exact_pc;
	s->event.ustack[n] = pc + (n > 0 && s->exact_pc ? 1 : 0);
	s->n = n + 1;
	if (n + 1 >= MAX_STACK_DEPTH) {
		s->end = PSYM_END_DEPTH;
		return 1;
	}

	__u32 tgid = s->event.tgid;
	struct psym_proc *proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (!proc) {
		s->end = PSYM_END_NOT_MAPPED;
		return 1;
	}
	// The last mapping starting at or below pc.
	__u32 count = proc->count;
	WRITE_ONCE(s->lo, 0);
	WRITE_ONCE(s->hi, count > MAX_PROC_MAPS ? MAX_PROC_MAPS : count);
	for (int i = 0; i < MAP_SEARCH_STEPS; i++) {
		__u32 lo = READ_ONCE(s->lo), hi = READ_ONCE(s->hi);
		if (lo >= hi)
			break;
		__u32 mid = (lo + hi) / 2;
		if (mid >= MAX_PROC_MAPS)
			return 1;
		if (proc->maps[mid].start <= pc)
			WRITE_ONCE(s->lo, mid + 1);
		else
			WRITE_ONCE(s->hi, mid);
	}
	// The index below lo; lo == 0 wraps to a value past the end. One unsigned bound is
	// what every verifier follows (6.1's does not learn lo != 0 from a test of lo == 0).
	__u32 idx = READ_ONCE(s->lo) - 1;
	if (idx >= MAX_PROC_MAPS) {
		s->end = PSYM_END_NOT_MAPPED;
		return 1;
	}
	struct psym_map *m = &proc->maps[idx];
	if (pc >= m->end) {
		s->end = PSYM_END_NOT_MAPPED;
		return 1;
	}
	if (m->kind == PSYM_MAP_FP)
		return fp_frame(s, n);
	if (m->kind != PSYM_MAP_CFI) {
		s->end = PSYM_END_NO_TABLE;
		return 1;
	}
	__u32 slot = m->file;
	struct psym_file *f = bpf_map_lookup_elem(&unwind_files, &slot);
	if (!f || f->gen != m->gen || f->row_count == 0) {
		s->end = PSYM_END_NO_TABLE;
		return 1;
	}
	// A return address points after its call, which may be the first byte of the next
	// function (a call to a function that does not return): look up the call itself.
	__u64 vaddr = pc - m->bias - (ret_addr ? 1 : 0);
	__u64 rel = vaddr - f->base;
	if (vaddr < f->base || rel > 0xffffffffULL)
		return uncovered(s, n);
	// The last row starting at or below rel.
	__u32 start = f->row_start;
	WRITE_ONCE(s->lo, 0);
	WRITE_ONCE(s->hi, f->row_count);
	for (int i = 0; i < ROW_SEARCH_STEPS; i++) {
		__u32 rlo = READ_ONCE(s->lo), rhi = READ_ONCE(s->hi);
		if (rlo >= rhi)
			break;
		__u32 mid = (rlo + rhi) / 2;
		__u32 key = start + mid;
		struct psym_row *r = bpf_map_lookup_elem(&unwind_rows, &key);
		if (!r) {
			s->end = PSYM_END_NO_TABLE;
			return 1;
		}
		if (r->pc <= (__u32)rel)
			WRITE_ONCE(s->lo, mid + 1);
		else
			WRITE_ONCE(s->hi, mid);
	}
	__u32 rlo = READ_ONCE(s->lo);
	if (rlo == 0)
		return uncovered(s, n);
	__u32 key = start + rlo - 1;
	struct psym_row *r = bpf_map_lookup_elem(&unwind_rows, &key);
	if (!r) {
		s->end = PSYM_END_NO_TABLE;
		return 1;
	}

	__u64 cfa;
	switch (r->cfa_rule) {
	case PSYM_CFA_SP:
		cfa = s->sp + (__s64)r->cfa_offset;
		break;
	case PSYM_CFA_FP:
		if (!s->fp_known) {
			s->end = PSYM_END_UNSUPPORTED;
			return 1;
		}
		cfa = s->fp + (__s64)r->cfa_offset;
		break;
	case PSYM_CFA_PLT:
		cfa = s->sp + 8 + (((pc & 15) >= (__u64)r->cfa_offset) ? 8 : 0);
		break;
	case PSYM_CFA_SIGNAL:
		return signal_step(s);
	case PSYM_CFA_OUTERMOST:
		s->end = PSYM_END_OUTERMOST;
		return 1;
	case PSYM_CFA_UNDEFINED:
		return uncovered(s, n);
	default:
		s->end = PSYM_END_UNSUPPORTED;
		return 1;
	}
	__u64 ra;
	if (r->ra_rule == PSYM_RA_LINK) {
		// Only where the link register is known: in the first frame or one a signal
		// interrupted. Anywhere else the function has called out since, so the register
		// no longer holds its own return address.
		if (!s->lr_known) {
			s->end = PSYM_END_UNSUPPORTED;
			return 1;
		}
		ra = s->lr;
	} else if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa + (__s64)r->ra_offset)) < 0) {
		s->end = PSYM_END_READ_ERROR;
		return 1;
	}
	if (r->fp_rule == PSYM_FP_OFFSET) {
		if (bpf_probe_read_user(&s->fp, sizeof(s->fp), (void *)(cfa + (__s64)r->fp_offset)) < 0) {
			s->end = PSYM_END_READ_ERROR;
			return 1;
		}
		s->fp_known = 1;
	} else if (r->fp_rule != PSYM_FP_SAME) {
		s->fp_known = 0;
	}
	s->sp = cfa;
	s->sp_exact = 1;
	s->pc = code_addr(ra);
	s->lr_known = 0;
	s->exact_pc = 0;
	if (s->pc == 0) {
		s->end = PSYM_END_ZERO;
		return 1;
	}
	return 0;
}

// cfi_user_stack walks the current task's user stack with the CFI unwinder into s->event.
static __always_inline void cfi_user_stack(struct psym_unwind_scratch *s, __u32 tgid)
{
	struct psym_stack_event *e = &s->event;
	e->ustack_len = 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct mm_struct *mm = task->mm;
	if (!mm)
		return;
	// The user registers, also when the sample interrupted the kernel.
	__u64 pc, sp, fp, lr;
	user_regs(task, &pc, &sp, &fp, &lr);
	s->pc = pc;
	s->sp = sp;
	s->fp = fp;
	s->lr = code_addr(lr);
	s->fp_known = 1;
	s->lr_known = LEAF_RET_IN_LINK;
	s->exact_pc = 0;
	s->sp_exact = 1;
	s->n = 0;
	s->end = PSYM_END_NONE;
	struct psym_proc *proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (proc && proc->start_stack == BPF_CORE_READ(mm, start_stack)) {
		bpf_loop(MAX_STACK_DEPTH, unwind_step, NULL, 0);
		e->unwind_end = s->end;
		__u32 idx = PSYM_COUNTER_END_BASE + (s->end < PSYM_END_MAX ? s->end : 0);
		count(idx);
	} else {
		// Not known yet (user space learns of a process from its first samples), or
		// known for the image before an exec: the leaf is certain, the rest is not.
		s->event.ustack[0] = s->pc;
		s->n = 1;
		e->unwinder = PSYM_UNWINDER_LEAF;
		count(PSYM_COUNTER_LEAF_ONLY);
	}
	__u32 n = s->n;
	if (n > MAX_STACK_DEPTH)
		n = MAX_STACK_DEPTH;
	e->ustack_len = n * 8;
}

// The same sampling as profile_cpu, with user stacks walked by the CFI unwinder.
SEC("perf_event")
int profile_cpu_cfi(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!sampled(tgid))
		return 0;
	__u32 zero = 0;
	struct psym_unwind_scratch *s = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!s)
		return 0;
	struct psym_stack_event *e = &s->event;
	fill_header(ctx, e, id, PSYM_UNWINDER_CFI);
	cfi_user_stack(s, tgid);
	if (bpf_ringbuf_output(&events, e, sizeof(*e), wakeup_flag()) < 0) {
		count(PSYM_COUNTER_LOST);
		return 0;
	}
	count(PSYM_COUNTER_SAMPLES);
	return 0;
}

// Kernels before 5.14 call the task's state "state".
struct task_struct___pre_5_14 {
	long state;
} __attribute__((preserve_access_index));

#define TASK_RUNNING 0
#define TASK_DEAD 0x80

// off_cpu_wanted reports whether the switch-out of prev, the current task, is recorded: one
// within the sampling probability (tested first: it rejects most switches at the cost of a
// random number), of a user task that blocks (not one preempted while runnable, nor one
// exiting), within the filters.
static __always_inline bool off_cpu_wanted(struct task_struct *prev, __u32 tgid)
{
	if (off_cpu_threshold != 0xffffffff && bpf_get_prandom_u32() > off_cpu_threshold)
		return false;
	if (tgid == 0 || !prev->mm)
		return false;
	long state;
	if (bpf_core_field_exists(prev->__state))
		state = prev->__state;
	else
		state = BPF_CORE_READ((struct task_struct___pre_5_14 *)prev, state);
	if (state == TASK_RUNNING || (state & TASK_DEAD))
		return false;
	return wanted(tgid);
}

// off_cpu_in sends the stacks recorded when next blocked, now that it runs again, weighted
// by the time it was off the CPU, if that was long enough.
static __always_inline void off_cpu_in(struct task_struct *next)
{
	struct psym_stack_event *e = bpf_task_storage_get(&off_cpu_pending, next, 0, 0);
	if (!e)
		return;
	__u64 off = bpf_ktime_get_ns() - e->ktime_ns;
	if (off < off_cpu_min_ns) {
		count(PSYM_COUNTER_OFF_CPU_SHORT);
	} else {
		e->kind = PSYM_EVENT_OFF_CPU;
		e->off_cpu_ns = off;
		if (bpf_ringbuf_output(&events, e, sizeof(*e), wakeup_flag()) < 0)
			count(PSYM_COUNTER_OFF_CPU_LOST);
		else
			count(PSYM_COUNTER_OFF_CPU_SENT);
	}
	bpf_task_storage_delete(&off_cpu_pending, next);
}

// off_cpu_keep files the stacks of prev, which blocks, with the task until it runs again.
static __always_inline void off_cpu_keep(struct task_struct *prev, struct psym_stack_event *e)
{
	if (!bpf_task_storage_get(&off_cpu_pending, prev, e, BPF_LOCAL_STORAGE_GET_F_CREATE))
		count(PSYM_COUNTER_OFF_CPU_LOST);
	else
		count(PSYM_COUNTER_OFF_CPU_RECORDED);
}

// Off-CPU with user stacks by frame pointers. Every context switch runs this: for the task
// that gets the CPU, a check of its task storage; for the task that blocks, when sampled, a
// walk of its stacks. sched_switch runs as prev, so the helpers about the current task (its
// stacks, comm and cgroup) describe the task that blocks.
SEC("tp_btf/sched_switch")
int BPF_PROG(off_cpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	off_cpu_in(next);
	__u64 id = bpf_get_current_pid_tgid();
	if (!off_cpu_wanted(prev, id >> 32))
		return 0;
	__u32 zero = 0;
	struct psym_unwind_scratch *s = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!s)
		return 0;
	fill_header(ctx, &s->event, id, PSYM_UNWINDER_FP);
	fp_user_stack(ctx, &s->event);
	off_cpu_keep(prev, &s->event);
	return 0;
}

// Off-CPU with user stacks walked by the CFI unwinder.
SEC("tp_btf/sched_switch")
int BPF_PROG(off_cpu_switch_cfi, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	off_cpu_in(next);
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!off_cpu_wanted(prev, tgid))
		return 0;
	__u32 zero = 0;
	struct psym_unwind_scratch *s = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!s)
		return 0;
	fill_header(ctx, &s->event, id, PSYM_UNWINDER_CFI);
	cfi_user_stack(s, tgid);
	off_cpu_keep(prev, &s->event);
	return 0;
}

static __always_inline void proc_notify(__u32 kind)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct psym_proc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(PSYM_COUNTER_PROC_LOST);
		return;
	}
	e->kind = kind;
	e->tgid = tgid;
	bpf_ringbuf_submit(e, wakeup_flag());
}

SEC("raw_tp/sched_process_exec")
int on_exec(void *ctx)
{
	// The unwinder's knowledge of the old image no longer applies.
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	bpf_map_delete_elem(&unwind_procs, &tgid);
	proc_notify(PSYM_EVENT_EXEC);
	return 0;
}

SEC("raw_tp/sched_process_exit")
int on_exit(void *ctx)
{
	// sched_process_exit fires for every thread; only the group leader's
	// exit ends the process.
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)id != (__u32)(id >> 32))
		return 0;
	__u32 tgid = (__u32)(id >> 32);
	bpf_map_delete_elem(&unwind_procs, &tgid);
	proc_notify(PSYM_EVENT_EXIT);
	return 0;
}
