#!/usr/bin/env bash
# bench/bigdwarf/run.sh: the engine on the biggest C++ debuginfo we make (over 1 GB of DWARF,
# bench/bigdwarf/build.sh), against llvm-symbolizer on the same addresses. Not part of `make
# test` (minutes of CPU); `make bench-report` runs it when the file is built.
#
#   sections  the .debug_* sizes of the file
#   cold      one process, $SMALL addresses on stdin (sampled over the whole text: a random
#             offset in a function picked uniformly from the symbol table), JSON to a file:
#             wall time, CPU time and peak RSS (/usr/bin/time -v) of `symbolizer symbolize
#             --no-cache` (the index built from the DWARF) and of llvm-symbolizer, back to back
#             in each of REPEAT rounds; of each figure, the round where ours compares worst
#   answers   bench/symbolize/agree on the two cold runs' answers: the share of addresses whose
#             innermost frame (function, file, line), function, file:line and whole inline
#             chain are llvm-symbolizer's
#   index     the size of the index ours keeps in its cache directory (--cache-dir)
#   warm      addresses per CPU second with the index cached: (OURS_BIG - SMALL) /
#             (cpu_OURS_BIG - cpu_SMALL), as bench/symbolize takes it
#   service   bench/symbolizer's driver against a real `symbolizer serve` on a loopback port:
#             `symbolizer upload` of the file (sent, verified and stored by the server: wall
#             time and the server's peak RSS), then Symbolize batches of $BATCH addresses:
#             cold (the server builds the index), stored (loads the serialized index), warm
#
# Usage: bench/bigdwarf/run.sh [BINARY]   (default: the file bench/bigdwarf/build.sh makes;
#        built first when missing, about 5 minutes on 2 cores)
# Env:   SMALL (default 10000), OURS_BIG (default 1000000), REPEAT (default 3: rounds of the cold
#        runs, each tens of seconds), BATCH (default 10000), BATCHES (default 5), SERVICE (default true),
#        RESULTS (a path: also write the figures there as JSON, for bench/report).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SMALL=${SMALL:-10000}
OURS_BIG=${OURS_BIG:-1000000}
REPEAT=${REPEAT:-3}
BATCH=${BATCH:-10000}
BATCHES=${BATCHES:-5}
SERVICE=${SERVICE:-true}
RESULTS=${RESULTS:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-bigdwarf.XXXXXX")
trap 'rm -rf "$work"' EXIT

log() { printf 'bench/bigdwarf: %s\n' "$*" >&2; }
for tool in llvm-symbolizer /usr/bin/time go jq size; do
	command -v "$tool" >/dev/null || { log "missing $tool (apt-get install -y llvm time jq binutils)"; exit 1; }
done
if [[ $SERVICE == true ]]; then
	command -v redis-server >/dev/null || { log "missing redis-server (apt-get install -y redis-server)"; exit 1; }
fi

if (($# > 0)); then
	bin=$1
else
	bin=$(bash "$root/bench/bigdwarf/build.sh" | tail -n 1)
fi
[[ -f $bin ]] || { log "$bin: no such file"; exit 1; }
name=$(basename "$bin")

log "building the symbolizer CLI, the address sampler and the answer comparer"
(cd "$root" && go build -o "$work/symbolizer" ./services/symbolizer && go build -o "$work/sample" ./bench/symbolize/sample &&
	go build -o "$work/agree" ./bench/symbolize/agree && go build -o "$work/driver" ./bench/symbolizer/driver)

sections=$(size -A -d "$bin" | awk '$1 ~ /^\.debug_/ { printf "%s%s %d", sep, $1, $2; sep = "\n" }')
dwarf=$(awk '{ s += $2 } END { print s }' <<<"$sections")
filemb=$(du -m "$bin" | cut -f1)
printf '%s (%d MB): DWARF %.1f MB\n' "$name" "$filemb" "$(awk -v d="$dwarf" 'BEGIN { print d / 1e6 }')"
awk '{ printf "  %-20s %10.1f MB\n", $1, $2 / 1e6 }' <<<"$sections"

"$work/sample" -bin "$bin" -n "$SMALL" -seed 1 -o "$work/small"
"$work/sample" -bin "$bin" -n "$OURS_BIG" -seed 4 -o "$work/big"

ours() { "$work/symbolizer" symbolize --obj "$bin" --output-style=JSON --no-cache; }
cached() { "$work/symbolizer" symbolize --obj "$bin" --output-style=JSON --cache-dir "$work/cache"; }
llvm() { llvm-symbolizer --obj="$bin" --output-style=JSON; }

# once TOOL ADDRS [KEEP] -> "wall_s cpu_s peak_rss_kb" of one run, from GNU time -v; checks that
# the tool answered every address.
once() {
	local tool=$1 addrs=$2 keep=${3:-}
	rm -f "$work/out"
	/usr/bin/time -v -o "$work/time" "$tool" <"$addrs" >"$work/out"
	if [[ -n $keep ]]; then cp "$work/out" "$keep"; fi
	if (($(wc -l <"$work/out") != $(wc -l <"$addrs"))); then
		log "$tool: $(wc -l <"$work/out") answers for $(wc -l <"$addrs") addresses"
		exit 1
	fi
	awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); t = 0; for (j = 1; j <= n; j++) t = t * 60 + p[j] }
		/User time/ { u = $2 } /System time/ { s = $2 } /Maximum resident set size/ { m = $2 }
		END { print t, u + s, m }' "$work/time"
}

# measure TOOL ADDRS -> "wall_s cpu_s peak_rss_kb", each the best of REPEAT runs (the warm rate's
# runs: their difference is the figure, and the best is the least disturbed).
measure() {
	local tool=$1 addrs=$2 best_t= best_c= best_m= i t c m
	for ((i = 0; i < REPEAT; i++)); do
		read -r t c m < <(once "$tool" "$addrs")
		if [[ -z $best_t ]] || awk "BEGIN{exit !($t < $best_t)}"; then best_t=$t; fi
		if [[ -z $best_c ]] || awk "BEGIN{exit !($c < $best_c)}"; then best_c=$c; fi
		if [[ -z $best_m ]] || ((m < best_m)); then best_m=$m; fi
	done
	echo "$best_t $best_c $best_m"
}
# Functions run by /usr/bin/time must be programs: export them through bash.
export -f ours cached llvm
export work bin
for f in ours cached llvm; do printf '#!/usr/bin/env bash\n%s\n%s "$@"\n' "$(declare -f $f)" "$f" >"$work/$f"; chmod +x "$work/$f"; done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
measured=$(date -u +%Y-%m-%dT%H:%MZ)
# The cold runs: REPEAT rounds of ours then llvm-symbolizer, back to back, so that each round's
# two runs meet the same load; each round's ratios are taken, and the worst round of each
# figure (wall, CPU, peak RSS) is the one reported (runs.json keeps every round).
: >"$work/runs"
for ((i = 1; i <= REPEAT; i++)); do
	load=$(cut -d' ' -f1-3 /proc/loadavg)
	log "cold round $i of $REPEAT, $SMALL addresses (load average $load): ours (index built from the DWARF, no cache)"
	read -r o_t o_c o_m < <(once "$work/ours" "$work/small" "$([[ $i == 1 ]] && echo "$work/ours.ans")")
	log "cold round $i of $REPEAT: llvm-symbolizer"
	read -r l_t l_c l_m < <(once "$work/llvm" "$work/small" "$([[ $i == 1 ]] && echo "$work/llvm.ans")")
	printf '  round %d: ours %.2f s wall, %.2f s CPU, %.0f MB; llvm-symbolizer %.2f s, %.2f s, %.0f MB\n' \
		"$i" "$o_t" "$o_c" "$((o_m / 1024))" "$l_t" "$l_c" "$((l_m / 1024))" >&2
	jq -nc --arg load "$load" --argjson ot "$o_t" --argjson oc "$o_c" --argjson om "$o_m" --argjson lt "$l_t" --argjson lc "$l_c" --argjson lm "$l_m" \
		'{load: $load, ours: {cold_s: $ot, cold_cpu_s: $oc, rss_mb: ($om / 1024)}, llvm: {cold_s: $lt, cold_cpu_s: $lc, rss_mb: ($lm / 1024)}}' >>"$work/runs"
done
runs=$(jq -s . "$work/runs")
# The worst round of each figure: the least llvm/ours ratio.
worst() { jq -r --arg f "$1" 'min_by(.llvm[$f] / .ours[$f]) | "\(.ours[$f]) \(.llvm[$f])"' <<<"$runs"; }
read -r o_t l_t < <(worst cold_s)
read -r o_c l_c < <(worst cold_cpu_s)
read -r o_m l_m < <(worst rss_mb)
o_m=$(awk -v m="$o_m" 'BEGIN { printf "%d", m * 1024 }')
l_m=$(awk -v m="$l_m" 'BEGIN { printf "%d", m * 1024 }')
agree=$("$work/agree" -label ours -ref "$work/llvm.ans" -cand "$work/ours.ans" -format llvm-json)

log "index size and warm rate (index cached)"
"$work/cached" <"$work/small" >/dev/null # fills the cache
index_bytes=$(du -sb "$work/cache" | cut -f1)
read -r _ cs_c _ < <(measure "$work/cached" "$work/small")
read -r _ cb_c _ < <(measure "$work/cached" "$work/big")
warm=$(awk -v n=$((OURS_BIG - SMALL)) -v d="$(awk "BEGIN{print $cb_c - $cs_c}")" 'BEGIN { print (d > 0 ? n / d : 0) }')

printf '\nthe worst of %d rounds, each figure:\n%-26s %10s %10s %8s\n' "$REPEAT" "" ours llvm-symb "llvm/us"
awk -v ot="$o_t" -v lt="$l_t" -v oc="$o_c" -v lc="$l_c" -v om="$o_m" -v lm="$l_m" -v s="$SMALL" 'BEGIN {
	printf "%-26s %10.2f %10.2f %7.2fx\n", "cold, " s " addrs: wall s", ot, lt, lt / ot
	printf "%-26s %10.2f %10.2f %7.2fx\n", "cold: CPU s", oc, lc, lc / oc
	printf "%-26s %10.0f %10.0f %7.2fx\n", "cold: peak RSS MB", om / 1024, lm / 1024, lm / om
}'
printf 'ratios > 1: ours faster / smaller. Goals, in the worst round: cold wall at most 1.2x llvm-symbolizer'"'"'s (ratio >= 0.83), cold CPU at most its (ratio >= 1), peak RSS at most 0.75x its (ratio >= 1.33).\n'
jq -r '"answers as llvm-symbolizer'"'"'s, of \(.addresses): innermost frame \(.innermost) (\(100 * .innermost / .addresses | . * 100 | round / 100)%), function \(.function), file:line \(.location), whole inline chain \(.chain) (\(100 * .chain / .addresses | . * 100 | round / 100)%)"' <<<"$agree"
printf 'index (ours, cached): %.1f MB; warm: %.0f addresses per CPU second (between %d and %d addresses)\n' \
	"$(awk -v b="$index_bytes" 'BEGIN { print b / 1e6 }')" "$warm" "$SMALL" "$OURS_BIG"

