#!/usr/bin/env bash
# bench/scale: the release-day drill at full size (docs/design/0006-fleet-scale.md), with
# build-ID affinity and then without it (each gateway pinned to one replica, as through a
# Service), and the two side by side: 200 simulated nodes, 2 gateways, 3 symbolizers on MinIO
# and a Redis Cluster of three masters with a replica each, 300 binaries (150 stored, 150
# released during the drill; 4 over 100 MB, 30 of 16 to 72 MB, the rest small), phases steady
# / release (RELEASES times in a row, default 5, each with binaries never seen; the worst is
# reported) / a replica killed and restarted. `make test` runs the short variant (24 nodes, 30
# binaries, one over 100 MB, two releases). The run without affinity reports, rather than fails on, the
# coverage it misses. Needs .ci/install-deps (MinIO, redis, helm, golangci-lint, toxiproxy).
#
#   bench/scale/run.sh
#   NODES=100 BINARIES=100 MEDIUM=10 LARGE=2 RELEASES=3 bench/scale/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/drill.test" ./bench/scale
status=0
for affinity in true false; do
	echo "== release-day drill, affinity=$affinity"
	start=$(date +%s)
	"$work/drill.test" -test.count=1 -test.timeout 60m -test.run TestReleaseDay -test.v \
		-drill.nodes="${NODES:-200}" -drill.binaries="${BINARIES:-300}" -drill.medium="${MEDIUM:-30}" \
		-drill.large="${LARGE:-4}" -drill.releases="${RELEASES:-5}" -drill.affinity="$affinity" -drill.report="$work/$affinity.tsv" |
		grep -E 'drill_test.go:[0-9]+: |^(--- |ok|FAIL|PASS)' | grep -v -E 'ready at|cluster of' || status=1
	echo "($(($(date +%s) - start)) s)"
done
[ -s "$work/true.tsv" ] && [ -s "$work/false.tsv" ] || { echo "bench/scale: a run wrote no report" >&2; exit 1; }
echo
echo "== side by side ($(nproc) cores, $(date -u +%Y-%m-%d))"
# Both runs write the same rows in the same order.
paste "$work/true.tsv" "$work/false.tsv" | awk -F'\t' '
	BEGIN { printf "| phase | figure | affinity | pinned (no affinity) |\n|---|---|---|---|\n" }
	{ if ($1 != $4 || $2 != $5) { print "rows differ: " $1 "/" $2 " and " $4 "/" $5 > "/dev/stderr"; exit 1 }
	  printf "| %s | %s | %s | %s |\n", $1, $2, $3, $6 }'
exit $status
