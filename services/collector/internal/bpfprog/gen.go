// Package bpfprog loads the collector's eBPF programs (bpf/profiler.c),
// attaches them to one CPU-clock perf event per online CPU and to the exec
// and exit tracepoints, and streams the samples to user space.
package bpfprog

// The generated profiler_bpfel.go and profiler_bpfel.o are committed so that
// machines without clang build the collector; CI regenerates and diffs them.
//go:generate go tool -modfile=../../../../tools/go.mod bpf2go -tags linux -target amd64,arm64 -type psym_stack_event -type psym_proc_event -type psym_row -type psym_file -type psym_proc -cc clang -cflags "-O2 -g -Wall -Werror" profiler ../../../../bpf/profiler.c -- -I../../../../bpf
