#!/usr/bin/env bash
# bench/scale: the release-day drill at full size (docs/design/0006-fleet-scale.md), with
# build-ID affinity and then without it (each gateway pinned to one replica, as through a
# Service): 200 simulated nodes, 2 gateways, 3 symbolizers on MinIO and a Redis Cluster of
# three masters with a replica each, 300 binaries (150 stored, 150 released during the drill),
# phases steady / release / replica killed. `make test` runs the short variant (24 nodes, 30
# binaries). The run without affinity reports, rather than fails on, the coverage it misses.
set -euo pipefail
cd "$(dirname "$0")/../.."
for affinity in true false; do
	echo "== release-day drill, affinity=$affinity"
	go test -count=1 -timeout 30m -run TestReleaseDay -v ./bench/scale \
		-drill.nodes="${NODES:-200}" -drill.binaries="${BINARIES:-300}" -drill.affinity="$affinity" |
		grep -E 'drill_test.go:[0-9]+: |^(--- |ok|FAIL)' | grep -v -E 'ready at|cluster of'
done
