//go:build linux

package bpfprog

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// VerifierLimit is the kernel's budget of instructions the verifier may process for one
// program (BPF_COMPLEXITY_LIMIT_INSNS); a program that needs more is refused.
const VerifierLimit = 1_000_000

// ProgramCheck is what the running kernel's verifier said of one program.
type ProgramCheck struct {
	Name string `json:"name"`
	// Loaded is whether the kernel accepted the program.
	Loaded bool `json:"loaded"`
	// VerifiedInsns is the instructions the verifier processed: bpf_prog_info's
	// verified_insns for a loaded program (Linux 5.16+), the log's "processed N insns" for
	// a refused one (0 when neither tells).
	VerifiedInsns uint32 `json:"verified_insns"`
	// Error is the kernel's reason for refusing it, its last line first.
	Error string `json:"error,omitempty"`
}

// CheckPrograms loads every program of the collector on the running kernel, one at a time
// with the maps it uses, and reports what the verifier said of each. It needs the same
// privileges as the collector. The maps are sized small: the check loads, it does not run.
func CheckPrograms() ([]ProgramCheck, error) {
	// As Open: kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	_ = rlimit.RemoveMemlock()
	spec, err := loadProfiler()
	if err != nil {
		return nil, fmt.Errorf("load eBPF spec: %w", err)
	}
	names := make([]string, 0, len(spec.Programs))
	for name := range spec.Programs {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []ProgramCheck
	for _, name := range names {
		out = append(out, checkProgram(spec, name))
	}
	return out, nil
}

func checkProgram(spec *ebpf.CollectionSpec, name string) ProgramCheck {
	one := spec.Copy()
	for _, m := range []string{"unwind_rows", "unwind_files", "unwind_procs"} {
		if ms, ok := one.Maps[m]; ok {
			ms.MaxEntries = 16
		}
	}
	check := ProgramCheck{Name: name}
	// LoadAndAssign creates only the maps the program uses: a map type this kernel lacks
	// (task storage on 5.10) then refuses only the programs that use it.
	target := reflect.New(reflect.StructOf([]reflect.StructField{{
		Name: "Program", Type: reflect.TypeFor[*ebpf.Program](), Tag: reflect.StructTag(`ebpf:"` + name + `"`),
	}}))
	err := one.LoadAndAssign(target.Interface(), &ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
	})
	if err != nil {
		check.Error = err.Error()
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			check.VerifiedInsns = processedInsns(ve.Log)
			if len(ve.Log) > 0 {
				check.Error = fmt.Sprintf("%v (verifier log: %s)", ve.Cause, lastLines(ve.Log, 3))
			}
		}
		return check
	}
	prog := target.Elem().Field(0).Interface().(*ebpf.Program)
	// The maps go with the program: LoadAndAssign hands only the program out, and the maps'
	// file descriptors are released with it (closed below) once nothing refers to them.
	check.Loaded = true
	if info, err := prog.Info(); err == nil {
		if n, ok := info.VerifiedInstructions(); ok {
			check.VerifiedInsns = n
		}
	}
	if check.VerifiedInsns == 0 {
		// Kernels before 5.16 have no verified_insns: the stats line of the log tells.
		check.VerifiedInsns = processedInsns(prog.VerifierLog)
	}
	if err := prog.Close(); err != nil {
		check.Error = fmt.Sprintf("close after the check: %v", err)
	}
	return check
}

var processedRE = regexp.MustCompile(`processed (\d+) insns`)

// processedInsns reads the verifier log's "processed N insns" line (0 without one).
func processedInsns(log any) uint32 {
	var text string
	switch l := log.(type) {
	case string:
		text = l
	case []string:
		for _, s := range l {
			text += s + "\n"
		}
	}
	m := processedRE.FindAllStringSubmatch(text, -1)
	if len(m) == 0 {
		return 0
	}
	n, err := strconv.ParseUint(m[len(m)-1][1], 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}

func lastLines(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	s := ""
	for i, l := range lines {
		if i > 0 {
			s += " | "
		}
		s += l
	}
	return s
}
