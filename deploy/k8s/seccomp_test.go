package k8s_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// The shipped collector profile must allow what the collector needs (bpf, perf_event_open and
// the file and /proc reads behind them) and refuse what it never does.
func TestSeccompProfile(t *testing.T) {
	data, err := os.ReadFile("seccomp/profsym-collector.json")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatalf("profile: %v", err)
	}
	if p.DefaultAction != "SCMP_ACT_ALLOW" {
		t.Fatalf("defaultAction %s: the profile is a deny list on top of allow", p.DefaultAction)
	}
	var denied []string
	for _, s := range p.Syscalls {
		if s.Action != "SCMP_ACT_ALLOW" {
			denied = append(denied, s.Names...)
		}
	}
	for _, need := range []string{"bpf", "perf_event_open", "ioctl", "openat", "read", "pread64", "mmap", "process_vm_readv"} {
		if slices.Contains(denied, need) {
			t.Errorf("the profile refuses %s, which the collector needs", need)
		}
	}
	for _, never := range []string{"init_module", "finit_module", "kexec_load", "mount", "setns", "unshare", "pivot_root"} {
		if !slices.Contains(denied, never) {
			t.Errorf("the profile allows %s", never)
		}
	}
}
