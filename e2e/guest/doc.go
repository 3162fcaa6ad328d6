// Package guest is what the tests that boot a kernel under qemu share: the guest's /init
// reports over the serial console in lines tagged "@@e2e " (the kernel, the workloads' pids,
// the collector's check of the kernel, its metrics and its output file in base64), Boot runs
// qemu and ParseConsole reads those lines back. e2e/arm64 and e2e/kernels use it.
package guest
