// Package arm64 proves the collector on a real arm64 kernel: Debian's arm64 kernel boots
// under qemu-system-aarch64 (software emulation) with an initramfs that holds busybox, the
// cross-built collector and workloads built without frame pointers; the collector's OTLP
// output comes back over the serial console, and the test checks on the host that the
// stacks are whole and that the engine names their frames as llvm-symbolizer does.
//
// fetch-debian.sh downloads the kernel and the arm64 userland with apt, build-guest.sh
// builds the initramfs, testdata/init.sh is the guest's /init.
package arm64
