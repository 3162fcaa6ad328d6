#!/usr/bin/env bash
# Builds testdata/src/cxx20.cc (C++20: concepts, requires clauses, template lambdas, abbreviated
# function templates, coroutines, ranges, class-type template arguments, operator<=>, variant
# visitors) with g++ and clang++ (-std=c++20 -O0 -g) and writes the defined _Z function
# symbols of both binaries, sorted and distinct, one a line, to cxx20.names beside this script
# (or to the file given as $1). A compiler that is not installed is skipped with a note; with
# neither, the script exits 0 and writes nothing.
#
# TestDifferential reads cxx20.names (and builds the program itself where the compilers are
# there); TestTables checks cxx20.tsv, the names with the answer decided for each.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/cxx20.names}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

built=()
for cxx in g++ clang++; do
	if ! command -v "$cxx" >/dev/null; then
		echo "cxx20.sh: $cxx not installed: skipped" >&2
		continue
	fi
	bin=$tmp/cxx20-${cxx%++}xx
	"$cxx" -std=c++20 -O0 -g -o "$bin" "$here/src/cxx20.cc"
	echo "cxx20.sh: $("$cxx" --version | head -1)" >&2
	built+=("$bin")
done
if ((${#built[@]} == 0)); then
	echo "cxx20.sh: no C++ compiler: nothing written" >&2
	exit 0
fi
# Function symbols (text, weak, ifunc) that are Itanium names.
for bin in "${built[@]}"; do
	nm --defined-only "$bin" | awk '$2 ~ /^[TtWwi]$/ && $3 ~ /^_Z/ {print $3}'
done | LC_ALL=C sort -u >"$tmp/names"
mv "$tmp/names" "$out"
echo "cxx20.sh: $(wc -l <"$out") names in $out" >&2
