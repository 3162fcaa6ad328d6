#!/bin/busybox sh
# /init of the matrix's guests: asks the collector what this kernel's verifier says of each of
# its programs (--check-kernel), and with e2e_full=1 on the kernel command line also runs it as
# a node would (default flags but the rate, an output file, the workloads' pids) for e2e_secs
# seconds and sends its metrics and output file back. With e2e_kernel=1 the workload is the
# kernel's own work (/w/brd.ko loaded, a RAM disk, tmpfs, pipes) and the whole node is sampled.
# Lines for the host start with "@@e2e ".
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
secs=${e2e_secs:-15}
hz=${e2e_hz:-250}
say "kernel $(uname -r) $(uname -m) cpus $(nproc)"

# The collector's log goes to the console as it is, for a failure's report.
/w/collector --check-kernel >/tmp/check
status=$?
sed 's/^/@@e2e check /' /tmp/check
say "check-exit $status"
if [ "${e2e_full:-0}" != 1 ] && [ "${e2e_kernel:-0}" != 1 ]; then
	finish
fi

if [ "${e2e_kernel:-0}" = 1 ]; then
	# Kernel frames: a workload that spends its time in the kernel (a RAM disk written and read
	# through the brd module, tmpfs writes, pipes, small syscalls), and the whole node sampled.
	if insmod /w/brd.ko rd_nr=1 rd_size=32768; then
		for f in /sys/module/brd/sections/.* /sys/module/brd/sections/*; do
			[ -f "$f" ] && say "info section.brd.${f##*/} $(cat "$f")"
		done
	else
		say "info insmod-failed brd"
	fi
	say "info stext $(awk '$3 == "_stext" {print $1; exit}' /proc/kallsyms)"
	(while :; do
		dd if=/dev/zero of=/dev/ram0 bs=64k count=256 conv=fsync 2>/dev/null
		echo 1 >/proc/sys/vm/drop_caches
		dd if=/dev/ram0 of=/dev/null bs=64k count=256 2>/dev/null
	done) &
	(while :; do
		dd if=/dev/zero of=/tmp/f bs=4k count=1024 2>/dev/null
		rm -f /tmp/f
	done) &
	(while :; do dd if=/dev/zero bs=4k count=8192 2>/dev/null | cat >/dev/null; done) &
	(while :; do ls -la /proc/self/ /sys/kernel >/dev/null; done) &
	/w/collector --frequency "$hz" --output-file /tmp/out.otlp &
	collector=$!
else
	pids=""
	for w in /w/chain*; do
		name=${w#/w/}
		# The workloads outlive the collector; poweroff ends them.
		"$w" 3600 >/dev/null 2>&1 &
		say "pid $name $!"
		pids="$pids${pids:+,}$!"
	done
	/w/collector --frequency "$hz" --output-file /tmp/out.otlp --pid "$pids" &
	collector=$!
fi
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
