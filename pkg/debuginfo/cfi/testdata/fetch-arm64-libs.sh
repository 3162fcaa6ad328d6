#!/usr/bin/env bash
# Fetches Debian's arm64 C and C++ runtime libraries for the AArch64 differential test
# (TestReadelfAArch64Libraries): downloads the libc6:arm64 and libstdc++6:arm64 packages
# with apt-get download (nothing is installed) and extracts them under
# CACHE_DIR/<libc6 version>_<libstdc++6 version>. A complete extraction is reused. Prints the
# extraction's directory on its last line.
#
# Needs apt with the arm64 architecture added (dpkg --add-architecture arm64; apt-get
# update), which .ci/install-deps does, and dpkg-deb.
set -euo pipefail
cache=${1:?usage: fetch-arm64-libs.sh CACHE_DIR}
pkgs=(libc6:arm64 libstdc++6:arm64)

candidate() {
	local v
	v=$(apt-cache policy "$1" 2>/dev/null | awk '$1 == "Candidate:" {print $2}')
	if [[ -z $v || $v == "(none)" ]]; then
		echo "fetch-arm64-libs: apt knows no $1 (is the arm64 architecture added and apt-get update run?)" >&2
		exit 1
	fi
	echo "$v"
}

versions=()
for p in "${pkgs[@]}"; do
	versions+=("$(candidate "$p")")
done
dest=$cache/$(IFS=_; echo "${versions[*]}" | tr -c 'A-Za-z0-9._+\n-' '_')
if [[ -f $dest/.complete ]]; then
	echo "$dest"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 0755 "$work" # apt downloads as its _apt user where it can
(
	cd "$work"
	for i in "${!pkgs[@]}"; do
		apt-get download -q -o Debug::NoLocking=1 "${pkgs[$i]}=${versions[$i]}" >&2
	done
)
rm -rf "$dest"
mkdir -p "$dest"
for deb in "$work"/*.deb; do
	dpkg-deb -x "$deb" "$dest"
done
for i in "${!pkgs[@]}"; do
	echo "${pkgs[$i]}=${versions[$i]}"
done >"$dest/.complete"
echo "$dest"
