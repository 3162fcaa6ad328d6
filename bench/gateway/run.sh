#!/usr/bin/env bash
# Gateway benchmark: added latency (p50/p99 of the OTLP/gRPC Export round trip through the
# gateway minus the same request sent straight to a sink, sent in pairs, N pairs one after the
# other; read the CONCURRENCY=1 run: with several senders on 2 cores the latency phase is
# unaffected but the machine is busier) and throughput (requests and
# locations per second) for eBPF-profiler-shaped requests of LOCATIONS distinct locations over
# MAPPINGS binaries, with a warm symbolizer. In one run, on the same symbolizer, sink and
# requests, it measures the gateway, a Collector distribution (services/gateway), and
# the hand-written gateway it replaces, built from git at OLD_REF, both with their in-process
# result cache (the steady state of a fleet); the hand-written one also without it
# (UNCACHED=1: every request asks the symbolizer).
#
#   bench/gateway/run.sh
#   LOCATIONS=500 MAPPINGS=20 DURATION=15s CONCURRENCY=8 bench/gateway/run.sh
#   OLD_REF=main bench/gateway/run.sh
#   OLD_REF=none bench/gateway/run.sh      # the Collector gateway only
#   RESULTS=gateway.json bench/gateway/run.sh   # also the figures as JSON (for bench/report)
set -euo pipefail

LOCATIONS=${LOCATIONS:-500}
MAPPINGS=${MAPPINGS:-20}
SAMPLES=${SAMPLES:-200}
LIBS=${LIBS:-24}
FUNCS=${FUNCS:-300}
N=${N:-1000}
DURATION=${DURATION:-15s}
CONCURRENCY=${CONCURRENCY:-8}
# The last commit whose services/gateway is the hand-written gateway.
OLD_REF=${OLD_REF:-6e14302}
UNCACHED=${UNCACHED:-0}
RESULTS=${RESULTS:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d)
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

PYTHON=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
freeport() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
waitfor() { for _ in $(seq 1 200); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "timeout waiting for $1" >&2; exit 1; }

echo "building symbolizer, driver, the Collector gateway and the hand-written gateway at $OLD_REF" >&2
(cd "$ROOT" && go build -o "$WORK/symbolizer" ./services/symbolizer && go build -o "$WORK/driver" ./bench/gateway/driver)
(cd "$ROOT/services/gateway" && go build -o "$WORK/gateway-otelcol" .)
if [ "$OLD_REF" != none ]; then
	# The old gateway from git, not from the work tree: it is what the distribution replaces.
	mkdir -p "$WORK/old"
	git -C "$ROOT" archive "$OLD_REF" go.mod go.sum gen pkg services/gateway | tar -x -C "$WORK/old"
	(cd "$WORK/old" && GOFLAGS=-mod=mod go build -o "$WORK/gateway-old" ./services/gateway)
fi

echo "compiling $LIBS libraries of $FUNCS functions (-O2 -g)" >&2
mkdir -p "$WORK/libs"
"$PYTHON" - "$WORK/libs/lib.c" "$FUNCS" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    f.write("static inline int mix(int x, int k) { return (x * 2654435761u) ^ (k + SEED); }\n")
    for i in range(n):
        f.write(f"__attribute__((noinline)) int f{i}(int x) {{ int s = 0; for (int j = 0; j < x; j++) s += mix(j, {i}); return s + {i}; }}\n")
PY
BINS=()
for i in $(seq 1 "$LIBS"); do
	gcc -O2 -g -shared -fPIC -Wl,--build-id -DSEED="$i" -o "$WORK/libs/lib$i.so" "$WORK/libs/lib.c" &
	BINS+=("$WORK/libs/lib$i.so")
	if (( i % 2 == 0 )); then wait; fi
done
wait
BINLIST=$(IFS=,; echo "${BINS[*]}")

SYM=$(freeport)
"$WORK/symbolizer" serve --listen "127.0.0.1:$SYM" --store-dir "$WORK/store" --upload-token bench --log-level warn 2>"$WORK/symbolizer.log" &
PIDS+=($!)
waitfor "http://127.0.0.1:$SYM/readyz"
"$WORK/symbolizer" upload --server "http://127.0.0.1:$SYM" --token bench --progress plain "${BINS[@]}" >/dev/null

