//go:build linux && !386 && !amd64 && !arm64

package bpfprog

// The collector's eBPF programs are built for Linux on x86-64 and arm64 (bpf2go -target
// amd64,arm64): building for anything else stops here, with this name in the error.
var _ = theCollectorBuildsForLinuxAmd64AndArm64Only
