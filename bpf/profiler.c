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
// Two raw tracepoints tell user space when a process execs (its mappings are
// stale) or exits (its cached knowledge can be dropped after the next report).
// User space reads the ring every quarter second; the kernel wakes it sooner
// only when the ring fills up, so sampling costs no wakeup per sample.

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
	// The word at the user stack pointer. When the sampled user function has no frame
	// of its own (a frameless leaf, a function's first instruction, a libc syscall
	// wrapper) it is the return address into the caller, which the frame-pointer walk
	// skips; user space decides whether it is one.
	__u64 user_sp_word;
	__u8 comm[TASK_COMM_LEN];
	__u64 kstack[MAX_STACK_DEPTH];
	__u64 ustack[MAX_STACK_DEPTH];
};

// Samples and process notifications share one ring buffer so that user space
// sees an exec before the samples taken after it.
enum psym_event_kind {
	PSYM_EVENT_STACK = 1,
	PSYM_EVENT_EXEC = 2,
	PSYM_EVENT_EXIT = 3,
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
	PSYM_COUNTER_MAX = 4,
};

// Set by the loader before the program is loaded.
volatile const __u32 filter_pids = 0;
volatile const __u32 filter_cgroups = 0;

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

// bpf2go -type needs the types in BTF.
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

SEC("perf_event")
int profile_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 tid = (__u32)id;

	// The idle task: a CPU with nothing to run is not a profile sample.
	if (tgid == 0)
		return 0;
	if (!wanted(tgid)) {
		count(PSYM_COUNTER_FILTERED);
		return 0;
	}

	struct psym_stack_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(PSYM_COUNTER_LOST);
		return 0;
	}
	e->kind = PSYM_EVENT_STACK;
	e->tgid = tgid;
	e->ktime_ns = bpf_ktime_get_ns();
	e->tid = tid;
	e->cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->kstack_len = bpf_get_stack(ctx, e->kstack, sizeof(e->kstack), 0);
	e->ustack_len = bpf_get_stack(ctx, e->ustack, sizeof(e->ustack), BPF_F_USER_STACK);
	e->user_sp_word = 0;
	if (e->ustack_len > 0) {
		// The user registers, also when the sample interrupted the kernel.
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		__u64 sp = BPF_CORE_READ(regs, sp);
		if (bpf_probe_read_user(&e->user_sp_word, sizeof(e->user_sp_word), (void *)sp) < 0)
			e->user_sp_word = 0;
	}
	bpf_ringbuf_submit(e, wakeup_flag());
	count(PSYM_COUNTER_SAMPLES);
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
	proc_notify(PSYM_EVENT_EXIT);
	return 0;
}
