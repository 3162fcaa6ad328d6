// Package e2e holds profsym's end-to-end tests: the eBPF collector, the gateway and the
// symbolizer (backed by a real MinIO and a real Redis) run as processes on loopback against
// the demo's workload, and the symbolized OTLP that comes out is checked; and the demo
// command itself runs non-interactively. They need root (eBPF) and skip in -short mode.
package e2e
