#!/usr/bin/env bash
# bench/report/run.sh (`make bench-report`): runs the bench/ scripts with RESULTS set, in one
# run, with settings that keep the whole under half an hour on a 2-core machine, then
# bench/report, which writes docs/benchmarks.md, its plots (docs/benchmarks/*.svg) and keeps the
# scripts' results (docs/benchmarks/results/*.json), so that the page can be drawn again from
# them with `go run ./bench/report -results docs/benchmarks/results`.
#
# Needs what the scripts need: root (the collector loads eBPF programs), MinIO and the packages
# of .ci/install-deps (llvm, elfutils, redis-server, jq, gcc), and the corpus (testdata/build.sh,
# built when missing).
#
# Env: the scripts' own knobs, set here to the values below unless given: REPEAT, BIG,
#      OURS_BIG, EU_BIG (bench/symbolize); BATCHES, ROUNDS, COLD_RUNS (bench/symbolizer);
#      N, DURATION_GATEWAY, CONCURRENCY (bench/gateway); DURATION_COLLECTOR, FREQS, BINARIES
#      (bench/collector); BIGDWARF_DIR (bench/bigdwarf/build.sh's), BIGDWARF_REPEAT (bench/bigdwarf's REPEAT). PAGE (default docs/benchmarks.md), PLOTS (default docs/benchmarks).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
PAGE=${PAGE:-docs/benchmarks.md}
PLOTS=${PLOTS:-docs/benchmarks}
export REPEAT=${REPEAT:-2} BIG=${BIG:-100000} OURS_BIG=${OURS_BIG:-1000000} EU_BIG=${EU_BIG:-20000}
export BATCHES=${BATCHES:-20} ROUNDS=${ROUNDS:-3} COLD_RUNS=${COLD_RUNS:-2}
N=${N:-500}
DURATION_GATEWAY=${DURATION_GATEWAY:-10s}
CONCURRENCY=${CONCURRENCY:-8}
DURATION_COLLECTOR=${DURATION_COLLECTOR:-30}
FREQS=${FREQS:-"19 99"}
BINARIES=${BINARIES:-20}
# The big files' cold rounds (bench/bigdwarf): the worst of three is what their goals hold.
BIGDWARF_REPEAT=${BIGDWARF_REPEAT:-3}

log() { printf 'bench/report: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
	log "run as root: bench/collector loads eBPF programs"
	exit 1
fi
for tool in jq go llvm-symbolizer eu-addr2line redis-server gcc /usr/bin/time; do
	command -v "$tool" >/dev/null || { log "missing $tool: run .ci/install-deps"; exit 1; }
done

results=$(mktemp -d "${TMPDIR:-/tmp}/bench-report.XXXXXX")
trap 'rm -rf "$results"' EXIT
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
revision=$(git rev-parse --short HEAD 2>/dev/null || true)
t0=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

log "bench/symbolize (REPEAT=$REPEAT BIG=$BIG OURS_BIG=$OURS_BIG EU_BIG=$EU_BIG)"
RESULTS=$results/symbolize.json bash bench/symbolize/run.sh
log "bench/symbolizer (BATCHES=$BATCHES ROUNDS=$ROUNDS COLD_RUNS=$COLD_RUNS)"
RESULTS=$results/symbolizer.json bash bench/symbolizer/run.sh
log "bench/gateway (N=$N DURATION=$DURATION_GATEWAY CONCURRENCY=$CONCURRENCY)"
RESULTS=$results/gateway.json OLD_REF=none N=$N DURATION=$DURATION_GATEWAY CONCURRENCY=$CONCURRENCY bash bench/gateway/run.sh
log "bench/collector (DURATION=$DURATION_COLLECTOR FREQS=$FREQS BINARIES=$BINARIES)"
RESULTS=$results/collector.json DURATION=$DURATION_COLLECTOR FREQS=$FREQS BINARIES=$BINARIES UNWINDERS="cfi frame-pointers" \
	bash bench/collector/run.sh
# The biggest debuginfo (bench/bigdwarf): measured when bench/bigdwarf/build.sh has built it
# (about 5 minutes on 2 cores; not built here), its section on the page says how otherwise.
bigdwarf=${BIGDWARF_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/profsym/bigdwarf}/bigdwarf
if [[ -x $bigdwarf ]]; then
	log "bench/bigdwarf ($bigdwarf)"
	RESULTS=$results/bigdwarf.json REPEAT=$BIGDWARF_REPEAT bash bench/bigdwarf/run.sh "$bigdwarf"
else
	log "bench/bigdwarf: $bigdwarf not built (bash bench/bigdwarf/build.sh builds it); its section says so"
fi

# The kernel's debug image: measured when e2e/kernels/fetch-kernel-debug.sh has fetched it
# (860 MB; not fetched here), its section on the page says how otherwise.
vmlinux=$(compgen -G "${XDG_CACHE_HOME:-$HOME/.cache}/profsym/kernel-debug/amd64-6.1/files/usr/lib/debug/boot/vmlinux-*" | head -n 1 || true)
if [[ -n $vmlinux ]]; then
	log "bench/bigdwarf on the kernel's debug image ($vmlinux)"
	RESULTS=$results/kernel.json REPEAT=$BIGDWARF_REPEAT bash bench/bigdwarf/run.sh "$vmlinux"
else
	log "bench/bigdwarf on vmlinux: not fetched (e2e/kernels/fetch-kernel-debug.sh amd64-6.1 fetches it); its section says so"
fi

elapsed=$(($(date +%s) - t0))
settings="bench/symbolize REPEAT=$REPEAT BIG=$BIG OURS_BIG=$OURS_BIG EU_BIG=$EU_BIG; bench/symbolizer BATCHES=$BATCHES ROUNDS=$ROUNDS COLD_RUNS=$COLD_RUNS; bench/gateway N=$N DURATION=$DURATION_GATEWAY CONCURRENCY=$CONCURRENCY OLD_REF=none; bench/collector DURATION=$DURATION_COLLECTOR FREQS=\"$FREQS\" BINARIES=$BINARIES"
jq -n --arg started "$started" --argjson elapsed "$elapsed" \
	--arg cpu "$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)" --argjson cores "$(nproc)" \
	--argjson mem "$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)" --arg kernel "$(uname -r)" \
	--arg go "$(go version | cut -d' ' -f3)" --arg ls "$load_start" --arg le "$(cut -d' ' -f1-3 /proc/loadavg)" \
	--arg settings "$settings" --arg rev "$revision" \
	'{started: $started, elapsed_s: $elapsed, cpu_model: $cpu, cores: $cores, mem_kib: $mem, kernel: $kernel, go: $go,
	  load_start: $ls, load_end: $le, command: "make bench-report", settings: $settings, revision: $rev}' >"$results/run.json"

rm -rf "$PLOTS"
mkdir -p "$PLOTS/results"
cp "$results"/*.json "$PLOTS/results/"
go run ./bench/report -results "$PLOTS/results" -page "$PAGE" -plots "$PLOTS"
log "wrote $PAGE and $PLOTS/ in $((elapsed / 60)) min $((elapsed % 60)) s of benches"