service=null
if [[ $SERVICE == true ]]; then
	log "service: upload, then cold, stored and warm Symbolize batches (bench/symbolizer's driver)"
	mkdir -p "$work/svc"
	"$work/driver" --symbolizer "$work/symbolizer" --binary "$bin" --work "$work/svc" --batch "$BATCH" \
		--batches "$BATCHES" --rounds 1 --cold-runs 1 --phases cold,stored,warm --results "$work/service.json"
	service=$(cat "$work/service.json")
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
printf 'load average: %s before, %s after (%d CPUs)\n' "$load_before" "$load_after" "$(nproc)"

if [[ -n $RESULTS ]]; then
	jq -n --arg name "$name" --argjson filemb "$filemb" --argjson dwarf "$dwarf" \
		--argjson sections "$(awk '{ printf "%s{\"name\":\"%s\",\"bytes\":%d}", sep, $1, $2; sep = "," } BEGIN { printf "[" } END { printf "]" }' <<<"$sections")" \
		--argjson small "$SMALL" --argjson big "$OURS_BIG" --argjson repeat "$REPEAT" \
		--argjson ot "$o_t" --argjson oc "$o_c" --argjson om "$o_m" --argjson lt "$l_t" --argjson lc "$l_c" --argjson lm "$l_m" \
		--argjson agree "$agree" --argjson runs "$runs" --argjson index "$index_bytes" --argjson warm "$warm" --argjson service "$service" \
		--arg lb "$load_before" --arg la "$load_after" --arg measured "$measured" --arg revision "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || true)" --arg recipe "$(cat "$(dirname "$bin")/recipe" 2>/dev/null || true)" \
		'{name: $name, file_mb: $filemb, dwarf_bytes: $dwarf, sections: $sections, recipe: $recipe, small: $small, ours_big: $big, repeat: $repeat,
		  ours: {cold_s: $ot, cold_cpu_s: $oc, rss_mb: ($om / 1024), index_bytes: $index, warm_rate: $warm},
		  llvm: {cold_s: $lt, cold_cpu_s: $lc, rss_mb: ($lm / 1024)},
		  runs: $runs, fidelity: $agree, service: $service, load_before: $lb, load_after: $la, measured: $measured, revision: $revision}' >"$RESULTS"
	log "results written to $RESULTS"
fi