SINK=$(freeport)
"$WORK/driver" -sink-listen "127.0.0.1:$SINK" &
PIDS+=($!)

run_old() { # label, extra flags...
	local label=$1; shift
	local g h a
	g=$(freeport); h=$(freeport); a=$(freeport)
	"$WORK/gateway-old" --grpc-listen "127.0.0.1:$g" --http-listen "127.0.0.1:$h" --admin-listen "127.0.0.1:$a" \
		--symbolizer-url "http://127.0.0.1:$SYM" --otlp-grpc-endpoint "127.0.0.1:$SINK" --otlp-insecure \
		--log-level warn "$@" 2>"$WORK/gateway-$label.log" &
	local pid=$!
	PIDS+=($pid)
	waitfor "http://127.0.0.1:$a/readyz"
	"$WORK/driver" -gateway "127.0.0.1:$g" -admin "127.0.0.1:$a" -label "$label" -binaries "$BINLIST" -locations "$LOCATIONS" \
		-mappings "$MAPPINGS" -samples "$SAMPLES" -n "$N" -duration "$DURATION" -concurrency "$CONCURRENCY" -results "$WORK/results-$label.json"
	curl -fsS "http://127.0.0.1:$a/metrics" | grep -E '^profsym_gateway_(locations_(seen|symbolized)_total|locations_unresolved_total|symbol_cache_hits_total)' | sed "s/^/$label: /"
	kill "$pid"
}

run_otelcol() { # label
	local label=$1
	local g h m hc
	g=$(freeport); h=$(freeport); m=$(freeport); hc=$(freeport)
	# The production pipeline (memory_limiter, symbolize, otlp_grpc with its in-memory sending
	# queue and gzip), on loopback.
	cat >"$WORK/$label.yaml" <<YAML
extensions:
  health_check:
    endpoint: 127.0.0.1:$hc
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:$g
      http:
        endpoint: 127.0.0.1:$h
processors:
  memory_limiter:
    check_interval: 1s
    limit_mib: 1024
    spike_limit_mib: 256
  symbolize:
    endpoint: http://127.0.0.1:$SYM
exporters:
  otlp_grpc:
    endpoint: 127.0.0.1:$SINK
    tls:
      insecure: true
    sending_queue:
      num_consumers: 2
service:
  extensions: [health_check]
  telemetry:
    logs:
      level: warn
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: $m
  pipelines:
    profiles:
      receivers: [otlp]
      processors: [memory_limiter, symbolize]
      exporters: [otlp_grpc]
YAML
	"$WORK/gateway-otelcol" --config "$WORK/$label.yaml" 2>"$WORK/gateway-$label.log" &
	local pid=$!
	PIDS+=($pid)
	waitfor "http://127.0.0.1:$hc/"
	"$WORK/driver" -gateway "127.0.0.1:$g" -label "$label" -binaries "$BINLIST" -locations "$LOCATIONS" \
		-mappings "$MAPPINGS" -samples "$SAMPLES" -n "$N" -duration "$DURATION" -concurrency "$CONCURRENCY" -results "$WORK/results-$label.json"
	curl -fsS "http://127.0.0.1:$m/metrics" | grep -E '^otelcol_(processor_symbolize_(frames_resolved|cache_hits)|receiver_accepted_profile_samples)' | sed "s/^/$label: /"
	kill "$pid"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "machine: $(nproc) cores, $(uname -r), load average $LOAD_BEFORE"
if [ "$OLD_REF" != none ]; then run_old hand-written-cached; fi
run_otelcol otelcol-cached
if [ "$UNCACHED" = 1 ] && [ "$OLD_REF" != none ]; then run_old hand-written-uncached --symbol-cache-entries=-1; fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average after: $LOAD_AFTER"
if [ -n "$RESULTS" ]; then
	jq -s --arg lb "$LOAD_BEFORE" --arg la "$LOAD_AFTER" '{load_before: $lb, load_after: $la, runs: .}' "$WORK"/results-*.json >"$RESULTS"
	echo "results written to $RESULTS" >&2
fi
