#!/usr/bin/env bash
# Regenerates cases.tsv: linkage names taken from programs compiled here, each with what
# LLVM 14 prints for it (llvm-cxxfilt-14 uses the demangler llvm-symbolizer-14 uses).
#
# Columns: symbol, llvm, want, reason. want and reason are empty where we print what LLVM
# prints. The one deliberate exception: legacy Rust names (_ZN...17h<hash>E), which LLVM
# demangles as plain Itanium names and so leaves rustc's escapes ($LT$, $u20$, ..) in the
# output; for those we print what rustc's own demangler (rustc-demangle, which the Rust
# sysroot ships) prints, keeping the hash as LLVM does, except for identifiers past ASCII,
# whose escapes GNU c++filt and LLVM both leave in. GCC transactional-memory clones,
# which LLVM 14 cannot demangle, get the form GNU c++filt prints. src/decisions.tsv lists
# the remaining cases where we print something else than LLVM 14, each with its reason.
#
# Needs g++, rustc (1.95; RUSTC_BOOTSTRAP for the legacy scheme and rustc_private) and
# llvm-cxxfilt 14. Run from anywhere: ./gen.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$here/src
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cxxfilt=$(command -v llvm-cxxfilt-14 || command -v llvm-cxxfilt)
"$cxxfilt" --version | grep -q 'version 14\.' || { echo "need llvm-cxxfilt 14" >&2; exit 1; }

g++ -O2 -std=c++17 -static-libstdc++ "$src/cxx.cc" -o "$tmp/cxx"
RUSTC_BOOTSTRAP=1 rustc -C opt-level=0 -Z unstable-options -C symbol-mangling-version=legacy \
	"$src/rs.rs" -o "$tmp/rs-legacy" 2>/dev/null
rustc -O -C symbol-mangling-version=v0 "$src/rs.rs" -o "$tmp/rs-v0" 2>/dev/null
RUSTC_BOOTSTRAP=1 rustc -O "$src/rustc_demangle.rs" -o "$tmp/rustc-demangle" 2>/dev/null

# Function symbols (text, weak, ifunc), one name a line, sorted and unique.
funcs() { nm "$1" | awk '$2 ~ /^[TtWwi]$/ {print $3}' | LC_ALL=C sort -u; }

# Every name from the program's own code, plus a fixed stride through the rest (the
# libraries), so the table stays a few hundred lines and regenerates identically.
{
	funcs "$tmp/cxx" | grep -E '^_Z' | grep -E '3app|Hidden|anonFree|countAll|UlRK|Ul[iv]E|main' || true
	funcs "$tmp/cxx" | grep -E '^_Z' | awk 'NR % 16 == 1'
	funcs "$tmp/rs-legacy" | grep -E '^_ZN' | grep -E '2rs|rs\.\.|closure|4main' || true
	funcs "$tmp/rs-legacy" | grep -E '^_ZN' | awk 'NR % 4 == 1'
	funcs "$tmp/rs-v0" | grep -E '^_R' | grep -E 'Cs[0-9A-Za-z]*_2rs' || true
	funcs "$tmp/rs-v0" | grep -E '^_R' | awk 'NR % 6 == 1'
	grep -v '^#' "$src/extras.txt"
} | awk '!seen[$0]++' >"$tmp/syms"

# One name per line in, one out: cxxfilt splits its input on whitespace, and linkage names
# have none.
"$cxxfilt" <"$tmp/syms" >"$tmp/llvm"
[ "$(wc -l <"$tmp/syms")" = "$(wc -l <"$tmp/llvm")" ] || { echo "line count mismatch" >&2; exit 1; }
# rustc-demangle drops vendor suffixes; it gets the names without them, and the suffix is
# printed afterwards in LLVM's way, " (.suffix)".
sed -E 's/^(_ZN.*17h[0-9a-f]+E)\..*$/\1/' "$tmp/syms" | "$tmp/rustc-demangle" >"$tmp/rust"
# LLVM 14 cannot demangle GCC's transactional-memory clones (_ZGTt<encoding>); their correct
# form is "transaction clone for " and the encoding's demangling, which LLVM can give.
sed -E 's/^_ZGTt/_Z/' "$tmp/syms" | "$cxxfilt" >"$tmp/llvm-tm"

legacy='^_ZN.*17h[0-9a-f]+E([.].*)?$'
nonascii='[$]u([89a-f][0-9a-f]|[0-9a-f][0-9a-f][0-9a-f]+)[$]'
paste "$tmp/syms" "$tmp/llvm" "$tmp/rust" "$tmp/llvm-tm" | awk -F'\t' -v legacy="$legacy" -v nonascii="$nonascii" -v decisions="$src/decisions.tsv" '
BEGIN {
	OFS = "\t"
	while ((getline line < decisions) > 0) {
		if (line ~ /^#/) continue
		split(line, d, "\t")
		dwant[d[1]] = d[2]; dreason[d[1]] = d[3]
	}
	print "# symbol", "llvm", "want (when not llvm)", "reason"
}
{
	want = ""; reason = ""
	if ($1 in dwant) {
		want = dwant[$1]; reason = dreason[$1]
	} else if ($1 ~ legacy && $1 ~ nonascii) {
		# Identifiers past ASCII: GNU c++filt and LLVM both leave their escapes in; so do we.
	} else if ($1 ~ legacy && ($2 ~ /\$/ || $2 ~ /\.\./)) {
		want = $3
		if (match($1, /17h[0-9a-f]+E[.]/)) want = want " (" substr($1, RSTART + RLENGTH - 1) ")"
		reason = "legacy Rust: LLVM 14 leaves rustc escapes undecoded; rustc-demangle form"
	} else if ($1 ~ /^_ZGTt/ && $2 == $1 && $4 != substr($1, 1, 2) substr($1, 6)) {
		want = "transaction clone for " $4
		reason = "LLVM 14 cannot demangle GCC transactional-memory clones (_ZGTt)"
	}
	if (want == $2) { want = ""; reason = "" }
	print $1, $2, want, reason
}' >"$here/cases.tsv"
echo "wrote $(($(wc -l <"$here/cases.tsv") - 1)) cases to $here/cases.tsv"
