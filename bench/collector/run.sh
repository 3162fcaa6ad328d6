#!/usr/bin/env bash
# Collector overhead benchmark: the collector's own CPU (share of one core, from utime+stime
# in /proc/<pid>/stat) and peak RSS (VmHWM) while every CPU runs a busy workload, for
# DURATION seconds at each sampling frequency. Needs root (eBPF), gcc and Go.
#
#   bench/collector/run.sh                 # 60 s at 19 Hz and at 99 Hz
#   DURATION=20 FREQS="19" bench/collector/run.sh
set -euo pipefail

DURATION=${DURATION:-60}
FREQS=${FREQS:-"19 99"}
WARMUP=${WARMUP:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d)
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ]; then
	echo "run as root: the collector loads eBPF programs" >&2
	exit 1
fi

(cd "$ROOT" && go build -o "$WORK/collector" ./services/collector)

# The busy workload: a frame-pointer C program with a call chain, one per CPU.
cat >"$WORK/busy.c" <<'C'
static volatile unsigned long sink;
__attribute__((noinline)) unsigned long leaf(unsigned long x) {
	for (int i = 0; i < 100000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}
__attribute__((noinline)) unsigned long middle(unsigned long x) { unsigned long r = leaf(x); return r ^ x; }
int main(void) { for (unsigned long i = 0;; i++) sink += middle(i); }
C
gcc -O1 -g -fno-omit-frame-pointer -o "$WORK/busy" "$WORK/busy.c"

CPUS=$(nproc)
TCK=$(getconf CLK_TCK)
for _ in $(seq "$CPUS"); do
	"$WORK/busy" &
	PIDS+=($!)
done

cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
metric() { curl -fsS "http://127.0.0.1:$1/metrics" 2>/dev/null | awk -v m="$2" '$1 == m {printf "%d", $2}'; }

declare -A CPU RSS SAMPLES REQS BYTES
PORT=19464
for f in $FREQS; do
	"$WORK/collector" --frequency "$f" --interval 10s --output-file "$WORK/out-$f.pb" \
		--metrics-addr "127.0.0.1:$PORT" --log-level warn &
	cpid=$!
	PIDS+=("$cpid")
	sleep "$WARMUP"
	t0=$(cputicks "$cpid")
	s0=$(metric "$PORT" profsym_collector_samples_total)
	sleep "$DURATION"
	t1=$(cputicks "$cpid")
	s1=$(metric "$PORT" profsym_collector_samples_total)
	CPU[$f]=$(awk -v a="$t0" -v b="$t1" -v t="$TCK" -v d="$DURATION" 'BEGIN {printf "%.2f", 100 * (b - a) / t / d}')
	RSS[$f]=$(awk -v k="$(hwm_kb "$cpid")" 'BEGIN {printf "%.1f", k / 1024}')
	SAMPLES[$f]=$(awk -v a="${s0:-0}" -v b="${s1:-0}" 'BEGIN {printf "%d", b - a}')
	REQS[$f]=$(metric "$PORT" profsym_collector_profiles_requests_total)
	BYTES[$f]=$(metric "$PORT" profsym_collector_profiles_request_bytes_total)
	kill -INT "$cpid"
	wait "$cpid" || true
	PORT=$((PORT + 1))
done

echo
echo "collector overhead: $CPUS CPUs busy, ${DURATION}s per run, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-8s %12s %14s %10s %10s %14s\n" "freq" "cpu (%core)" "peak RSS (MB)" "samples" "requests" "request bytes"
for f in $FREQS; do
	printf "%-8s %12s %14s %10s %10s %14s\n" "${f} Hz" "${CPU[$f]}" "${RSS[$f]}" "${SAMPLES[$f]}" "${REQS[$f]}" "${BYTES[$f]}"
done
echo "targets at 19 Hz: < 1% of one core, < 50 MB RSS"
