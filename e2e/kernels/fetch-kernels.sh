#!/usr/bin/env bash
# Downloads the kernels of the matrix, Debian's amd64 and arm64 builds of four releases (5.10
# from bullseye, 6.1 from bookworm, 6.12 from trixie, 7.2 from sid), and the arm64 busybox,
# with apt-get and a sources list of its own: the machine's apt state (its sources, lists and
# cache) stays as it was. Only each kernel's vmlinuz is kept. Prints one line per kernel,
# "ID PACKAGE=VERSION VMLINUZ", then "busybox-arm64 PACKAGE=VERSION PATH".
#
#   e2e/kernels/fetch-kernels.sh [--refresh] [CACHE_DIR]
#
# CACHE_DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/profsym/kernels. The first run resolves
# the newest package of each release from the package lists and pins the result in
# CACHE_DIR/stamp; later runs only check that the pinned files are there (no network), so the
# matrix keeps testing the same kernels until --refresh resolves them again. The mirror is the
# one /etc/apt/sources.list.d/debian.sources names (PROFSYM_DEBIAN_MIRROR and
# PROFSYM_DEBIAN_SECURITY_MIRROR override it).
set -euo pipefail

refresh=0
if [[ ${1:-} == --refresh ]]; then
	refresh=1
	shift
fi
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/profsym/kernels}
log() { printf 'fetch-kernels: %s\n' "$*" >&2; }

# id -> the package name pattern of that release (ARCH is replaced by the architecture). The
# ABI number changes with each update of a release: the newest listed is taken. sid's kernels
# come as linux-binary-* (the linux-image-* package there is only a wrapper) with the vmlinuz
# under /usr/lib/modules.
declare -A patterns=(
	[5.10]='^linux-image-5\.10\.0-[0-9]+-ARCH-unsigned$'
	[6.1]='^linux-image-6\.1\.0-[0-9]+-ARCH-unsigned$'
	[6.12]='^linux-image-6\.12\.[0-9]+\+deb13-ARCH-unsigned$'
	[7.2]='^linux-binary-7\.2\.[0-9]+\+deb[0-9]+-ARCH$'
)
series=(5.10 6.1 6.12 7.2)
archs=(amd64 arm64)
stamp=$cache/stamp

# report prints the pinned files, or fails when one is missing.
report() {
	local id pkg
	while read -r id pkg; do
		local f=$cache/$id/vmlinuz
		[[ $id == busybox-arm64 ]] && f=$cache/$id/busybox
		if [[ ! -s $f || $(cat "$cache/$id/package" 2>/dev/null) != "$pkg" ]]; then
			return 1
		fi
		printf '%s %s %s\n' "$id" "$pkg" "$f"
	done <"$stamp"
}

if ((!refresh)) && [[ -f $stamp ]] && out=$(report); then
	log "cached in $cache"
	printf '%s\n' "$out"
	exit 0
fi

for tool in apt-get apt-cache dpkg-deb tar flock; do
	if ! command -v "$tool" >/dev/null; then
		log "needs $tool"
		exit 1
	fi
done
mkdir -p "$cache"
# Two runs at once (two test processes) would update the same lists.
exec 9>"$cache/lock"
flock 9
# The run this one waited for may have fetched everything.
if ((!refresh)) && [[ -f $stamp ]] && out=$(report); then
	log "cached in $cache"
	printf '%s\n' "$out"
	exit 0
fi

