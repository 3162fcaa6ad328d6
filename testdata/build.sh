#!/usr/bin/env bash
# Builds profsym's real-binary symbolization corpus from the sources in testdata/src into
# testdata/build (git-ignored), plus one Debian source package compiled with -O2 -g.
#
# Idempotent: every output is rebuilt only when it is missing or older than its inputs
# (its sources), and written under a temporary name first so an interrupted run
# never leaves a half-written binary behind. At most two compiler jobs run at once.
#
# Needs: gcc/g++, clang/clang++, ld.lld and llvm-dwp (LLVM 14), binutils objcopy/nm/dwp, xz, dwz, go, rustc,
# apt-get + dpkg-source (dpkg-dev) and network access to Debian's apt mirror for the Debian
# package (fetched once, then reused from testdata/build/debian). The arm64 variants need the
# cross toolchain (Debian's gcc-aarch64-linux-gnu and g++-aarch64-linux-gnu): without it they
# are left out with a note, unless CI is set, where that fails the build.
#
# Usage: testdata/build.sh [-j N]   (N is capped at 2; default 2)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$here/src
out=$here/build
jobs=2
if [[ ${1:-} == -j ]]; then
	jobs=${2:?-j needs a number}
elif [[ ${1:-} == -j* ]]; then
	jobs=${1#-j}
fi
((jobs < 1)) && jobs=1
((jobs > 2)) && jobs=2

# The Debian package compiled as the "real code base": zstd's CLI, a sizable C program
# (about 900 KB of text) whose hot paths are force-inlined helpers several levels deep.
DEB_PKG=libzstd
DEB_VERSION=1.5.4+dfsg2-5
DEB_DIR=libzstd-1.5.4+dfsg2

mkdir -p "$out/bin" "$out/debug-buildid" "$out/debug-link" "$out/debug-dwz" "$out/tmp"

log() { printf 'testdata/build.sh: %s\n' "$*" >&2; }

# Bump CORPUS_VERSION when a change to this script must rebuild every binary (new flags, say);
# other edits leave existing outputs alone, so adding a variant does not rebuild the rest.
CORPUS_VERSION=1
if [[ $(cat "$out/.corpus-version" 2>/dev/null) != "$CORPUS_VERSION" ]]; then
	rm -rf "$out/bin" "$out/debug-buildid" "$out/debug-link" "$out/debug-dwz"
	mkdir -p "$out/bin" "$out/debug-buildid" "$out/debug-link" "$out/debug-dwz"
	echo "$CORPUS_VERSION" >"$out/.corpus-version"
fi

# uptodate OUT DEP... : OUT exists and is newer than every DEP.
uptodate() {
	local target=$1 dep
	shift
	[[ -e $target ]] || return 1
	for dep in "$@"; do
		[[ $dep -nt $target ]] && return 1
	done
	return 0
}

# A small job pool: spawn runs a command in the background, keeping at most $jobs running;
# a failure anywhere fails the whole build at the next drain.
pids=()
spawn() {
	while (($(jobs -rp | wc -l) >= jobs)); do
		wait -n || fail=1
	done
	"$@" &
	pids+=($!)
}
fail=0
drain() {
	local p
	local rc
	for p in "${pids[@]}"; do
		# 127: already reaped by spawn's wait -n, which recorded any failure.
		wait "$p" 2>/dev/null && rc=0 || rc=$?
		if ((rc != 0 && rc != 127)); then fail=1; fi
	done
	pids=()
	if ((fail)); then
		log "a build step failed (see above)"
		exit 1
	fi
}

c_srcs=("$src/c/main.c" "$src/c/kernels.c" "$src/c/sort.c")
c_deps=("${c_srcs[@]}" "$src/c/helpers.h")
cxx_srcs=("$src/cxx/main.cc" "$src/cxx/shapes.cc" "$src/cxx/algo.cc")
cxx_deps=("${cxx_srcs[@]}" "$src/cxx/shapes.h")

# compile NAME LANG CC FLAGS... : builds bin/NAME from the C or C++ corpus.
compile() {
	local name=$1 lang=$2 cc=$3
	shift 3
	local target=$out/bin/$name srcs deps std
	if [[ $lang == c ]]; then
		srcs=("${c_srcs[@]}") deps=("${c_deps[@]}") std=-std=gnu11
	else
		srcs=("${cxx_srcs[@]}") deps=("${cxx_deps[@]}") std=-std=c++17
	fi
	uptodate "$target" "${deps[@]}" && return 0
	log "compile $name"
	"$cc" "$std" -Wall -Wl,--build-id=sha1 "$@" -o "$target.tmp" "${srcs[@]}"
	mv -f "$target.tmp" "$target"
}

# ---- phase 1: binaries built from sources ----------------------------------------------

# Every compiler x optimization x DWARF version, for C and C++. PIE alternates so that each
# compiler and level is built both as PIE and as a fixed-address executable.
for lang in c cxx; do
	for comp in gcc clang; do
		if [[ $lang == c ]]; then cc=$comp; else cc=$([[ $comp == gcc ]] && echo g++ || echo clang++); fi
		for opt in O2 O3; do
			for dw in 4 5; do
				if [[ ($opt == O2 && $dw == 5) || ($opt == O3 && $dw == 4) ]]; then
					pie=pie pflags=(-fPIE -pie)
				else
					pie=nopie pflags=(-fno-pie -no-pie)
				fi
				spawn compile "$lang-$comp-$opt-dw$dw-$pie" "$lang" "$cc" "-$opt" "-gdwarf-$dw" "${pflags[@]}"
			done
		done
	done
done

# zlib-compressed debug sections written by the toolchain itself (-gz=zlib).
spawn compile cxx-gcc-O2-dw5-zlib cxx g++ -O2 -gdwarf-5 -gz=zlib -fPIE -pie
spawn compile cxx-clang-O2-dw4-zlib cxx clang++ -O2 -gdwarf-4 -gz=zlib -fPIE -pie
spawn compile c-gcc-O3-dw4-zlib c gcc -O3 -gdwarf-4 -gz=zlib -fno-pie -no-pie

# Symbol table only: no -g at all.
spawn compile c-gcc-O2-nodebug c gcc -O2 -fPIE -pie
spawn compile cxx-clang-O2-nodebug cxx clang++ -O2 -fPIE -pie

# Link-time optimization: gcc's LTO writes abstract origins that cross compilation units.
spawn compile cxx-gcc-O2-lto cxx g++ -O2 -g -flto=1 -fPIE -pie
spawn compile c-gcc-O2-lto c gcc -O2 -g -flto=1 -fno-pie -no-pie
spawn compile cxx-clang-O2-lto cxx clang++ -O2 -g -flto -fuse-ld=lld -fPIE -pie

# -gsplit-dwarf: skeleton units in the executable, functions and inlined instances in .dwo
# files, packed into NAME.dwp beside it, where llvm-symbolizer looks. The .dwo files are
# removed, so the package is the only copy. DWARF 5 is packed by llvm-dwp (binutils' dwp 2.40
# crashes on it); DWARF 4 (GNU's split units: DW_AT_GNU_dwo_name skeletons,
# DW_FORM_GNU_addr_index) by binutils' dwp, which writes GNU's unit index version 2.
# split_compile NAME LANG CC PACKER FLAGS...
split_compile() {
	local name=$1 lang=$2 cc=$3 packer=$4 target=$out/bin/$1
	shift 4
	local deps
	if [[ $lang == c ]]; then deps=("${c_deps[@]}"); else deps=("${cxx_deps[@]}"); fi
	uptodate "$target" "${deps[@]}" && [[ -e $target.dwp ]] && return 0
	rm -f "$out/bin/$name".tmp-*.dwo
	compile "$name" "$lang" "$cc" -gsplit-dwarf "$@"
	"$packer" -e "$target" -o "$target.dwp.tmp"
	rm -f "$out/bin/$name".tmp-*.dwo "$out/bin/$name"-*.dwo
	mv -f "$target.dwp.tmp" "$target.dwp"
}
spawn split_compile cxx-gcc-O2-dw5-split cxx g++ llvm-dwp -O2 -gdwarf-5 -fPIE -pie
spawn split_compile c-gcc-O3-dw5-split c gcc llvm-dwp -O3 -gdwarf-5 -fno-pie -no-pie
spawn split_compile cxx-gcc-O2-dw4-split cxx g++ dwp -O2 -gdwarf-4 -fno-pie -no-pie
spawn split_compile c-gcc-O3-dw4-split c gcc dwp -O3 -gdwarf-4 -fPIE -pie

# build_go NAME GOARCH FLAGS... (GOARCH empty: the host's)
build_go() {
	local target=$out/bin/$1 arch=$2
	shift 2
	uptodate "$target" "$src/go/"*.go "$src/go/go.mod" && return 0
	log "go build $(basename "$target")"
	(cd "$src/go" && env GOWORK=off GOFLAGS=-mod=mod ${arch:+GOARCH=$arch} go build "$@" -o "$target.tmp" .)
	mv -f "$target.tmp" "$target"
}
spawn build_go go ""
spawn build_go go-stripped "" -ldflags='-s -w'

# arm64 (AArch64) builds of the same sources, cross-compiled: GNU's cross gcc and g++, clang
# for the aarch64-linux-gnu target linked by lld against the cross toolchain's sysroot, and Go.
# PIE, as each toolchain makes by default.
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v aarch64-linux-gnu-g++ >/dev/null &&
	command -v aarch64-linux-gnu-objcopy >/dev/null; then
	arm64=1
	spawn compile c-gcc-O2-arm64 c aarch64-linux-gnu-gcc -O2 -g
	spawn compile cxx-gcc-O2-arm64 cxx aarch64-linux-gnu-g++ -O2 -g
	spawn compile cxx-clang-O2-arm64 cxx clang++ --target=aarch64-linux-gnu -fuse-ld=lld -O2 -g
	spawn build_go go-arm64 arm64
	# A stripped PIE: pclntab alone, its moduledata found through R_AARCH64_RELATIVE relocations.
	spawn build_go go-arm64-pie arm64 -buildmode=pie
	spawn build_go go-arm64-pie-stripped arm64 -buildmode=pie -ldflags='-s -w'
elif [[ -n ${CI:-} ]]; then
	log "the arm64 variants need aarch64-linux-gnu-gcc, aarch64-linux-gnu-g++ and aarch64-linux-gnu-objcopy (apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu)"
	exit 1
else
	arm64=0
	log "no aarch64-linux-gnu cross toolchain: arm64 variants left out (apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu)"
fi

# Rust 1.95 mangles with v0 by default; legacy mangling is still an unstable option, which a
# stable rustc accepts only with RUSTC_BOOTSTRAP=1 (second argument non-empty).
build_rust() {
	local target=$out/bin/$1 bootstrap=$2
	shift 2
	uptodate "$target" "$src/rust/main.rs" && return 0
	log "rustc $(basename "$target")"
	env ${bootstrap:+RUSTC_BOOTSTRAP=1} rustc --edition 2021 -C opt-level=2 -C debuginfo=2 "$@" -o "$target.tmp" "$src/rust/main.rs"
	mv -f "$target.tmp" "$target"
}
spawn build_rust rust-v0 "" -C symbol-mangling-version=v0
spawn build_rust rust-legacy 1 -Z unstable-options -C symbol-mangling-version=legacy

# The Debian package: fetched with a private apt configuration (deb-src entries mirroring the
# system's deb entries) so the machine's apt setup is left alone.
build_debian() {
	local target=$out/bin/zstd-deb deb=$out/debian
	local tree=$deb/src/$DEB_DIR
	[[ -e $target ]] && return 0
	if [[ ! -d $tree ]]; then
		log "fetch Debian source $DEB_PKG=$DEB_VERSION"
		rm -rf "$deb"
		mkdir -p "$deb/parts" "$deb/lists/partial" "$deb/cache/archives/partial" "$deb/src"
		local f
		for f in /etc/apt/sources.list.d/*.sources; do
			[[ -e $f ]] || continue
			sed 's/^Types:.*$/Types: deb-src/' "$f" >"$deb/parts/$(basename "$f")"
		done
		if [[ -f /etc/apt/sources.list ]]; then
			sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >"$deb/parts/main.list"
		fi
		cat >"$deb/apt.conf" <<-EOF
			Dir::Etc::SourceList "/dev/null";
			Dir::Etc::SourceParts "$deb/parts";
			Dir::State::Lists "$deb/lists";
			Dir::Cache "$deb/cache";
			APT::Sandbox::User "root";
		EOF
		if ! APT_CONFIG=$deb/apt.conf apt-get -qq update ||
			! (cd "$deb/src" && APT_CONFIG=$deb/apt.conf apt-get -qq source "$DEB_PKG=$DEB_VERSION"); then
			log "cannot fetch Debian source $DEB_PKG=$DEB_VERSION: needs Debian's apt mirror (deb-src of the configured sources) and dpkg-dev"
			rm -rf "$deb"
			return 1
		fi
		[[ -d $tree ]] || { log "apt-get source did not produce $tree"; return 1; }
	fi
	log "build Debian $DEB_PKG $DEB_VERSION (zstd CLI, -O2 -g; a few minutes)"
	make -s -C "$tree/programs" clean >/dev/null
	make -s -C "$tree/programs" zstd -j"$jobs" CFLAGS="-O2 -g" \
		HAVE_ZLIB=0 HAVE_LZMA=0 HAVE_LZ4=0 HAVE_THREAD=1 LDFLAGS=-Wl,--build-id=sha1 >/dev/null
	cp "$tree/programs/zstd" "$target.tmp"
	mv -f "$target.tmp" "$target"
}

drain
# The Debian build runs alone: its own make uses the two job slots.
build_debian

# ---- phase 2: variants derived from phase-1 binaries ------------------------------------

build_id() {
	readelf -n "$1" | sed -n 's/^ *Build ID: *\([0-9a-f]*\)$/\1/p' | head -n 1
}

# zstd-compressed debug sections. gcc 12 and clang 14 cannot write them, binutils 2.40 can.
zstd_variant() {
	local base=$out/bin/$1 target=$out/bin/$1.zstd
	uptodate "$target" "$base" && return 0
	log "zstd-compress $1"
	objcopy --compress-debug-sections=zstd "$base" "$target.tmp"
	mv -f "$target.tmp" "$target"
}

# Stripped executable whose debug file is found only through the build-ID layout
# (debug-buildid/.build-id/ab/cdef....debug); no .gnu_debuglink.
buildid_variant() {
	local base=$out/bin/$1 target=$out/bin/$1.stripped-buildid id
	uptodate "$target" "$base" && return 0
	log "split debug (build-id) $1"
	id=$(build_id "$base")
	[[ -n $id ]] || { log "$1 has no build ID"; return 1; }
	mkdir -p "$out/debug-buildid/.build-id/${id:0:2}"
	objcopy --only-keep-debug "$base" "$out/debug-buildid/.build-id/${id:0:2}/${id:2}.debug"
	objcopy --strip-all "$base" "$target.tmp"
	mv -f "$target.tmp" "$target"
}

# Stripped executable with a .gnu_debuglink, its debug file placed where gdb and
# llvm-symbolizer look for one: with "local", in .debug/ beside the executable; otherwise under
# debug-link/<absolute directory of the executable>/ (found with debug-link as a debug dir).
# The second layout names the checkout's path, so a moved checkout rebuilds it.
# The objcopy that knows the file's architecture is the third argument (default: the host's).
debuglink_variant() {
	local base=$out/bin/$1 target=$out/bin/$1.stripped-link dbg objcopy=${3:-objcopy}
	if [[ $2 == local ]]; then
		dbg=$out/bin/.debug/$1.debug
	else
		dbg=$out/debug-link$out/bin/$1.debug
	fi
	uptodate "$target" "$base" && [[ -e $dbg ]] && return 0
	log "split debug (debuglink, $2) $1"
	mkdir -p "$(dirname "$dbg")"
	"$objcopy" --only-keep-debug "$base" "$dbg"
	"$objcopy" --strip-all --add-gnu-debuglink="$dbg" "$base" "$target.tmp"
	mv -f "$target.tmp" "$target"
}

# MiniDebugInfo made the way Fedora's find-debuginfo does: the function symbols that are not
# in .dynsym, kept from the debug file without DWARF, xz-compressed into .gnu_debugdata of the
# fully stripped executable. Its reference twin (.symtab-ref) keeps .symtab and drops DWARF,
# so llvm-symbolizer, which does not read .gnu_debugdata, answers from the same symbols.
minidebug_variant() {
	local base=$out/bin/$1 target=$out/bin/$1.minidebug ref=$out/bin/$1.symtab-ref
	local tmp=$out/tmp/$1.mini
	uptodate "$target" "$base" && uptodate "$ref" "$base" && return 0
	log "MiniDebugInfo $1"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	objcopy --only-keep-debug "$base" "$tmp/debuginfo"
	objcopy --strip-all "$base" "$tmp/stripped"
	nm -D "$base" --format=posix --defined-only | awk '{ print $1 }' | sort >"$tmp/dynsyms"
	nm "$tmp/debuginfo" --format=sysv --defined-only | awk -F '|' '{ if ($4 ~ "FUNC") print $1 }' |
		sed 's/ *$//' | sort >"$tmp/funcsyms"
	comm -13 "$tmp/dynsyms" "$tmp/funcsyms" >"$tmp/keep_symbols"
	objcopy -S --remove-section .gdb_index --remove-section .comment \
		--keep-symbols="$tmp/keep_symbols" "$tmp/debuginfo" "$tmp/mini_debuginfo"
	xz --threads=1 "$tmp/mini_debuginfo"
	objcopy --add-section .gnu_debugdata="$tmp/mini_debuginfo.xz" "$tmp/stripped" "$target.tmp"
	objcopy --strip-debug "$base" "$ref.tmp"
	mv -f "$ref.tmp" "$ref"
	mv -f "$target.tmp" "$target"
	rm -rf "$tmp"
}

# dwz, as Debian's and Fedora's debug packages are made: two stripped executables whose debug
# files (in the build-ID layout) went through dwz -m together, which moved the DWARF they share
# (the standard library's types and inline functions) into one supplementary file,
# debug-dwz/.dwz/TAG.debug, that both name by a path relative to themselves as Fedora's do:
# in .gnu_debugaltlink, or with DWARF5=1 in DWARF 5's .debug_sup (dwz -5).
dwz_variant() {
	local tag=$1 dw5=$2 a=$3 b=$4
	local tmp=$out/tmp/dwz-$tag n id
	uptodate "$out/bin/$a.stripped-dwz" "$out/bin/$a" && uptodate "$out/bin/$b.stripped-dwz" "$out/bin/$b" &&
		[[ -e $out/debug-dwz/.dwz/$tag.debug ]] && return 0
	log "dwz $tag: $a $b"
	rm -rf "$tmp"
	mkdir -p "$tmp" "$out/debug-dwz/.dwz"
	for n in "$a" "$b"; do
		objcopy --only-keep-debug "$out/bin/$n" "$tmp/$n.debug"
		objcopy --strip-all "$out/bin/$n" "$tmp/$n.stripped"
	done
	dwz ${dw5:+-5} -m "$tmp/$tag.debug" -M "../../.dwz/$tag.debug" "$tmp/$a.debug" "$tmp/$b.debug"
	mv -f "$tmp/$tag.debug" "$out/debug-dwz/.dwz/$tag.debug"
	for n in "$a" "$b"; do
		id=$(build_id "$out/bin/$n")
		[[ -n $id ]] || { log "$n has no build ID"; return 1; }
		mkdir -p "$out/debug-dwz/.build-id/${id:0:2}"
		mv -f "$tmp/$n.debug" "$out/debug-dwz/.build-id/${id:0:2}/${id:2}.debug"
		mv -f "$tmp/$n.stripped" "$out/bin/$n.stripped-dwz"
	done
	rm -rf "$tmp"
}

spawn zstd_variant cxx-gcc-O2-dw5-pie
spawn zstd_variant c-clang-O3-dw4-pie
spawn zstd_variant zstd-deb
spawn buildid_variant cxx-clang-O2-dw5-pie
spawn buildid_variant c-gcc-O3-dw4-pie
spawn debuglink_variant cxx-gcc-O3-dw4-pie dirs
spawn debuglink_variant c-clang-O2-dw5-pie local
if ((arm64)); then
	spawn debuglink_variant cxx-gcc-O2-arm64 local aarch64-linux-gnu-objcopy
fi
spawn minidebug_variant cxx-gcc-O2-dw5-pie
spawn minidebug_variant c-clang-O2-dw4-nopie
drain
# One at a time: each pair's dwz run holds both debug files' DWARF in memory.
dwz_variant cxx-gcc-dw4 "" cxx-gcc-O2-dw4-nopie cxx-gcc-O3-dw4-pie
dwz_variant cxx-gcc-dw5 1 cxx-gcc-O2-dw5-pie cxx-gcc-O3-dw5-nopie
rmdir "$out/tmp" 2>/dev/null || true
log "corpus ready in $out/bin"
