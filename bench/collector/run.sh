#!/usr/bin/env bash
# Collector overhead benchmark: the collector's own CPU (share of one core, from utime+stime
# in /proc/<pid>/stat) and peak RSS (VmHWM) while every CPU is busy and BINARIES processes of
# distinct binaries run (unwind-table memory grows with binaries), for DURATION seconds at
# each sampling frequency, with CFI unwinding on and off in the same run. Also reports what
# the unwinder holds: tables, rows, the kernel memory of the row array, and the table build
# rate per MB of .eh_frame. Needs root (eBPF), gcc and Go.
#
#   bench/collector/run.sh                 # 60 s at 19 Hz and at 99 Hz, cfi and frame-pointers
#   DURATION=20 FREQS="19" UNWINDERS=cfi bench/collector/run.sh
#   RESULTS=collector.json bench/collector/run.sh   # also the figures as JSON (for bench/report)
set -euo pipefail

DURATION=${DURATION:-60}
FREQS=${FREQS:-"19 99"}
UNWINDERS=${UNWINDERS:-"cfi frame-pointers"}
BINARIES=${BINARIES:-20}
WARMUP=${WARMUP:-5}
RESULTS=${RESULTS:-}
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

# The workload: BINARIES programs, each a distinct binary (its own build ID and table) with a
# call chain built without frame pointers; they share the CPUs, so every CPU is busy.
cat >"$WORK/busy.c" <<'C'
static volatile unsigned long sink;
#define N __attribute__((noinline))
N unsigned long leaf(unsigned long x) {
	for (int i = 0; i < 100000; i++) x = x * 6364136223846793005UL + VARIANT;
	return x;
}
N unsigned long f2(unsigned long x) { return leaf(x) ^ (x + 2); }
N unsigned long f1(unsigned long x) { return f2(x) ^ (x + 1); }
int main(void) { for (unsigned long i = 0;; i++) sink += f1(i); }
C
for i in $(seq "$BINARIES"); do
	gcc -O2 -g -DVARIANT="${i}UL" -o "$WORK/busy-$i" "$WORK/busy.c"
	"$WORK/busy-$i" &
	PIDS+=($!)
done

TCK=$(getconf CLK_TCK)
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
metric() { curl -fsS "http://127.0.0.1:$1/metrics" 2>/dev/null | awk -v m="$2" '$1 == m {printf "%.6f", $2}'; }
sum_metric() { curl -fsS "http://127.0.0.1:$1/metrics" 2>/dev/null | awk -v m="$2" 'index($1, m) == 1 {s += $2} END {printf "%.6f", s}'; }

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A CPU RSS SAMPLES TABLES ROWS MAPMB RATE WHOLE
PORT=19464
for u in $UNWINDERS; do
	for f in $FREQS; do
		k="$u/$f"
		"$WORK/collector" --frequency "$f" --interval 10s --unwinder "$u" --output-file "$WORK/out.pb" \
			--metrics-addr "127.0.0.1:$PORT" --log-level warn &
		cpid=$!
		PIDS+=("$cpid")
		sleep "$WARMUP"
		t0=$(cputicks "$cpid")
		s0=$(metric "$PORT" profsym_collector_samples_total)
		sleep "$DURATION"
		t1=$(cputicks "$cpid")
		s1=$(metric "$PORT" profsym_collector_samples_total)
		CPU[$k]=$(awk -v a="$t0" -v b="$t1" -v t="$TCK" -v d="$DURATION" 'BEGIN {printf "%.2f", 100 * (b - a) / t / d}')
		RSS[$k]=$(awk -v k="$(hwm_kb "$cpid")" 'BEGIN {printf "%.1f", k / 1024}')
		SAMPLES[$k]=$(awk -v a="${s0:-0}" -v b="${s1:-0}" 'BEGIN {printf "%d", b - a}')
		TABLES[$k]=$(awk -v v="$(metric "$PORT" profsym_collector_unwind_tables_loaded)" 'BEGIN {printf "%d", v}')
		ROWS[$k]=$(awk -v v="$(metric "$PORT" profsym_collector_unwind_table_rows)" 'BEGIN {printf "%d", v}')
		MAPMB[$k]=$(awk -v b="$(metric "$PORT" profsym_collector_unwind_table_capacity_bytes)" 'BEGIN {printf "%.1f", b / 1048576}')
		RATE[$k]=$(awk -v by="$(metric "$PORT" profsym_collector_unwind_cfi_bytes_total)" -v s="$(metric "$PORT" profsym_collector_unwind_table_build_seconds_total)" \
			'BEGIN {if (s > 0) printf "%.0f", by / 1048576 / s; else print "-"}')
		whole=$(sum_metric "$PORT" 'profsym_collector_unwind_stacks_total{end="outermost"}')
		whole=$(awk -v a="$whole" -v b="$(sum_metric "$PORT" 'profsym_collector_unwind_stacks_total{end="zero"}')" 'BEGIN {print a + b}')
		all=$(sum_metric "$PORT" profsym_collector_unwind_stacks_total)
		WHOLE[$k]=$(awk -v w="$whole" -v a="$all" 'BEGIN {if (a > 0) printf "%.1f", 100 * w / a; else print "-"}')
		kill -INT "$cpid"
		wait "$cpid" || true
		PORT=$((PORT + 1))
	done
