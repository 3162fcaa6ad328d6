#!/usr/bin/env bash
# bench/demangle: the demangler against GNU c++filt and llvm-cxxfilt 14 on every mangled name
# (_Z and _R, .symtab and .dynsym) of the ELF files of a few dozen Debian packages
# (packages.txt), then its speed over the same names. README.md says what it fetches and how
# long it takes.
#
# Usage: bash bench/demangle/run.sh
# Env: DEMANGLE_CACHE (where the packages are downloaded and unpacked, reused by later runs;
#      default ~/.cache/profsym/demangle), OUT (where the per-class name lists go; default
#      $DEMANGLE_CACHE/classes), BENCHTIME (names the benchmark demangles, default 700000x: each name about once).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${DEMANGLE_CACHE:-$HOME/.cache/profsym/demangle}
out=${OUT:-$cache/classes}
for tool in apt-get dpkg-deb c++filt go; do
	command -v "$tool" >/dev/null || { echo "bench/demangle: $tool missing" >&2; exit 1; }
done
command -v llvm-cxxfilt-14 >/dev/null || command -v llvm-cxxfilt >/dev/null ||
	{ echo "bench/demangle: llvm-cxxfilt 14 missing (apt-get install -y llvm-14)" >&2; exit 1; }

start=$(date +%s)
bash "$root/bench/demangle/fetch.sh" "$cache"
fetched=$(date +%s)
echo "packages: $(ls "$cache/debs" | wc -l) .deb files, $(du -sh "$cache/debs" | cut -f1) downloaded, $(du -sh "$cache/root" | cut -f1) unpacked ($((fetched - start)) s)"

rm -rf "$out" && mkdir -p "$out"
cd "$root"
DEMANGLE_TREE=$cache/root DEMANGLE_NAMES=$cache/names.txt DEMANGLE_DIFFS=$out \
	go test -count=1 -timeout 90m -run '^TestDistribution$' -v ./pkg/debuginfo/demangle |
	grep -v -e '^=== RUN' -e '^PASS$'
compared=$(date +%s)
echo "differential: $((compared - fetched)) s; the names of each class: $out"

DEMANGLE_NAMES=$cache/names.txt go test -count=1 -run '^$' -bench '^BenchmarkNameDistribution$' -benchmem -benchtime "${BENCHTIME:-700000x}" \
	./pkg/debuginfo/demangle | grep -E '^Benchmark'
# The median name's cost (every 68th name, each measured on its own).
DEMANGLE_NAMES=$cache/names.txt go test -count=1 -run '^$' -bench '^BenchmarkNameMedian$' -benchtime 1x \
	./pkg/debuginfo/demangle | grep -E '^Benchmark'
echo "total: $(($(date +%s) - start)) s"
