//go:build linux

package bpfprog

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// headroom is the share of the verifier's budget a program may use on any kernel: the
// verifier's work on one program has doubled from one kernel release to the next before
// (docs/kernels.md).
const headroom = VerifierLimit / 4

// TestProgramsVerifyWithHeadroom loads every program on the running kernel and wants each
// that the kernel can run at all within a quarter of the verifier's budget. The kernel matrix
// (e2e/kernels) runs the same check, through `collector check-kernel`, on other kernels.
func TestProgramsVerifyWithHeadroom(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for eBPF")
	}
	checks, err := CheckPrograms()
	if err != nil {
		t.Fatal(err)
	}
	cfiErr := CheckCFISupport()
	var rows []string
	for _, c := range checks {
		rows = append(rows, fmt.Sprintf("%-20s loaded %-5v verified %7d insns (%4.1f%% of the limit) %s", c.Name, c.Loaded, c.VerifiedInsns,
			100*float64(c.VerifiedInsns)/VerifierLimit, c.Error))
		if c.VerifiedInsns > headroom {
			t.Errorf("%s: the verifier processed %d instructions, more than a quarter of its %d budget", c.Name, c.VerifiedInsns, VerifierLimit)
		}
		// The programs this kernel has the helpers for must load: the CFI ones from 5.17,
		// the compatible frame-pointer one everywhere.
		mustLoad := c.Name == "profile_cpu_compat" || c.Name == "on_exec" || c.Name == "on_exit" ||
			(cfiErr == nil && (c.Name == "profile_cpu_cfi" || c.Name == "off_cpu_switch_cfi" || c.Name == "profile_cpu" || c.Name == "off_cpu_switch"))
		if mustLoad && !c.Loaded {
			t.Errorf("%s: refused by this kernel: %s", c.Name, c.Error)
		}
	}
	t.Logf("kernel %s:\n%s", kernelRelease(), strings.Join(rows, "\n"))
}

// TestFallBackToFramePointers makes the kernel refuse the CFI unwinder (a rows map larger
// than it allocates) and wants frame-pointer sampling with the reason, or, without FallBack,
// the error.
func TestFallBackToFramePointers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for eBPF")
	}
	if err := CheckCFISupport(); err != nil {
		t.Skipf("the CFI unwinder cannot run here at all: %v", err)
	}
	refused := Options{FrequencyHz: 19, Unwinder: UnwindCFI, UnwindRows: 1 << 31, PIDs: []uint32{uint32(os.Getpid())},
		OffCPU: &OffCPUOptions{Probability: 1, MinBlocked: time.Millisecond}}
	if s, err := Open(refused, nil); err == nil {
		_ = s.Close()
		t.Fatal("Open with a 32 GiB rows map and no fall-back: no error")
	} else if !strings.Contains(err.Error(), "unwind_rows") {
		t.Errorf("the error does not name the refused map: %v", err)
	}
	refused.FallBack = true
	s, err := Open(refused, nil)
	if err != nil {
		t.Fatalf("Open with FallBack: %v", err)
	}
	defer s.Close()
	mode, why := s.Mode()
	if s.CFI() || !strings.HasPrefix(mode, "frame-pointers") || why == nil || !strings.Contains(why.Error(), "unwind_rows") {
		t.Errorf("Mode = %q, %v; want frame-pointers with the map's refusal", mode, why)
	}
	if s.OffCPUOff() != nil {
		t.Errorf("off-CPU profiling is off after the fall-back: %v", s.OffCPUOff())
	}
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
}
