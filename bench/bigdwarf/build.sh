#!/usr/bin/env bash
# bench/bigdwarf/build.sh: builds a C++ program with over 1 GB of DWARF, reproducibly, into
# ${XDG_CACHE_HOME:-$HOME/.cache}/profsym/bigdwarf/ (never in the tree), and prints its section
# sizes. bench/bigdwarf/run.sh measures the engine on it.
#
# What large C++ debuginfo is made of, made here: many translation units, each including a
# broad set of the standard library's headers (<bits/stdc++.h>), so that each repeats the types
# it includes as every TU of a real project does (-fno-eliminate-unused-debug-types keeps those
# it does not use, as clang's -fstandalone-debug and many real builds keep most of them), and
# each defining its own records and functions that instantiate and inline standard templates
# over them (containers, algorithms with lambdas, strings, smart pointers, std::function), with
# their line tables. Every TU is its own namespace, so names and addresses are distinct across
# TUs. g++ -std=c++17 -g -O2 (DWARF 5, g++'s default), linked with lld.
#
# To make 1 GB in minutes instead of an hour of CPU: the headers are parsed once, through a
# precompiled header (g++ emits the same DWARF with it), and only $BASES distinct TUs are
# compiled. The other TUs differ from their base only in their namespace's name (m<base>_<copy>,
# of the same length), so their objects are made by replacing that name in the base's object,
# byte for byte. The script compiles one such copy from its source and checks that the two
# objects carry the same DWARF (llvm-dwarfdump of .debug_info, .debug_line, .debug_rnglists,
# .debug_aranges; the bytes of .debug_loclists), code (objdump -dr) and symbols: they differ
# only in the order of the strings in .debug_str (g++ orders them by hash), which the link
# merges anyway. So every object is, but for that order, what g++ makes of its source (all
# sources are written).
#
# About 2.1 MB of DWARF per TU: BASES=20 COPIES=33 (660 TUs) gives 1.39 GB of DWARF in a 1.43 GB
# file. On 2 cores shared with other work: the compiles 4 minutes (134 s of CPU, 350 MB per
# job), the copies a few seconds, the link 13 s (5.3 GB of memory).
#
# Env: BASES (distinct TUs compiled, default 20), COPIES (TUs per base, default 33), FUNCS
#      (generated functions per TU, default 2), JOBS (default nproc), BIGDWARF_DIR (default
#      ${XDG_CACHE_HOME:-$HOME/.cache}/profsym/bigdwarf).
# Output: $BIGDWARF_DIR/bigdwarf (the executable, DWARF inside), its path on the last line of
# stdout. Built again only when the recipe (this script, BASES, COPIES, FUNCS, the compiler's and
# the linker's versions) changes.
set -euo pipefail

BASES=${BASES:-20}
COPIES=${COPIES:-33}
FUNCS=${FUNCS:-2}
JOBS=${JOBS:-$(nproc)}
dir=${BIGDWARF_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/profsym/bigdwarf}
CXX=g++
CXXFLAGS="-std=c++17 -g -O2 -fno-eliminate-unused-debug-types"

log() { printf 'bench/bigdwarf: %s\n' "$*" >&2; }
for tool in "$CXX" ld.lld make perl size objdump objcopy nm llvm-dwarfdump /usr/bin/time; do
	command -v "$tool" >/dev/null || { log "missing $tool (apt-get install -y g++ lld llvm make perl binutils time)"; exit 1; }
done
((BASES >= 1 && BASES <= 100 && COPIES >= 1 && COPIES <= 10000 && FUNCS >= 1)) || { log "BASES must be 1-100, COPIES 1-10000, FUNCS >= 1"; exit 1; }

# The recipe hashes the script without its comments: a comment changed builds nothing again.
recipe="$(grep -v '^[[:space:]]*#' "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16) bases=$BASES copies=$COPIES funcs=$FUNCS cxx=$("$CXX" --version | head -n 1) ld=$(ld.lld --version | head -n 1)"
ns() { printf 'm%02d_%04d' "$1" "$2"; }

