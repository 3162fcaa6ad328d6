package kernels

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// verifierLimit is the kernel's budget of instructions the verifier may process for one
// program (BPF_COMPLEXITY_LIMIT_INSNS).
const verifierLimit = 1_000_000

// headroom is the share of that budget a program may use on any kernel: the verifier's work
// on the same program has changed several-fold from one release to the next.
const headroom = verifierLimit / 4

// programCheck is one program's line of `collector --check-kernel`.
type programCheck struct {
	Name          string `json:"name"`
	Loaded        bool   `json:"loaded"`
	VerifiedInsns uint32 `json:"verified_insns"`
	Error         string `json:"error"`
}

// kernelCheck is the last line of `collector --check-kernel`.
type kernelCheck struct {
	Kernel   string `json:"kernel"`
	Arch     string `json:"arch"`
	AutoMode string `json:"auto_mode"`
	OffCPU   string `json:"off_cpu"`
}

type checkReport struct {
	Programs []programCheck
	Kernel   kernelCheck
}

func (r *checkReport) program(name string) (programCheck, bool) {
	for _, p := range r.Programs {
		if p.Name == name {
			return p, true
		}
	}
	return programCheck{}, false
}

// parseCheck reads the JSON lines of `collector --check-kernel`: the programs, then the
// kernel's line.
func parseCheck(lines []string) (*checkReport, error) {
	r := &checkReport{}
	for i, line := range lines {
		var v struct {
			programCheck
			kernelCheck
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			return nil, fmt.Errorf("check line %d %q: %w", i+1, line, err)
		}
		switch {
		case v.Name != "" && v.Kernel == "":
			if r.Kernel.Kernel != "" {
				return nil, fmt.Errorf("check line %d: a program after the kernel's line", i+1)
			}
			r.Programs = append(r.Programs, v.programCheck)
		case v.Kernel != "" && v.Name == "":
			if r.Kernel.Kernel != "" {
				return nil, fmt.Errorf("check line %d: a second kernel line", i+1)
			}
			r.Kernel = v.kernelCheck
		default:
			return nil, fmt.Errorf("check line %d %q: neither a program nor the kernel", i+1, line)
		}
	}
	if r.Kernel.Kernel == "" {
		return nil, errors.New("no kernel line (did --check-kernel stop early?)")
	}
	if len(r.Programs) == 0 {
		return nil, errors.New("no program lines")
	}
	return r, nil
}

// The collector's programs. What each needs of the kernel: the CFI ones bpf_loop (5.17); the
// BTF frame-pointer ones bpf_get_current_task_btf, bpf_task_pt_regs and task storage (5.15);
// profile_cpu_compat and the process events the BPF ring buffer (5.8).
var (
	cfiPrograms    = []string{"profile_cpu_cfi", "off_cpu_switch_cfi"}
	btfPrograms    = []string{"profile_cpu", "off_cpu_switch"}
	compatPrograms = []string{"profile_cpu_compat", "on_exec", "on_exit"}
)

// expectation is what a kernel of some release must accept.
type expectation struct {
	load     []string // programs the verifier must accept
	autoMode string   // the unwinder --unwinder=auto runs
	offCPU   string   // how off-CPU profiling runs when asked for
}

// expect says what a kernel release (uname -r: "5.10.0-32-amd64", "7.2.13+deb14-arm64")
// must accept.
func expect(release string) (expectation, error) {
	major, minor, err := majorMinor(release)
	if err != nil {
		return expectation{}, err
	}
	v := major*1000 + minor
	switch {
	case v >= 5017:
		return expectation{load: concat(cfiPrograms, btfPrograms, compatPrograms), autoMode: "cfi", offCPU: "cfi"}, nil
	case v >= 5015:
		return expectation{load: concat(btfPrograms, compatPrograms), autoMode: "frame-pointers", offCPU: "frame-pointers"}, nil
	case v >= 5008:
		return expectation{load: compatPrograms, autoMode: "frame-pointers-compat", offCPU: "none"}, nil
	}
	return expectation{}, fmt.Errorf("kernel %s is older than any the collector supports (5.8)", release)
}

