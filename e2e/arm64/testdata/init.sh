#!/bin/busybox sh
# /init of the arm64 guest: starts the workloads, runs the collector on them with an output
# file, scrapes its metrics, and writes everything back over the serial console, each line
# tagged so the host can pick it out of kernel messages. Parameters come from the kernel
# command line (e2e_secs, e2e_hz); lines the host reads start with "@@e2e ".
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
# Only emergencies on the console from now on: the base64 lines must not be interleaved.
echo 1 >/proc/sys/kernel/printk
ip link set lo up

say() { echo "@@e2e $*"; }
finish() {
	say "done"
	sync
	poweroff -f
}
secs=${e2e_secs:-20}
hz=${e2e_hz:-250}
say "kernel $(uname -r) $(uname -m) cpus $(nproc)"

pids=""
start() {
	name=$1
	shift
	"$@" >/dev/null 2>&1 &
	say "pid $name $!"
	pids="$pids${pids:+,}$!"
}
# The workloads outlive the collector; poweroff ends them.
for w in chain-gcc chain-clang chain-pac qsort chain-cxx chain-go reader signal; do
	start "$w" "/w/$w" 3600
done
sleep 1
# The kernel's [vdso] is code outside every file mapping (clock_gettime runs there): frames
# in it are not garbage.
for w in chain-gcc chain-clang chain-pac qsort chain-cxx chain-go reader signal; do
	pid=$(pidof "$w")
	sed -n "s/^\([0-9a-f]*\)-\([0-9a-f]*\) .*\[vdso\]\$/@@e2e vdso $w \1 \2/p" "/proc/$pid/maps"
done

/w/collector --output-file /tmp/out.otlp --frequency "$hz" --interval 3s --unwinder cfi \
	--pid "$pids" --metrics-addr 127.0.0.1:9464 --log-level info &
collector=$!
# Sample for $secs seconds once the eBPF programs are attached (/readyz), not while the
# collector loads them: under emulation that takes a while.
until wget -q -O /dev/null http://127.0.0.1:9464/readyz 2>/dev/null; do
	if ! kill -0 "$collector" 2>/dev/null; then
		wait "$collector"
		say "collector-exit $?"
		finish
	fi
	sleep 0.5
done
say "collector-ready"
sleep "$secs"
wget -q -O - http://127.0.0.1:9464/metrics 2>/dev/null | grep '^profsym_' | sed 's/^/@@e2e metric /'
kill -INT "$collector"
wait "$collector"
say "collector-exit $?"
if [ -f /tmp/out.otlp ]; then
	say "otlp $(wc -c </tmp/out.otlp) $(sha256sum /tmp/out.otlp | cut -d' ' -f1)"
	base64 /tmp/out.otlp | sed 's/^/@@e2e b64 /'
fi
finish
