//go:build linux

package bpfprog

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// MinCFIKernel is the oldest kernel the CFI unwinder runs on: bpf_loop (5.17) walks the
// frames, after bpf_task_pt_regs (5.15) gave the user registers and the ring buffer (5.8).
const MinCFIKernel = "5.17"

// CheckKernel says, naming the kernel, why the collector's programs cannot load here: they
// are compiled once (CO-RE) and relocated against the running kernel's BTF.
func CheckKernel() error {
	if _, err := btf.LoadKernelSpec(); err != nil {
		return fmt.Errorf("the collector needs a kernel with BTF (CONFIG_DEBUG_INFO_BTF=y, /sys/kernel/btf/vmlinux), this kernel is %s on %s: %w", kernelRelease(), runtime.GOARCH, err)
	}
	return nil
}

// helper is a BPF helper a program calls, by the name the kernel's documentation gives it.
type helper struct {
	fn   asm.BuiltinFunc
	name string
}

// missingHelper probes for helpers of perf-event programs in order and names the first this
// kernel lacks ("" when it has them all); err is a probe that could not run.
func missingHelper(helpers ...helper) (string, error) {
	for _, h := range helpers {
		err := features.HaveProgramHelper(ebpf.PerfEvent, h.fn)
		if errors.Is(err, ebpf.ErrNotSupported) {
			return h.name, nil
		}
		if err != nil {
			return "", privilegeError("probe for the "+h.name+" helper", err)
		}
	}
	return "", nil
}

// CheckCFISupport says, naming the kernel, why the CFI unwinder cannot run here.
func CheckCFISupport() error {
	missing, err := missingHelper(helper{asm.FnLoop, "bpf_loop"}, helper{asm.FnTaskPtRegs, "bpf_task_pt_regs"})
	if err != nil {
		return err
	}
	if missing != "" {
		return fmt.Errorf("CFI unwinding needs Linux %s or later (the %s helper), this kernel is %s: run with --unwinder=frame-pointers", MinCFIKernel, missing, kernelRelease())
	}
	return nil
}

// KernelRelease is the running kernel's release (uname -r).
func KernelRelease() string { return kernelRelease() }

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}
