//go:build linux

package bpfprog

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"0-1\n", []int{0, 1}, false},
		{"0,2-3,7", []int{0, 2, 3, 7}, false},
		{"5", []int{5}, false},
		{"", nil, true},
		{"3-1", nil, true},
		{"a-b", nil, true},
		{"0-99999999", nil, true},
	}
	for _, tt := range tests {
		got, err := parseCPUList(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseCPUList(%q) err = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseCPUList(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestDecodeStack(t *testing.T) {
	b := make([]byte, 32)
	b[0], b[8], b[16] = 1, 2, 0
	if got := decodeStack(nil, b, 24); !reflect.DeepEqual(got, []uint64{1, 2}) {
		t.Errorf("decodeStack stops at zero: got %v", got)
	}
	if got := decodeStack(nil, b, -14); len(got) != 0 {
		t.Errorf("decodeStack(errno) = %v, want empty", got)
	}
	if got := decodeStack(nil, b, 4000); len(got) != 2 {
		t.Errorf("decodeStack with lying length = %v", got)
	}
}

type recorder struct {
	mu      sync.Mutex
	samples map[uint32]int
	user    map[uint32]int
	execs   map[uint32]bool
	exits   map[uint32]bool
	kernel  int
}

func (r *recorder) HandleSample(s *Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples[s.TGID]++
	if len(s.User) > 0 {
		r.user[s.TGID]++
	}
	if len(s.Kernel) > 0 {
		r.kernel++
	}
}

func (r *recorder) HandleProcEvent(e ProcEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case ProcExec:
		r.execs[e.TGID] = true
	case ProcExit:
		r.exits[e.TGID] = true
	}
}

func TestSamplerSeesBusyProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for eBPF")
	}
	busy := exec.CommandContext(t.Context(), "sh", "-c", "i=0; while [ $i -lt 100000000 ]; do i=$((i+1)); done")
	s, err := Open(Options{FrequencyHz: 99}, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(busy.Process.Pid)
	rec := &recorder{samples: map[uint32]int{}, user: map[uint32]int{}, execs: map[uint32]bool{}, exits: map[uint32]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, rec) }()
	// Until the busy process has 20 samples: a loaded host gives it little CPU.
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(100 * time.Millisecond) {
		rec.mu.Lock()
		n := rec.samples[pid]
		rec.mu.Unlock()
		if n >= 20 {
			break
		}
	}
	// The exit assertion below needs the process gone and reaped.
	if err := busy.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("kill busy process: %v", err)
	}
	if err := busy.Wait(); err != nil {
		// The kill itself comes back as an *exec.ExitError.
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			t.Fatalf("wait for busy process: %v", err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.samples[pid] < 20 {
		t.Errorf("busy pid %d got %d samples at 99 Hz, want >= 20", pid, rec.samples[pid])
	}
	if rec.user[pid] < rec.samples[pid]/2 {
		t.Errorf("only %d of %d samples have a user stack", rec.user[pid], rec.samples[pid])
	}
	if !rec.execs[pid] || !rec.exits[pid] {
		t.Errorf("exec seen %v, exit seen %v for pid %d", rec.execs[pid], rec.exits[pid], pid)
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Samples == 0 {
		t.Errorf("counters: %+v", c)
	}
	t.Logf("samples of busy pid %d: %d; counters %+v", pid, rec.samples[pid], c)
}

func TestSamplerPIDFilter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for eBPF")
	}
	busy := exec.CommandContext(t.Context(), "sh", "-c", "i=0; while [ $i -lt 100000000 ]; do i=$((i+1)); done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { busy.Process.Kill(); busy.Wait() }()
	self := uint32(os.Getpid())
	s, err := Open(Options{FrequencyHz: 99, PIDs: []uint32{self}}, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	rec := &recorder{samples: map[uint32]int{}, user: map[uint32]int{}, execs: map[uint32]bool{}, exits: map[uint32]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.Run(ctx, rec); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for pid := range rec.samples {
		if pid != self {
			t.Errorf("pid filter let through pid %d", pid)
		}
	}
	c, _ := s.Counters()
	if c.Filtered == 0 {
		t.Errorf("no filtered samples counted while pid %d was busy: %+v", busy.Process.Pid, c)
	}
}
