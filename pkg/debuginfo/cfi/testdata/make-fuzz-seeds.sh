#!/usr/bin/env bash
# Regenerates the FuzzParseSection corpus (testdata/fuzz/FuzzParseSection): hand-assembled
# .eh_frame and .debug_frame sections that use every call frame instruction, and the frame
# sections of small gcc builds (with and without frame pointers, -O0, a shared library,
# .debug_frame). Needs gcc. Run it (make fuzz-seeds) after a change of what the parser reads.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$here/fuzz/FuzzParseSection
root=$(cd "$here/../../../.." && pwd)
mkdir -p "$out"
rm -f "$out"/hand-* "$out"/gcc-*
cd "$root"
PROFSYM_CFI_FUZZ_SEEDS=$out go test -count=1 -run '^TestWriteFuzzSeeds$' ./pkg/debuginfo/cfi/
echo "make-fuzz-seeds: $(ls "$out" | wc -l) seeds in $out"
