#!/usr/bin/env bash
# Builds the matrix's guest for one architecture: static busybox, the collector built static
# from this tree, and the workloads (e2e/arm64/testdata/chain6.c, static, without frame
# pointers; on arm64 also a copy whose return addresses are signed with pointer
# authentication), packed into an initramfs (an uncompressed newc cpio: nothing to inflate
# under emulation) whose /init is testdata/init.sh.
#
#   e2e/kernels/build-guest.sh amd64|arm64 OUT_DIR BUSYBOX
#
# BUSYBOX is a static busybox of that architecture (the host's /bin/busybox on amd64, what
# fetch-kernels.sh prints on arm64). OUT_DIR/tree is the guest's file tree, kept so the host
# can read the very binaries the guest ran (guest path P is OUT_DIR/tree/P);
# OUT_DIR/initrd.cpio is the initramfs. PROFSYM_GUEST_EXTRA names more files (space-separated)
# copied into the guest's /w (a kernel module for e2e_kernel=1).
set -euo pipefail
if [[ $# -ne 3 ]]; then
	echo "usage: $0 amd64|arm64 OUT_DIR BUSYBOX" >&2
	exit 2
fi
arch=$1
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
busybox=$3
case $arch in
amd64) cc=gcc machine=X86-64 ;;
arm64) cc=aarch64-linux-gnu-gcc machine=AArch64 ;;
*)
	echo "build-guest: unknown architecture $arch" >&2
	exit 2
	;;
esac
# A busybox of the wrong kind fails only inside the guest, as a kernel panic.
if ! readelf -h "$busybox" 2>/dev/null | grep -q "Machine:.*$machine" || readelf -l "$busybox" | grep -q INTERP; then
	echo "build-guest: $busybox is not a static $arch busybox" >&2
	exit 1
fi
root=$out/tree
rm -rf "$root" "$out/initrd.cpio"
mkdir -p "$root"/{bin,w,proc,sys,dev,tmp}
cp "$busybox" "$root/bin/busybox"

cflags=(-O2 -static -fomit-frame-pointer)
src=$repo/e2e/arm64/testdata/chain6.c
"$cc" "${cflags[@]}" -o "$root/w/chain" "$src"
if [[ $arch == arm64 ]]; then
	"$cc" "${cflags[@]}" -mbranch-protection=pac-ret -o "$root/w/chain-pac" "$src"
fi
(cd "$repo" && GOOS=linux GOARCH=$arch CGO_ENABLED=0 go build -o "$root/w/collector" ./services/collector)

for f in ${PROFSYM_GUEST_EXTRA:-}; do
	cp "$f" "$root/w/"
done
install -m 0755 "$here/testdata/init.sh" "$root/init"
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 >"$out/initrd.cpio")
echo "$out/initrd.cpio"
