package degraded

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTrackerTellsStartSummaryAndEnd(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	clock := time.Unix(1000, 0)
	tr := New("redis", "symbolizing without the cache", time.Minute, log)
	tr.now = func() time.Time { return clock }

	tr.OK() // healthy: nothing to say
	for range 500 {
		tr.Fail(errors.New("connection refused"))
		clock = clock.Add(100 * time.Millisecond)
	}
	if !tr.Degraded() {
		t.Fatal("not degraded after failures")
	}
	tr.OK()
	tr.OK()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	// 500 failures over 50 s: the start, no summary (under a minute), the end.
	if len(lines) != 2 {
		t.Fatalf("%d log lines for 500 failures in 50 s, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "redis degraded: symbolizing without the cache") {
		t.Errorf("start line = %s", lines[0])
	}
	if !strings.Contains(lines[1], "level=INFO") || !strings.Contains(lines[1], "recovered") || !strings.Contains(lines[1], "after=50s") || !strings.Contains(lines[1], "failures=500") {
		t.Errorf("end line = %s", lines[1])
	}

	// A long outage gets a summary a minute.
	buf.Reset()
	for range 25 {
		tr.Fail(errors.New("timeout"))
		clock = clock.Add(10 * time.Second)
	}
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1+4 { // start, then a summary after each full minute of 240 s
		t.Fatalf("%d lines over 4 minutes, want 5:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[1], "still degraded") || !strings.Contains(lines[1], "failures_since_last_summary=6") {
		t.Errorf("summary = %s", lines[1])
	}
}

func TestOnChangeFollowsTheMode(t *testing.T) {
	var changes []bool
	tr := New("store", "uploads fail", time.Minute, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))).
		OnChange(func(down bool) { changes = append(changes, down) })
	tr.OK()
	tr.Fail(errors.New("a"))
	tr.Fail(errors.New("b"))
	tr.OK()
	tr.OK()
	tr.Fail(errors.New("c"))
	if want := []bool{true, false, true}; !slices.Equal(changes, want) {
		t.Fatalf("changes = %v, want %v", changes, want)
	}
}

// TestOKStartedBeforeTheOutage: a call under way when the dependency went away, whose success
// arrives after the first failure, does not end the degraded mode; one begun after it does.
func TestOKStartedBeforeTheOutage(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(1000, 0)
	tr := New("downstream", "exports are queued and retried", time.Minute, slog.New(slog.NewTextHandler(&buf, nil)))
	tr.now = func() time.Time { return clock }

	inFlight := clock
	clock = clock.Add(5 * time.Millisecond)
	tr.Fail(errors.New("connection refused"))
	clock = clock.Add(2 * time.Millisecond)
	tr.OKStarted(inFlight)
	if !tr.Degraded() {
		t.Fatalf("a call begun before the outage ended it:\n%s", buf.String())
	}
	after := clock
	clock = clock.Add(time.Second)
	tr.OKStarted(after)
	if tr.Degraded() {
		t.Fatal("a call begun during the outage did not end it")
	}
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "recovered") {
		t.Fatalf("want one degraded and one recovered line:\n%s", buf.String())
	}
}
