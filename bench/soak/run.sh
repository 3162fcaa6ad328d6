#!/usr/bin/env bash
# bench/soak: the whole pipeline (eBPF collector -> gateway -> symbolizer on MinIO and Redis)
# under steady load for DURATION (default 30m), one line per INTERVAL (default 1m) of each
# service's RSS, goroutines and open files, and the load's p99 and rates. Flat lines are the
# target. Not part of CI. Needs root (eBPF) and .ci/install-deps (MinIO, redis-server).
#
#   sudo bench/soak/run.sh                 DURATION=5m INTERVAL=30s RATE=50 bench/soak/run.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
exec go run ./bench/soak -duration "${DURATION:-30m}" -every "${INTERVAL:-1m}" -rate "${RATE:-20}"