done

echo
echo "collector overhead: $(nproc) CPUs busy with $BINARIES distinct binaries, ${DURATION}s per run, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-22s %11s %14s %9s %7s %9s %13s %15s %13s\n" "unwinder/freq" "cpu (%core)" "peak RSS (MB)" "samples" "tables" "rows" "row map (MB)" "build (MB/s)" "whole (%)"
for u in $UNWINDERS; do
	for f in $FREQS; do
		k="$u/$f"
		printf "%-22s %11s %14s %9s %7s %9s %13s %15s %13s\n" "$u ${f} Hz" "${CPU[$k]}" "${RSS[$k]}" "${SAMPLES[$k]}" \
			"${TABLES[$k]:-0}" "${ROWS[$k]:-0}" "${MAPMB[$k]:-0}" "${RATE[$k]:--}" "${WHOLE[$k]:--}"
	done
done
echo "targets at 19 Hz with cfi: at most 0.5% of one core and 50 MB RSS (userspace; the row map is kernel memory, reported apart)"
echo "whole: CFI walks that ended at the stack's bottom (outermost or zero), of all CFI walks"
if [ -n "$RESULTS" ]; then
	for u in $UNWINDERS; do
		for f in $FREQS; do
			k="$u/$f"
			jq -n --arg u "$u" --argjson f "$f" --argjson cpu "${CPU[$k]}" --argjson rss "${RSS[$k]}" --argjson samples "${SAMPLES[$k]}" \
				--argjson tables "${TABLES[$k]:-0}" --argjson rows "${ROWS[$k]:-0}" --argjson map "${MAPMB[$k]:-0}" \
				--arg whole "${WHOLE[$k]:--}" \
				'{unwinder: $u, hz: $f, cpu_pct_core: $cpu, rss_mb: $rss, samples: $samples, tables: $tables, rows: $rows,
				  row_map_mb: $map, whole_pct: (if $whole == "-" then null else ($whole | tonumber) end)}'
		done
	done | jq -s --argjson d "$DURATION" --argjson b "$BINARIES" --argjson cpus "$(nproc)" --arg lb "$LOAD_BEFORE" --arg la "$(cut -d' ' -f1-3 /proc/loadavg)" \
		'{duration_s: $d, binaries: $b, cpus: $cpus, load_before: $lb, load_after: $la, runs: .}' >"$RESULTS"
	echo "results written to $RESULTS" >&2
fi
