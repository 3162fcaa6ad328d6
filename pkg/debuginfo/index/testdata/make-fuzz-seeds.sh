#!/usr/bin/env bash
# Regenerates the FuzzUnmarshal corpus of real indexes (testdata/fuzz/FuzzUnmarshal/real-*):
# the encodings of the indexes built from dwarfsym's C and C++ test programs (gcc and clang,
# DWARF 4 and 5, LTO, gc-sections), compiled with paths relative to the module root so that
# no file names a directory of the machine that made it. Run it (make fuzz-seeds) after a
# change of the index format.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$here/fuzz/FuzzUnmarshal
root=$(cd "$here/../../../.." && pwd)
mkdir -p "$out"
rm -f "$out"/real-*
cd "$root"
PROFSYM_FUZZ_SEEDS=$out go test -count=1 -run '^TestEncodedSize$' ./pkg/debuginfo/dwarfsym/
if grep -l -F "$root" "$out"/real-* >/dev/null 2>&1; then
	echo "make-fuzz-seeds: a seed still names $root" >&2
	exit 1
fi
echo "make-fuzz-seeds: $(ls "$out"/real-* | wc -l) seeds in $out"
