#!/usr/bin/env bash
# Cross-builds the collector and the workloads for arm64 and packs them with busybox and the
# arm64 C and C++ runtimes into an initramfs (an uncompressed newc cpio) whose /init runs
# the test (testdata/init.sh).
#
#   e2e/arm64/build-guest.sh OUT_DIR DEBIAN_DIR
#
# DEBIAN_DIR is what fetch-debian.sh prints. OUT_DIR/tree is the guest's file tree, kept so
# the host can read the very files the guest ran (guest path P is OUT_DIR/tree/P);
# OUT_DIR/initrd.cpio is the initramfs.
set -euo pipefail
if [[ $# -ne 2 ]]; then
	echo "usage: $0 OUT_DIR DEBIAN_DIR" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
deb=$(cd "$2" && pwd)
src=$here/testdata
root=$out/tree
rm -rf "$root" "$out/initrd.cpio"
mkdir -p "$root"/{bin,w,proc,sys,dev,tmp,lib,usr/lib/aarch64-linux-gnu}

# The guest's runtimes at their Debian paths: the dynamic loader and libc under /lib, libstdc++
# under /usr/lib.
cp -a "$deb/tree/bin/busybox" "$root/bin/"
cp -a "$deb/tree/lib/." "$root/lib/"
cp -a "$deb"/tree/usr/lib/aarch64-linux-gnu/libstdc++.so.6* "$root/usr/lib/aarch64-linux-gnu/"

# Workloads, with DWARF, without frame pointers for C and C++.
cflags=(-O2 -g -fomit-frame-pointer)
aarch64-linux-gnu-gcc "${cflags[@]}" -o "$root/w/chain-gcc" "$src/chain6.c"
clang --target=aarch64-linux-gnu "${cflags[@]}" -o "$root/w/chain-clang" "$src/chain6.c"
# Return addresses signed with pointer authentication (the guest's CPU has it): the copies
# saved on the stack carry a signature in their upper bits that the unwinder must strip.
aarch64-linux-gnu-gcc "${cflags[@]}" -mbranch-protection=pac-ret -o "$root/w/chain-pac" "$src/chain6.c"
aarch64-linux-gnu-gcc "${cflags[@]}" -o "$root/w/qsort" "$src/qsort.c"
aarch64-linux-gnu-g++ "${cflags[@]}" -o "$root/w/chain-cxx" "$src/chain.cc"
aarch64-linux-gnu-gcc -O2 -g -o "$root/w/reader" "$src/reader.c"
aarch64-linux-gnu-gcc "${cflags[@]}" -o "$root/w/signal" "$src/signal.c"
(cd "$src/chaingo" && GOWORK=off GOFLAGS= GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -o "$root/w/chain-go" .)
(cd "$repo" && GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -o "$root/w/collector" ./services/collector)

install -m 0755 "$src/init.sh" "$root/init"
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 >"$out/initrd.cpio")
echo "$out/initrd.cpio"