# The mirrors of the machine's own Debian sources, so that a machine behind a local mirror
# uses it for the other releases too.
mirror=${PROFSYM_DEBIAN_MIRROR:-}
security=${PROFSYM_DEBIAN_SECURITY_MIRROR:-}
if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
	# One "URI SUITES..." line per deb822 stanza.
	while read -r uri suites; do
		if [[ $suites == *-security* ]]; then
			security=${security:-$uri}
		else
			mirror=${mirror:-$uri}
		fi
	done < <(awk '
		/^[ \t]*$/ {if (uri != "") print uri, suites; uri = ""; suites = ""; next}
		$1 == "URIs:" {uri = $2}
		$1 == "Suites:" {$1 = ""; suites = $0}
		END {if (uri != "") print uri, suites}' /etc/apt/sources.list.d/debian.sources)
fi
mirror=${mirror:-http://deb.debian.org/debian}
security=${security:-http://deb.debian.org/debian-security}

apt_dir=$cache/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
# Only the Packages index (no translations, no AppStream data): that is all a download needs.
opts="[target=Packages signed-by=$keyring]"
cat >"$apt_dir/sources.list" <<EOF
deb $opts $mirror bullseye main
deb $opts $mirror bookworm main
deb $opts $security bookworm-security main
deb $opts $mirror trixie main
deb $opts $mirror sid main
EOF
apt_opts=(
	-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
	-o "Dir::State::lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
	# The machine's configuration may turn the package cache off (Docker images do): without
	# it every apt call parses all five releases' lists again.
	-o Dir::Cache::pkgcache=pkgcache.bin -o Dir::Cache::srcpkgcache=srcpkgcache.bin
	# Both architectures' lists whatever dpkg is configured for: nothing is installed.
	-o APT::Architectures::=amd64 -o APT::Architectures::=arm64
	-o Acquire::Languages=none -q
)
# As root, apt drops to its _apt user to download, who cannot enter a cache under /root: it
# would fall back with a warning.
if ((EUID == 0)); then
	apt_opts+=(-o APT::Sandbox::User=root)
fi
start=$SECONDS

update_lists() {
	log "updating the package lists of bullseye, bookworm, trixie and sid from $mirror"
	apt-get "${apt_opts[@]}" update >&2
}

if ((refresh)) || [[ ! -f $stamp ]]; then
	update_lists
	names=$(apt-cache "${apt_opts[@]}" pkgnames linux-)
	specs=()
	resolved=()
	for a in "${archs[@]}"; do
		for s in "${series[@]}"; do
			re=${patterns[$s]//ARCH/$a}
			name=$(grep -E "$re" <<<"$names" | sort -V | tail -n 1 || true)
			if [[ -z $name ]]; then
				log "no package matches $re in the lists of $mirror (has the release moved on?)"
				exit 1
			fi
			specs+=("$name:$a")
			resolved+=("$a-$s")
		done
	done
	# The candidate version of each kernel (the newest over the suites that list it).
	versions=$(apt-cache "${apt_opts[@]}" show --no-all-versions "${specs[@]}" |
		awk '$1 == "Package:" {p = $2} $1 == "Version:" {v = $2} $1 == "Architecture:" {a = $2}
			/^$/ && p != "" {print p ":" a "=" v; p = ""} END {if (p != "") print p ":" a "=" v}')
	: >"$stamp.new"
	for i in "${!specs[@]}"; do
		line=$(awk -F= -v s="${specs[$i]}" '$1 == s {print; exit}' <<<"$versions")
		if [[ -z $line ]]; then
			log "no candidate version of ${specs[$i]}"
			exit 1
		fi
		printf '%s %s\n' "${resolved[$i]}" "$line" >>"$stamp.new"
	done
	# bookworm's busybox, the release the host's (amd64) busybox-static comes from.
	bb=$(apt-cache "${apt_opts[@]}" madison busybox-static:arm64 | awk -F' *[|] *' '$3 ~ / bookworm\/main arm64 / {print $2; exit}')
	if [[ -z $bb ]]; then
		log "no busybox-static:arm64 in bookworm's lists"
		exit 1
	fi
	printf 'busybox-arm64 busybox-static:arm64=%s\n' "$bb" >>"$stamp.new"
	mv "$stamp.new" "$stamp"
	log "resolved: $(awk '{printf "%s ", $2}' "$stamp")"
fi

# The pinned packages whose files are missing.
want=()
while read -r id pkg; do
	if [[ $(cat "$cache/$id/package" 2>/dev/null) != "$pkg" ]]; then
		want+=("$pkg")
	fi
done <"$stamp"
if ((${#want[@]})); then
	if [[ ! -f $apt_dir/cache/pkgcache.bin ]] && ! compgen -G "$apt_dir/lists/*Packages*" >/dev/null; then
		update_lists
	fi
	debs=$apt_dir/debs
	rm -rf "$debs"
	mkdir -p "$debs"
	# apt-get download writes into the working directory as the _apt user.
	((EUID == 0)) || chmod 777 "$debs"
	log "downloading ${want[*]}"
	if ! (cd "$debs" && apt-get "${apt_opts[@]}" download "${want[@]}") >&2; then
		log "the pinned packages are no longer all on the mirror: run with --refresh to resolve them again"
		exit 1
	fi
	while read -r id pkg; do
		[[ $(cat "$cache/$id/package" 2>/dev/null) == "$pkg" ]] && continue
		name=${pkg%%:*}
		deb=$(compgen -G "$debs/${name}_*.deb" | head -n 1 || true)
		if [[ -z $deb ]]; then
			log "apt-get download left no ${name}_*.deb"
			exit 1
		fi
		rm -rf "$cache/$id" "$cache/$id.new"
		mkdir -p "$cache/$id.new"
		# One file of each package: the modules (most of the size) are not needed, the guest
		# loads none.
		case $name in
		busybox-static) member='./*bin/busybox' file=busybox ;;
		linux-binary-*) member='./usr/lib/modules/*/vmlinuz' file=vmlinuz ;;
		*) member='./boot/vmlinuz-*' file=vmlinuz ;;
		esac
		dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$cache/$id.new" --wildcards "$member"
		found=$(find "$cache/$id.new" -type f -path "$cache/$id.new/${member#./}")
		if [[ -z $found || $found == *$'\n'* ]]; then
			log "$name: want one file $member, found: ${found:-none}"
			exit 1
		fi
		mv "$found" "$cache/$id.new/$file.tmp"
		rm -rf "$cache/$id.new/boot" "$cache/$id.new/usr" "$cache/$id.new/bin"
		mv "$cache/$id.new/$file.tmp" "$cache/$id.new/$file"
		printf '%s\n' "$pkg" >"$cache/$id.new/package"
		mv "$cache/$id.new" "$cache/$id"
	done <"$stamp"
	rm -rf "$debs"
fi
# The lists are only needed to download: the stamp pins what they said.
rm -rf "$apt_dir"
log "ready in $cache in $((SECONDS - start))s"
report