func majorMinor(release string) (int, int, error) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("kernel release %q: no major.minor", release)
	}
	minor := parts[1]
	if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = minor[:i]
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("kernel release %q: no major.minor", release)
	}
	return ma, mi, nil
}

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// checkErrors says where a kernel's answer falls short of its expectation; arch is the
// architecture the collector was built for.
func checkErrors(r *checkReport, arch string) []string {
	var errs []string
	want, err := expect(r.Kernel.Kernel)
	if err != nil {
		return []string{err.Error()}
	}
	if r.Kernel.Arch != arch {
		errs = append(errs, fmt.Sprintf("the collector says arch %q, want %q", r.Kernel.Arch, arch))
	}
	for _, name := range want.load {
		p, ok := r.program(name)
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("%s: not reported", name))
		case !p.Loaded:
			errs = append(errs, fmt.Sprintf("%s: refused by %s, which has what it needs: %s", name, r.Kernel.Kernel, p.Error))
		case p.VerifiedInsns == 0:
			errs = append(errs, fmt.Sprintf("%s: loaded, but the verifier's instruction count is missing", name))
		}
	}
	for _, p := range r.Programs {
		if p.VerifiedInsns > headroom {
			errs = append(errs, fmt.Sprintf("%s: the verifier processed %d instructions, more than a quarter of its %d budget", p.Name, p.VerifiedInsns, verifierLimit))
		}
	}
	if r.Kernel.AutoMode != want.autoMode {
		errs = append(errs, fmt.Sprintf("--unwinder=auto would run %q, want %q", r.Kernel.AutoMode, want.autoMode))
	}
	if r.Kernel.OffCPU != want.offCPU {
		errs = append(errs, fmt.Sprintf("off-CPU profiling would run %q, want %q", r.Kernel.OffCPU, want.offCPU))
	}
	return errs
}

func TestParseCheck(t *testing.T) {
	lines := []string{
		`{"name":"off_cpu_switch","loaded":false,"verified_insns":0,"error":"map off_cpu_pending: map create: invalid argument"}`,
		`{"name":"profile_cpu_compat","loaded":true,"verified_insns":122}`,
		`{"kernel":"5.10.0-32-amd64","arch":"amd64","auto_mode":"frame-pointers-compat","off_cpu":"none"}`,
	}
	r, err := parseCheck(lines)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Programs) != 2 || r.Programs[0].Error == "" || r.Programs[1].VerifiedInsns != 122 ||
		r.Kernel != (kernelCheck{"5.10.0-32-amd64", "amd64", "frame-pointers-compat", "none"}) {
		t.Fatalf("parsed %+v", r)
	}
	for _, bad := range [][]string{
		lines[:2],                           // stopped before the kernel's line
		lines[2:],                           // no program
		{lines[2], lines[1]},                // a program after the kernel
		{lines[1], lines[2], lines[2]},      // two kernel lines
		{lines[1], "{}", lines[2]},          // neither
		{lines[1], "not json", lines[2]},    // not JSON
		{`{"name":"x","kernel":"y"}`, "{}"}, // both
	} {
		if _, err := parseCheck(bad); err == nil {
			t.Errorf("parseCheck(%q): no error", bad)
		}
	}
}

func TestExpect(t *testing.T) {
	for _, tt := range []struct {
		release, mode string
		loads         int
	}{
		{"5.10.0-32-amd64", "frame-pointers-compat", 3},
		{"5.15.0-1-generic", "frame-pointers", 5},
		{"5.16.20", "frame-pointers", 5},
		{"5.17.0", "cfi", 7},
		{"6.1.0-57-arm64", "cfi", 7},
		{"6.12.117+deb13-amd64", "cfi", 7},
		{"7.2.13+deb14-arm64", "cfi", 7},
		{"6.18.0-rc3", "cfi", 7},
	} {
		e, err := expect(tt.release)
		if err != nil || e.autoMode != tt.mode || len(e.load) != tt.loads {
			t.Errorf("expect(%q) = %+v, %v; want mode %s with %d programs", tt.release, e, err, tt.mode, tt.loads)
		}
	}
	for _, bad := range []string{"4.19.0-20-amd64", "6", "x.y", ""} {
		if _, err := expect(bad); err == nil {
			t.Errorf("expect(%q): no error", bad)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	all := func(insns uint32) []programCheck {
		var ps []programCheck
		for _, n := range concat(cfiPrograms, btfPrograms, compatPrograms) {
			ps = append(ps, programCheck{Name: n, Loaded: true, VerifiedInsns: insns})
		}
		return ps
	}
	good := &checkReport{Programs: all(6429), Kernel: kernelCheck{"7.2.13+deb14-amd64", "amd64", "cfi", "cfi"}}
	if errs := checkErrors(good, "amd64"); len(errs) != 0 {
		t.Errorf("a good report: %v", errs)
	}
	if errs := checkErrors(good, "arm64"); len(errs) != 1 {
		t.Errorf("the wrong arch: %v", errs)
	}
	heavy := &checkReport{Programs: all(headroom + 1), Kernel: good.Kernel}
	if errs := checkErrors(heavy, "amd64"); len(errs) != 7 {
		t.Errorf("every program over the headroom: %d errors, want 7: %v", len(errs), errs)
	}
	refused := &checkReport{Programs: all(6429), Kernel: kernelCheck{"5.10.0-32-amd64", "amd64", "none", "none"}}
	for i := range refused.Programs {
		refused.Programs[i].Loaded = false
		refused.Programs[i].Error = "map events: map create: operation not permitted"
	}
	errs := checkErrors(refused, "amd64")
	if len(errs) != 4 || !strings.Contains(errs[0], "operation not permitted") {
		t.Errorf("5.10 refusing its programs: %v", errs)
	}
}
