// Package kernels runs the collector on the kernels it is meant for: Debian's amd64 and arm64
// builds of Linux 5.10, 6.1, 6.12 and 7.2, each booted under qemu (software emulation) with a
// busybox initramfs, and the machine's own kernel. On every kernel the collector's
// --check-kernel says which of its eBPF programs the verifier accepts and with how much work;
// on a few the collector also samples a workload built without frame pointers and the test
// checks how many of its stacks come back whole. docs/kernels.md holds the table the test
// logs.
//
// fetch-kernels.sh downloads the kernels with apt (cached), build-guest.sh builds the
// initramfs of one architecture, testdata/init.sh is the guest's /init.
package kernels
