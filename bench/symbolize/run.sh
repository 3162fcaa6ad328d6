#!/usr/bin/env bash
# bench/symbolize: runs profsym's `symbolizer symbolize`, llvm-symbolizer and eu-addr2line
# (elfutils) on the same address files of the same binaries, in the same run, and prints
# tables of ratios.
#
#   cold   wall time to open the binary, build what the tool needs and resolve the first
#          10,000 addresses (one process, addresses on stdin, JSON output to /dev/null)
#   warm   addresses per second once the index exists: the marginal rate between a 10,000-
#          and a $BIG-address batch, (BIG - 10000) / (cpu_BIG - cpu_10k), in process CPU time
#          (user + system), which a shared machine's waiting for a CPU does not inflate. Ours is
#          taken with the index cache filled (--cache-dir), so that the index build, whose
#          time varies by more than the whole warm part on a 150 MB binary, is not in the
#          difference; llvm-symbolizer has no such cache and parses lazily as it goes. Ours
#          takes its big batch at $OURS_BIG addresses: at 200,000 the difference is a tenth
#          of a second against the index load's 0.6 s, and the choice of run on either side
#          moves it by as much; at 1,000,000 the figure still moved by a fifth between runs,
#          at 3,000,000 (1.8 s of difference) by a few percent. The output file is removed
#          before each run: truncating the last run's 1.4 GB would be counted as the next
#          run's system time.
#   rss    peak resident set size of the $BIG batch (/usr/bin/time -f %M); against eu-addr2line,
#          of the cold ($SMALL-address) runs
#   cached cold again, ours with the index cache filled by an earlier run (--cache-dir): what a
#          second `symbolizer symbolize` on the same binary costs. cold and rss of ours are
#          taken with --no-cache.
#
#   fidelity  the share of the $SMALL addresses whose innermost frame (function, file and line)
#          is llvm-symbolizer's, for ours, eu-addr2line (-a -f -i -A -C) and, on Go binaries,
#          `go tool addr2line`, taken from the cold runs' answers (bench/symbolize/agree also
#          counts file:line-only, function-only and whole-inline-chain agreement).
# eu-addr2line's warm rate is taken between $SMALL and $EU_BIG addresses: it answers a few
# thousand addresses per second, where the others answer hundreds of thousands.
#
# Then, when MinIO is there, stripped Go: MinIO stripped of its symbol table and DWARF
# (pclntab only), 20,000 addresses in one process, ours (--no-cache, with inline frames)
# against `go tool addr2line` (built once; functions and lines, no inline frames): wall time,
# CPU time and peak RSS.
#
# Binaries: MinIO (a Go binary over 100 MB with DWARF, from .ci/install-deps), the zstd CLI
# from Debian's source package and a C++ corpus binary (both from testdata/build.sh).
# Each tool runs each measurement $REPEAT times (default 3). Of ours, every figure is the worst of
# its runs; of each reference tool, the best of its runs: every ratio is the least favourable
# pairing of the runs on a shared machine. The warm rates are taken the same way: ours from its
# slowest big batch less its fastest small one, each reference's from its fastest big batch less
# its slowest small one. The load average is printed with the table.
#
# Usage: bench/symbolize/run.sh [BINARY...]    (default: the three above)
# Env:   BIG (default 200000), OURS_BIG (default 3000000), EU_BIG (default 30000), REPEAT
#        (default 3), PROFSYM_TOOLS (where MinIO is), RESULTS (a path: also write the figures
#        there as JSON, for bench/report).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIG=${BIG:-200000}
OURS_BIG=${OURS_BIG:-3000000}
EU_BIG=${EU_BIG:-30000}
REPEAT=${REPEAT:-3}
RESULTS=${RESULTS:-}
SMALL=10000
tools=${PROFSYM_TOOLS:-$HOME/.cache/profsym/bin}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-symbolize.XXXXXX")
trap 'rm -rf "$work"' EXIT

log() { printf 'bench/symbolize: %s\n' "$*" >&2; }

