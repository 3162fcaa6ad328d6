#!/usr/bin/env bash
# Off-CPU overhead under a context-switch storm: pairs of threads hand a byte back and forth
# through pipes, so every handoff blocks one thread and wakes the other. For each setting the
# collector runs DURATION seconds with the CFI unwinder; the report gives the switch rate, the
# collector process's CPU (utime+stime) and the run time of its eBPF programs inside the kernel
# (kernel.bpf_stats_enabled), as shares of one core, with off-CPU profiling off and on.
# Needs root (eBPF), gcc, bpftool and jq.
#
#   bench/offcpu/run.sh                               # 30 s per setting, 4 thread pairs
#   DURATION=10 PAIRS=2 PROBS="0.01 1" bench/offcpu/run.sh
set -euo pipefail

DURATION=${DURATION:-30}
PAIRS=${PAIRS:-4}
PROBS=${PROBS:-"0.0001 0.01 0.1"}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d)
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	sysctl -qw kernel.bpf_stats_enabled="$STATS_BEFORE" 2>/dev/null || true
	rm -rf "$WORK"
}
STATS_BEFORE=$(sysctl -n kernel.bpf_stats_enabled)
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ]; then
	echo "run as root: the collector loads eBPF programs" >&2
	exit 1
fi
for tool in gcc bpftool jq; do
	command -v "$tool" >/dev/null || { echo "$tool is missing (.ci/install-deps installs it)" >&2; exit 1; }
done

(cd "$ROOT" && go build -o "$WORK/collector" ./services/collector)
cat >"$WORK/storm.c" <<'C'
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
struct pair { int a[2], b[2]; };
static void *ping(void *p) {
	struct pair *x = p; char c = 0;
	for (;;) { if (write(x->a[1], &c, 1) != 1 || read(x->b[0], &c, 1) != 1) abort(); }
}
static void *pong(void *p) {
	struct pair *x = p; char c;
	for (;;) { if (read(x->a[0], &c, 1) != 1 || write(x->b[1], &c, 1) != 1) abort(); }
}
int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 4;
	pthread_t t;
	for (int i = 0; i < n; i++) {
		struct pair *x = malloc(sizeof *x);
		if (pipe(x->a) || pipe(x->b)) abort();
		pthread_create(&t, NULL, ping, x);
		pthread_create(&t, NULL, pong, x);
	}
	pause();
}
C
gcc -O2 -pthread -o "$WORK/storm" "$WORK/storm.c"
"$WORK/storm" "$PAIRS" &
STORM=$!
PIDS+=("$STORM")
sleep 1

TCK=$(getconf CLK_TCK)
PORT=${PORT:-19464}
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ctxt() { awk '/^ctxt/ {print $2}' /proc/stat; }
# The run time of the collector's eBPF programs, summed (nanoseconds).
bpf_ns() { bpftool -j prog show 2>/dev/null | jq '[.[] | select(.name == "profile_cpu_cfi" or .name == "off_cpu_switch_cfi" or .name == "on_exec" or .name == "on_exit") | (.run_time_ns // 0)] | add // 0'; }

sysctl -qw kernel.bpf_stats_enabled=1
printf '%-22s %14s %16s %16s %12s\n' setting switches/s collector_cpu_% bpf_in_kernel_% total_%
run() {
	local label=$1
	shift
	# Only the storm is profiled (--pid): the programs still run on every switch and every
	# CPU-clock tick, and the figures do not depend on what else the machine runs.
	"$WORK/collector" --output-file "$WORK/out.pb" --metrics-addr "127.0.0.1:$PORT" --frequency 19 --pid "$STORM" "$@" >"$WORK/log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	# Ready once the programs are loaded and the running processes' tables built.
	for _ in $(seq 240); do
		curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
		sleep 0.5
	done
	curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null || { echo "collector not ready:" >&2; cat "$WORK/log" >&2; exit 1; }
	sleep 2
	local t0 c0 s0 b0 t1 c1 s1 b1
	t0=$(date +%s.%N) c0=$(cputicks "$pid") s0=$(ctxt) b0=$(bpf_ns)
	sleep "$DURATION"
	t1=$(date +%s.%N) c1=$(cputicks "$pid") s1=$(ctxt) b1=$(bpf_ns)
	local m
	m=$(curl -fsS "http://127.0.0.1:$PORT/metrics" | awk '/^profsym_collector_off_cpu_(recorded|samples|short|lost)_total/ {sub("profsym_collector_off_cpu_", "", $1); sub("_total", "", $1); printf "%s=%s ", $1, $2}')
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	[ -n "$m" ] && echo "    $label: $m" >>"$WORK/counters"
	awk -v l="$label" -v t="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" -v c=$((c1 - c0)) -v s=$((s1 - s0)) -v b=$((b1 - b0)) -v tck="$TCK" 'BEGIN {
		cpu = 100 * c / tck / t; bpf = 100 * b / 1e9 / t
		printf "%-22s %14.0f %16.2f %16.2f %12.2f\n", l, s / t, cpu, bpf, cpu + bpf }'
}
run "off-CPU off"
for p in $PROBS; do
	run "off-CPU on, p=$p" --off-cpu --off-cpu-probability "$p"
done
cat "$WORK/counters" 2>/dev/null || true
echo "machine: $(nproc) CPUs, $(uname -r), $(date -u +%Y-%m-%d)"