if [[ -x $dir/bigdwarf && -f $dir/recipe && $(cat "$dir/recipe") == "$recipe" ]]; then
	log "already built: $dir/bigdwarf ($recipe)"
else
	rm -rf "$dir"
	mkdir -p "$dir/src" "$dir/obj"
	log "generating $((BASES * COPIES)) translation units ($BASES bases x $COPIES copies, $FUNCS functions each) in $dir/src"
	printf '#include <bits/stdc++.h>\n' >"$dir/src/common.h"
	for ((b = 0; b < BASES; b++)); do
		# Base b's source, with NS for its namespace; each copy's source is it with NS replaced.
		{
			printf '#include "common.h"\nnamespace NS {\n'
			for ((i = 0; i < FUNCS; i++)); do
				# Per function: a record type of its own, so each template below is a new
				# instantiation, inlined into the function at -O2. The constants vary by base.
				cat <<C
struct Rec$i {
  std::string name;
  long id = $((b * FUNCS + i));
  double weight = $i.5;
  std::vector<int> tags;
  std::optional<std::string> note;
  $(for ((x = 0; x < b % 4; x++)); do printf 'std::array<int, %d> extra%d{};' $((x + 2)) "$x"; done)
  bool operator<(const Rec$i& o) const { return id < o.id || (id == o.id && name < o.name); }
};
__attribute__((noinline)) long fn$i(int n, const std::string& seed) {
  std::vector<Rec$i> recs;
  for (int k = 0; k < n; k++) {
    Rec$i r;
    r.name = seed + std::to_string(k * $((i + 3)));
    r.id = (k * $((b % 97 + 7))) % (n + 1);
    r.tags.assign(k % $((b % 5 + 2)), k);
    if (k % 3 == 0) r.note = r.name + "/note";
    recs.push_back(std::move(r));
  }
  std::sort(recs.begin(), recs.end());
  std::map<std::string, std::shared_ptr<Rec$i>> byName;
  std::unordered_map<long, std::vector<const Rec$i*>> byID;
  for (const auto& r : recs) {
    byName.emplace(r.name, std::make_shared<Rec$i>(r));
    byID[r.id].push_back(&r);
  }
  std::function<long(const Rec$i&)> score = [&](const Rec$i& r) {
    return r.id * $((i + b + 1)) + static_cast<long>(r.tags.size()) + (r.note ? 1 : 0);
  };
  long total = std::accumulate(recs.begin(), recs.end(), 0L, [&](long a, const Rec$i& r) { return a + score(r); });
  auto it = std::find_if(recs.begin(), recs.end(), [&](const Rec$i& r) { return r.weight > $i && r.id % 7 == $(((i + b) % 7)); });
  std::set<long> ids;
  for (const auto& [k, v] : byID) ids.insert(k + static_cast<long>(v.size()));
  std::ostringstream os;
  os << total << ':' << byName.size() << ':' << ids.size() << ':' << (it == recs.end() ? -1 : it->id);
  return static_cast<long>(os.str().size()) + total;
}
C
			done
			printf 'long run(int n) {\n  long s = 0;\n'
			for ((i = 0; i < FUNCS; i++)); do printf '  s += fn%d(n, "NS.%d.");\n' "$i" "$i"; done
			printf '  return s;\n}\n}  // namespace NS\n'
		} >"$dir/base.cc"
		for ((c = 0; c < COPIES; c++)); do
			sed "s/NS/$(ns "$b" "$c")/g" "$dir/base.cc" >"$dir/src/$(ns "$b" "$c").cc"
		done
	done
	rm "$dir/base.cc"
	{
		printf '#include <cstdio>\n#include <cstdlib>\n'
		for ((b = 0; b < BASES; b++)); do for ((c = 0; c < COPIES; c++)); do printf 'namespace %s { long run(int n); }\n' "$(ns "$b" "$c")"; done; done
		printf 'int main(int argc, char** argv) {\n  int n = argc > 1 ? std::atoi(argv[1]) : 10;\n  long s = 0;\n'
		for ((b = 0; b < BASES; b++)); do for ((c = 0; c < COPIES; c++)); do printf '  s += %s::run(n);\n' "$(ns "$b" "$c")"; done; done
		printf '  std::printf("%%ld\\n", s);\n  return 0;\n}\n'
	} >"$dir/src/main.cc"
	bases=$(for ((b = 0; b < BASES; b++)); do printf 'obj/%s.o ' "$(ns "$b" 0)"; done)
	check=
	if ((COPIES > 1)); then check=check/$(ns 0 1).o; fi
	cat >"$dir/Makefile" <<M
