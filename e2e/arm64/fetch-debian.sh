#!/usr/bin/env bash
# Downloads Debian's arm64 kernel and the arm64 userland the guest needs (busybox, the C and
# C++ runtimes and libc's debug file) with apt, and unpacks them without installing anything
# for the host. Prints the cache directory on stdout. Idempotent: a second run with the same
# package versions only checks the stamp file.
#
#   e2e/arm64/fetch-debian.sh [CACHE_DIR]
#
# CACHE_DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/profsym/arm64. Needs
# `dpkg --add-architecture arm64` and an apt-get update after it.
set -euo pipefail

cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/profsym/arm64}
log() { printf 'fetch-debian: %s\n' "$*" >&2; }

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	log "the arm64 architecture is not added: dpkg --add-architecture arm64 && apt-get update"
	exit 1
fi

# The versioned kernel image the meta package points at (linux-image-6.1.0-NN-arm64).
kernel_pkg=$(apt-cache depends linux-image-arm64:arm64 | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ {sub(/:arm64$/, "", $2); print $2; exit}')
if [[ -z $kernel_pkg ]]; then
	log "cannot resolve the kernel image linux-image-arm64:arm64 depends on (apt-get update?)"
	exit 1
fi
packages=("$kernel_pkg" busybox-static libc6 libc6-dbg libstdc++6 libgcc-s1)

# name=version for each package (one apt-cache call: each loads the whole cache): the stamp
# says what the cache holds.
want=$(apt-cache policy "${packages[@]/%/:arm64}" | awk '
	/^[^ ].*:$/ {name = $1; sub(/:arm64:$/, "", name); sub(/:$/, "", name)}
	$1 == "Candidate:" && $2 != "(none)" {print name "=" $2}')
for p in "${packages[@]}"; do
	if ! grep -q "^$p=" <<<"$want"; then
		log "no candidate version of $p:arm64 (apt-get update?)"
		exit 1
	fi
done
want+=$'\n'

stamp=$cache/stamp
# $(...) drops the trailing newline $want ends with: compare without it.
if [[ -f $stamp && $(cat "$stamp") == "${want%$'\n'}" && -d $cache/tree ]]; then
	log "cached in $cache"
	echo "$cache"
	exit 0
fi

start=$SECONDS
mkdir -p "$cache"
rm -rf "$cache/debs" "$cache/tree.new"
mkdir -p "$cache/debs" "$cache/tree.new"
specs=()
while IFS= read -r line; do
	[[ -n $line ]] && specs+=("${line%%=*}:arm64=${line#*=}")
done <<<"$want"
log "downloading ${specs[*]}"
# apt-get download writes into the working directory; _apt must be able to write there.
(cd "$cache/debs" && chmod 777 . && apt-get download -qq "${specs[@]}") >&2
for deb in "$cache"/debs/*.deb; do
	dpkg-deb -x "$deb" "$cache/tree.new"
done
# The guest gets its files over the serial console and loads no module: drop the kernel's
# modules (most of the unpacked size).
rm -rf "$cache"/tree.new/lib/modules
rm -rf "$cache/tree"
mv "$cache/tree.new" "$cache/tree"
rm -rf "$cache/debs"

vmlinuz=$(ls "$cache"/tree/boot/vmlinuz-* 2>/dev/null | head -n 1)
if [[ -z $vmlinuz ]]; then
	log "$kernel_pkg holds no /boot/vmlinuz-*"
	exit 1
fi
ln -sf "${vmlinuz#"$cache/"}" "$cache/vmlinuz"
printf '%s' "$want" >"$stamp"
log "unpacked into $cache in $((SECONDS - start))s"
echo "$cache"
