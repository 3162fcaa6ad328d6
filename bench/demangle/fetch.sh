#!/usr/bin/env bash
# bench/demangle/fetch.sh CACHE: download (apt-get download) and unpack the packages of
# packages.txt under CACHE/debs and CACHE/root. Packages already there are not fetched again.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=$1
mkdir -p "$cache/debs" "$cache/root"
missing=()
while read -r p; do
	[[ -z $p || $p == \#* ]] && continue
	if ls "$cache/debs/${p}_"*.deb >/dev/null 2>&1; then continue; fi
	if ! apt-cache show "$p" >/dev/null 2>&1; then missing+=("$p"); continue; fi
	(cd "$cache/debs" && apt-get download -q "$p" >/dev/null) || missing+=("$p")
done < "$here/packages.txt"
for deb in "$cache/debs"/*.deb; do
	stamp="$cache/root/.$(basename "$deb").done"
	[[ -e $stamp ]] && continue
	dpkg-deb -x "$deb" "$cache/root"
	touch "$stamp"
done
if ((${#missing[@]})); then echo "not in the archive, left out: ${missing[*]}" >&2; fi
