#!/usr/bin/env bash
# Downloads the debug package of one kernel of the matrix (Debian's linux-image-RELEASE-dbg, of
# the very version fetch-kernels.sh pinned: about 860 MB) and keeps from it the kernel's
# vmlinux and the debug files of the modules named, in a cache. Prints "vmlinux PATH", then one
# "module NAME PATH" line per module.
#
#   e2e/kernels/fetch-kernel-debug.sh ID [MODULE...]      (ID as fetch-kernels.sh names it: amd64-6.1)
#
# The cache is ${XDG_CACHE_HOME:-$HOME/.cache}/profsym/kernel-debug/ID; a second run with the
# files there uses no network. fetch-kernels.sh must have run (it pins the version). apt runs
# with a state of its own, as in fetch-kernels.sh: the machine's stays as it was
# (PROFSYM_DEBIAN_MIRROR and PROFSYM_DEBIAN_SECURITY_MIRROR name other mirrors).
set -euo pipefail
if [[ $# -lt 1 ]]; then
	echo "usage: $0 ID [MODULE...]" >&2
	exit 2
fi
id=$1
shift
modules=("$@")
base=${XDG_CACHE_HOME:-$HOME/.cache}/profsym
stamp=$base/kernels/stamp
cache=$base/kernel-debug/$id
log() { printf 'fetch-kernel-debug: %s\n' "$*" >&2; }

line=$(awk -v id="$id" '$1 == id {print $2}' "$stamp" 2>/dev/null || true)
if [[ -z $line ]]; then
	log "no kernel $id pinned in $stamp: run e2e/kernels/fetch-kernels.sh first"
	exit 1
fi
# linux-image-6.1.0-57-amd64-unsigned:amd64=6.1.192-3 -> linux-image-6.1.0-57-amd64-dbg:amd64=6.1.192-3
name=${line%%:*}
arch_version=${line#*:}
arch=${arch_version%%=*}
version=${arch_version#*=}
release=${name#linux-image-}
release=${release%-unsigned}
if [[ $name != linux-image-*-unsigned ]]; then
	log "$id is $name: only Debian's linux-image-*-unsigned kernels have a matching -dbg package here"
	exit 1
fi
pkg=linux-image-$release-dbg:$arch=$version

print() {
	local v=$cache/files/usr/lib/debug/boot/vmlinux-$release
	[[ -s $v && $(cat "$cache/package" 2>/dev/null) == "$pkg" ]] || return 1
	printf 'vmlinux %s\n' "$v"
	local m f
	for m in "${modules[@]}"; do
		f=$(find "$cache/files/usr/lib/debug/lib/modules/$release" -name "$m.ko" -print -quit 2>/dev/null || true)
		[[ -n $f ]] || return 1
		printf 'module %s %s\n' "$m" "$f"
	done
}

if out=$(print); then
	log "cached in $cache"
	printf '%s\n' "$out"
	exit 0
fi
for tool in apt-get dpkg-deb tar flock; do
	command -v "$tool" >/dev/null || {
		log "needs $tool"
		exit 1
	}
done
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9

# An apt state of its own (the releases the matrix takes kernels from), beside the caches.
apt_dir=$base/kernel-debug/apt
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache"
opts="[target=Packages signed-by=$keyring]"
mirror=${PROFSYM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${PROFSYM_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
printf 'deb %s %s %s main\n' "$opts" "$mirror" bookworm "$opts" "$security" bookworm-security \
	"$opts" "$mirror" trixie "$opts" "$mirror" sid >"$apt_dir/sources.list"
apt_opts=(
	-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
	-o "Dir::State::lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
	-o Dir::Cache::pkgcache=pkgcache.bin -o Dir::Cache::srcpkgcache=srcpkgcache.bin
	-o APT::Architectures::=amd64 -o APT::Architectures::=arm64
	-o Acquire::Languages=none -q
)
if ((EUID == 0)); then
	apt_opts+=(-o APT::Sandbox::User=root)
fi
debs=$cache/debs
rm -rf "$debs"
mkdir -p "$debs"
((EUID == 0)) || chmod 777 "$debs"
start=$SECONDS
if ! (cd "$debs" && apt-get "${apt_opts[@]}" download "$pkg") >&2; then
	log "updating the package lists"
	apt-get "${apt_opts[@]}" update >&2
	(cd "$debs" && apt-get "${apt_opts[@]}" download "$pkg") >&2
fi
deb=$(compgen -G "$debs/*.deb" | head -n 1)
log "downloaded $pkg ($(du -h "$deb" | cut -f1)) in $((SECONDS - start)) s; unpacking vmlinux and the modules"
rm -rf "$cache/files"
mkdir -p "$cache/files"
# The package holds every module's debug file (several GB unpacked): only the ones asked for,
# in one pass over the archive (each pass inflates all of it).
want=("./usr/lib/debug/boot/vmlinux-$release")
for m in "${modules[@]}"; do
	want+=("./usr/lib/debug/lib/modules/$release/*/$m.ko")
done
dpkg-deb --fsys-tarfile "$deb" | tar -x --wildcards -C "$cache/files" "${want[@]}"
rm -rf "$debs"
printf '%s\n' "$pkg" >"$cache/package"
if ! print; then
	log "$pkg lacks vmlinux-$release or one of the modules ${modules[*]}"
	exit 1
fi
