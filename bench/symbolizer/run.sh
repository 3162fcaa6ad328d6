#!/usr/bin/env bash
# bench/symbolizer: Symbolize over loopback against one large binary, 10,000-address batches.
# Phases (see driver/main.go): cold (index built by the first batch), stored (serialized index
# loaded from the store by the first batch), warm (index in memory), memo (the in-process
# result cache holds every address), cached (index not in memory, every address a Redis hit), redis (the cached phase's lookups sent straight to Redis
# with nothing else: the floor under the cached phase on this machine). The in-process result
# cache is off in all but the memo phase.
# Reports addresses per second, p50/p99 latency of the call per batch and its p99 with the
# client's decoding of the answer into frames, the server's CPU time per batch (robust on a
# shared machine, unlike wall time) and its peak RSS (VmHWM). The driver collects garbage as
# the gateway does (pkg/gctune).
#
# Usage: bench/symbolizer/run.sh [BINARY]
#   default BINARY: MinIO from .ci/install-deps (a Go binary over 100 MB) when present,
#   else the symbolizer binary itself.
# Env: BATCHES (distinct batches, default 50), ROUNDS (times the warm, cached and redis phases
#      send them, default 5), COLD_RUNS (default 3), GZIP (true: accept gzip responses; default
#      false, loopback does not need them), PROFSYM_TOOLS, RESULTS (a path: also write the
#      figures there as JSON, for bench/report).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tools=${PROFSYM_TOOLS:-$HOME/.cache/profsym/bin}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-symbolizer.XXXXXX")
trap 'rm -rf "$work"' EXIT
command -v redis-server >/dev/null || { echo "bench/symbolizer: redis-server missing (apt-get install -y redis-server)" >&2; exit 1; }

(cd "$root" && go build -o "$work/symbolizer" ./services/symbolizer && go build -o "$work/driver" ./bench/symbolizer/driver)
bin=${1:-}
if [[ -z $bin ]]; then
	if [[ -x $tools/minio ]]; then bin=$tools/minio; else bin=$work/symbolizer; fi
fi
echo "machine: $(nproc) cores, $(uname -r), $(go version | cut -d' ' -f3)"
"$work/driver" --symbolizer "$work/symbolizer" --binary "$bin" --work "$work" \
	--batches "${BATCHES:-50}" --rounds "${ROUNDS:-5}" --cold-runs "${COLD_RUNS:-3}" --gzip="${GZIP:-false}" \
	--results "${RESULTS:-}"