for tool in llvm-symbolizer eu-addr2line /usr/bin/time go jq; do
	command -v "$tool" >/dev/null || { log "missing $tool (apt-get install -y llvm elfutils time jq)"; exit 1; }
done

if (($# > 0)); then
	bins=("$@")
else
	bins=()
	if [[ -x $tools/minio ]]; then
		bins+=("$tools/minio")
	else
		log "MinIO not found at $tools/minio: run .ci/install-deps; benchmarking without it"
	fi
	if [[ ! -x $root/testdata/build/bin/zstd-deb || ! -x $root/testdata/build/bin/cxx-gcc-O2-dw5-pie ]]; then
		log "building the corpus (testdata/build.sh)"
		"$root/testdata/build.sh"
	fi
	bins+=("$root/testdata/build/bin/zstd-deb" "$root/testdata/build/bin/cxx-gcc-O2-dw5-pie")
fi

log "building the symbolizer CLI, the address sampler, the answer comparer and go tool addr2line"
(cd "$root" && go build -o "$work/symbolizer" ./services/symbolizer && go build -o "$work/sample" ./bench/symbolize/sample &&
	go build -o "$work/agree" ./bench/symbolize/agree && go build -o "$work/addr2line" cmd/addr2line)

ours() { "$work/symbolizer" symbolize --obj "$1" --output-style=JSON --no-cache; }
cached() { "$work/symbolizer" symbolize --obj "$1" --output-style=JSON --cache-dir "$work/cache"; }
llvm() { llvm-symbolizer --obj="$1" --output-style=JSON; }
a2l() { "$work/addr2line" "$1"; }
# eu-addr2line exits 1 when an address has no answer ("??"); measure checks that every address
# was answered.
eu() { eu-addr2line -e "$1" -a -f -i -A -C || (($? == 1)); }

# measure TOOL BIN ADDRS [LINES_PER_ADDRESS] [KEEP] -> "best_wall best_rss_kb best_cpu worst_wall
# worst_rss_kb worst_cpu" (each figure on its own, of REPEAT runs); checks that the tool answered
# every address. LINES_PER_ADDRESS "a": one answer per line starting 0x (eu-addr2line -a). KEEP: a
# path to keep the first run's answers at.
measure() {
	local tool=$1 bin=$2 addrs=$3 per=${4:-1} keep=${5:-} i t m u s c lines want runs=
	if [[ $per == a ]]; then want=$(wc -l <"$addrs"); else want=$(($(wc -l <"$addrs") * per)); fi
	for ((i = 0; i < REPEAT; i++)); do
		rm -f "$work/out"
		/usr/bin/time -f '%e %M %U %S' -o "$work/time" bash -c "$(declare -f ours cached llvm a2l eu); work='$work'; $tool '$bin' <'$addrs' >'$work/out'"
		if [[ $per == a ]]; then lines=$(grep -c '^0x' "$work/out" || true); else lines=$(wc -l <"$work/out"); fi
		if [[ -n $keep && $i == 0 ]]; then cp "$work/out" "$keep"; fi
		if ((lines != want)); then
			log "$tool on $(basename "$bin"): $lines answer lines for $want"
			exit 1
		fi
		read -r t m u s <"$work/time"
		runs+="$t $m $(awk "BEGIN{print $u + $s}")"$'\n'
	done
	awk 'NF != 3 { next } !n++ { for (i = 1; i <= 3; i++) { lo[i] = $i; hi[i] = $i } }
		{ for (i = 1; i <= 3; i++) { if ($i < lo[i]) lo[i] = $i; if ($i > hi[i]) hi[i] = $i } }
		END { print lo[1], lo[2], lo[3], hi[1], hi[2], hi[3] }' <<<"$runs"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
measured=$(date -u +%Y-%m-%dT%H:%MZ)
rows=()
eurows=()
json_bins=()
for bin in "${bins[@]}"; do
	name=$(basename "$bin")
	size=$(du -m "$bin" | cut -f1)
	if ! readelf -S -W "$bin" | grep -q -E '\.(z)?debug_info'; then
		log "$name has no DWARF (.debug_info): llvm-symbolizer would answer from symbols only"
	fi
	"$work/sample" -bin "$bin" -n "$SMALL" -seed 1 -o "$work/$name.small"
	"$work/sample" -bin "$bin" -n "$BIG" -seed 2 -o "$work/$name.big"
	"$work/sample" -bin "$bin" -n "$OURS_BIG" -seed 4 -o "$work/$name.oursbig"
	"$work/sample" -bin "$bin" -n "$EU_BIG" -seed 5 -o "$work/$name.eubig"
	isgo=false
	if readelf -S -W "$bin" | grep -q -E '\.gopclntab|\.go\.buildinfo'; then isgo=true; fi
	log "$name (${size} MB): ours"
	read -r _ _ _ os_t os_m _ < <(measure ours "$bin" "$work/$name.small" 1 "$work/$name.ours.ans")
	read -r _ _ _ _ ob_m _ < <(measure ours "$bin" "$work/$name.big")
	cached "$bin" <"$work/$name.small" >/dev/null # fills the cache
	read -r _ _ oc_c oc_t _ _ < <(measure cached "$bin" "$work/$name.small")
	read -r _ _ _ _ _ ocb_c < <(measure cached "$bin" "$work/$name.oursbig")
	log "$name (${size} MB): llvm-symbolizer"
	read -r ls_t _ _ _ _ ls_c < <(measure llvm "$bin" "$work/$name.small" 1 "$work/$name.llvm.ans")
	read -r _ lb_m lb_c _ _ _ < <(measure llvm "$bin" "$work/$name.big")
	log "$name (${size} MB): eu-addr2line"
	read -r es_t es_m _ _ _ es_c < <(measure eu "$bin" "$work/$name.small" a "$work/$name.eu.ans")
	read -r _ _ eb_c _ _ _ < <(measure eu "$bin" "$work/$name.eubig" a)
	fid=("$("$work/agree" -label ours -ref "$work/$name.llvm.ans" -cand "$work/$name.ours.ans" -format llvm-json)"
		"$("$work/agree" -label eu-addr2line -ref "$work/$name.llvm.ans" -cand "$work/$name.eu.ans" -format eu)")
	if $isgo; then
		log "$name (${size} MB): go tool addr2line"
		REPEAT=1 measure a2l "$bin" "$work/$name.small" 2 "$work/$name.a2l.ans" >/dev/null # its answers only
		fid+=("$("$work/agree" -label "go tool addr2line" -ref "$work/$name.llvm.ans" -cand "$work/$name.a2l.ans" -format goa2l)")
	fi
	eurows+=("$(awk -v n="$name" -v small="$SMALL" -v ebig="$EU_BIG" -v est="$es_t" -v esc="$es_c" -v ebc="$eb_c" -v esm="$es_m" -v ost="$os_t" -v osm="$os_m" \
		-v fo="$(jq -r '.innermost / .addresses * 100' <<<"${fid[0]}")" -v fe="$(jq -r '.innermost / .addresses * 100' <<<"${fid[1]}")" \
		-v fa="$(if $isgo; then jq -r '.innermost / .addresses * 100' <<<"${fid[2]}"; else echo -; fi)" 'BEGIN {
		dew = ebc - esc; ew = dew > 0 ? (ebig - small) / dew : 0
		printf "%-22s | %7.2f %7.2f %6.2fx | %10.0f | %7.1f %7.1f %6.2fx | %6.1f%% %6.1f%% %6s\n",
			n, ost, est, (ost > 0 ? est / ost : 0), ew, osm / 1024, esm / 1024, (esm > 0 ? osm / esm : 0), fo, fe, (fa == "-" ? "-" : sprintf("%.1f%%", fa))
	}')")
	if [[ -n $RESULTS ]]; then
		json_bins+=("$(jq -n --arg name "$name" --argjson mb "$size" --argjson go "$isgo" \
			--argjson small "$SMALL" --argjson big "$BIG" --argjson obig "$OURS_BIG" --argjson ebig "$EU_BIG" \
			--argjson ost "$os_t" --argjson osm "$os_m" --argjson oct "$oc_t" --argjson occ "$oc_c" --argjson ocbc "$ocb_c" --argjson obm "$ob_m" \
			--argjson lst "$ls_t" --argjson lsc "$ls_c" --argjson lbc "$lb_c" --argjson lbm "$lb_m" \
			--argjson est "$es_t" --argjson esc "$es_c" --argjson ebc "$eb_c" --argjson esm "$es_m" \
			--argjson fid "$(printf '%s\n' "${fid[@]}" | jq -s .)" '
			def rate(n; c): if c > 0 then n / c else 0 end;
			{name: $name, mb: $mb, go: $go,
			 ours: {cold_s: $ost, cached_s: $oct, warm_rate: rate($obig - $small; $ocbc - $occ), rss_mb: ($obm / 1024), rss_small_mb: ($osm / 1024)},
			 llvm: {cold_s: $lst, warm_rate: rate($big - $small; $lbc - $lsc), rss_mb: ($lbm / 1024)},
			 eu: {cold_s: $est, warm_rate: rate($ebig - $small; $ebc - $esc), rss_small_mb: ($esm / 1024)},
			 fidelity: $fid}')")
	fi
	rows+=("$(awk -v n="$name" -v sz="$size" -v big="$BIG" -v obig="$OURS_BIG" -v small="$SMALL" \
		-v ost="$os_t" -v oct="$oc_t" -v occ="$oc_c" -v ocbc="$ocb_c" -v obm="$ob_m" -v lst="$ls_t" -v lsc="$ls_c" -v lbc="$lb_c" -v lbm="$lb_m" 'BEGIN {
		dow = ocbc - occ; dlw = lbc - lsc
		ow = dow > 0 ? (obig - small) / dow : 0
		lw = dlw > 0 ? (big - small) / dlw : 0
		printf "%-22s %5d | %7.2f %7.2f %6.2fx | %7.2f %6.2fx | %10.0f %10.0f %6.2fx | %7.1f %7.1f %6.2fx\n",
			n, sz, ost, lst, (ost > 0 ? lst / ost : 0), oct, (oct > 0 ? lst / oct : 0), ow, lw, (lw > 0 ? ow / lw : 0),
			obm / 1024, lbm / 1024, (lbm > 0 ? obm / lbm : 0)
	}')")
done

stripped=
if [[ -x $tools/minio ]]; then
	log "stripped MinIO (pclntab only): ours and go tool addr2line"
	strip -o "$work/minio-stripped" "$tools/minio"
	"$work/sample" -bin "$tools/minio" -n 20000 -seed 3 -o "$work/stripped.addrs"
	read -r _ _ _ so_t so_m so_c < <(measure ours "$work/minio-stripped" "$work/stripped.addrs" 1 "$work/stripped.ours.ans")
	read -r sa_t sa_m sa_c _ _ _ < <(measure a2l "$work/minio-stripped" "$work/stripped.addrs" 2 "$work/stripped.a2l.ans")
	if [[ -n $RESULTS ]]; then
		# Fidelity of both on the stripped binary against llvm-symbolizer on the unstripped one.
		llvm "$tools/minio" <"$work/stripped.addrs" >"$work/stripped.llvm.ans"
		sfid=$(printf '%s\n' "$("$work/agree" -label ours -ref "$work/stripped.llvm.ans" -cand "$work/stripped.ours.ans" -format llvm-json)" \
			"$("$work/agree" -label "go tool addr2line" -ref "$work/stripped.llvm.ans" -cand "$work/stripped.a2l.ans" -format goa2l)" | jq -s .)
		stripped_json=$(jq -n --argjson ot "$so_t" --argjson om "$so_m" --argjson oc "$so_c" --argjson at "$sa_t" --argjson am "$sa_m" --argjson ac "$sa_c" --argjson fid "$sfid" \
			'{addresses: 20000, ours: {wall_s: $ot, cpu_s: $oc, rss_mb: ($om / 1024)}, a2l: {wall_s: $at, cpu_s: $ac, rss_mb: ($am / 1024)}, fidelity: $fid}')
	fi
	stripped=$(awk -v ot="$so_t" -v om="$so_m" -v oc="$so_c" -v at="$sa_t" -v am="$sa_m" -v ac="$sa_c" 'BEGIN {
		printf "%-22s | %7.2f %7.2f %6.2fx | %7.2f %7.2f %6.2fx | %7.1f %7.1f %6.2fx\n",
			"minio, stripped", ot, at, (ot > 0 ? at / ot : 0), oc, ac, (oc > 0 ? ac / oc : 0),
			om / 1024, am / 1024, (am > 0 ? om / am : 0)
	}')
fi

printf '\n%-22s %5s | %-23s | %-15s | %-29s | %-23s\n' "" "" "cold, ${SMALL} addrs (s)" "cached (s)" "warm (addresses/CPU s)" "peak RSS, ${BIG} addrs (MB)"
printf '%-22s %5s | %7s %7s %7s | %7s %7s | %10s %10s %7s | %7s %7s %7s\n' binary MB ours llvm "llvm/us" ours "llvm/us" ours llvm "us/llvm" ours llvm "us/llvm"
printf '%s\n' "${rows[@]}"
printf '\ncold ratio > 1: we are faster; warm ratio: our throughput over llvm-symbolizer'"'"'s; RSS ratio <= 1: we use no more memory. Ours: the worst of %d runs, each figure; the references: the best of theirs.\n' "$REPEAT"
if [[ -n $stripped ]]; then
	printf '\n%-22s | %-23s | %-23s | %-23s\n' "20,000 addresses" "wall (s)" "CPU (s)" "peak RSS (MB)"
	printf '%-22s | %7s %7s %7s | %7s %7s %7s | %7s %7s %7s\n' binary ours a2l "a2l/us" ours a2l "a2l/us" ours a2l "us/a2l"
	printf '%s\n' "$stripped"
	printf 'a2l: go tool addr2line (no inline frames); ours with inline frames. Time ratios > 1: we are faster.\n'
fi
printf '\n%-22s | %-23s | %-10s | %-23s | %-22s\n' "" "cold, ${SMALL} addrs (s)" "warm (a/s)" "RSS, ${SMALL} addrs (MB)" "fidelity vs llvm"
printf '%-22s | %7s %7s %7s | %10s | %7s %7s %7s | %7s %7s %6s\n' binary ours eu "eu/us" eu ours eu "us/eu" ours eu a2l
printf '%s\n' "${eurows[@]}"
printf 'eu: eu-addr2line -a -f -i -A -C, warm rate between %d and %d addresses (CPU time); peak RSS of the cold runs.\n' "$SMALL" "$EU_BIG"
printf 'fidelity: share of the %d addresses whose innermost frame (function, file, line) is llvm-symbolizer'"'"'s.\n' "$SMALL"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
printf 'load average: %s before, %s after (%d CPUs)\n' "$load_before" "$load_after" "$(nproc)"
if [[ -n $RESULTS ]]; then
	printf '%s\n' "${json_bins[@]}" | jq -s --argjson small "$SMALL" --argjson big "$BIG" --argjson obig "$OURS_BIG" --argjson ebig "$EU_BIG" \
		--argjson repeat "$REPEAT" --arg lb "$load_before" --arg la "$load_after" --argjson stripped "${stripped_json:-null}" \
		--arg measured "$measured" --arg revision "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || true)" \
		'{small: $small, big: $big, ours_big: $obig, eu_big: $ebig, repeat: $repeat, ours_worst: true, load_before: $lb, load_after: $la,
		  measured: $measured, revision: $revision, binaries: ., stripped: $stripped}' >"$RESULTS"
	log "results written to $RESULTS"
fi