CXX = $CXX
CXXFLAGS = $CXXFLAGS
all: obj/main.o $bases $check
obj/common.h.gch: src/common.h
	\$(CXX) \$(CXXFLAGS) -x c++-header \$< -o \$@
obj/%.o: src/%.cc obj/common.h.gch
	\$(CXX) \$(CXXFLAGS) -Iobj -c \$< -o \$@
check/%.o: src/%.cc obj/common.h.gch
	@mkdir -p check
	\$(CXX) \$(CXXFLAGS) -Iobj -c \$< -o \$@
M
	log "compiling $BASES bases, main and one copy to check, with make -j$JOBS ($CXX $CXXFLAGS)"
	start=$(date +%s)
	/usr/bin/time -f '%e s wall, %U s user, %S s system, %M KB peak RSS of the largest job' -o "$dir/compile.time" \
		make -C "$dir" -j"$JOBS" -s all
	log "compiled in $(($(date +%s) - start)) s: $(cat "$dir/compile.time")"
	log "making the copies' objects from their bases"
	for ((b = 0; b < BASES; b++)); do
		for ((c = 1; c < COPIES; c++)); do
			from=$(ns "$b" 0) to=$(ns "$b" "$c")
			FROM=$from TO=$to perl -0777 -pe 's/\Q$ENV{FROM}\E/$ENV{TO}/g' "$dir/obj/$from.o" >"$dir/obj/$to.o"
		done
	done
	if [[ -n $check ]]; then
		# llvm-dwarfdump 14 cannot print g++'s location views (DW_LLE_view_pair): loclists
		# are compared as bytes (they hold no string offsets).
		dump() {
			llvm-dwarfdump --debug-info --debug-line --debug-rnglists --debug-aranges "$1" | tail -n +2
			objdump -dr "$1" | tail -n +3
			nm "$1"
			objcopy -O binary --only-section=.debug_loclists "$1" /dev/stdout
		}
		dump "$dir/$check" >"$dir/check.dump"
		dump "$dir/obj/$(ns 0 1).o" >"$dir/copy.dump"
		cmp -s "$dir/check.dump" "$dir/copy.dump" || { log "$(ns 0 1).o made from its base differs from g++'s object of its source (diff $dir/check.dump $dir/copy.dump)"; exit 1; }
		rm "$dir/check.dump" "$dir/copy.dump"
		log "$(ns 0 1).o made from its base has the DWARF, code and symbols of g++'s object of src/$(ns 0 1).cc"
	fi
	log "linking $((BASES * COPIES)) objects with lld"
	start=$(date +%s)
	(cd "$dir" && /usr/bin/time -f '%e s wall, %U s user, %S s system, %M KB peak RSS' -o link.time \
		"$CXX" -fuse-ld=lld -o bigdwarf obj/main.o $(for ((b = 0; b < BASES; b++)); do for ((c = 0; c < COPIES; c++)); do printf 'obj/%s.o ' "$(ns "$b" "$c")"; done; done))
	log "linked in $(($(date +%s) - start)) s: $(cat "$dir/link.time")"
	"$dir/bigdwarf" 3 >/dev/null || { log "the built program does not run"; exit 1; }
	# The objects are not needed once linked (about as large as the executable).
	rm -rf "$dir/obj" "$dir/check"
	echo "$recipe" >"$dir/recipe"
fi

size -A -d "$dir/bigdwarf" | awk '
	$1 ~ /^\.(debug_|text$)/ { printf "%-22s %10.1f MB\n", $1, $2 / 1e6; if ($1 ~ /^\.debug_/) total += $2 }
	END { printf "%-22s %10.1f MB\n", "DWARF (.debug_*)", total / 1e6 }'
printf '%s\n' "$dir/bigdwarf"
