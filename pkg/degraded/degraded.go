// Package degraded says in the logs when a dependency degrades and when it recovers, the way
// an operator reads them: one WARN when a degraded mode starts, a summary at most every
// interval while it lasts (how many calls failed and the last error), and one INFO when it
// ends, with how long it lasted. Metrics count every failure; logs tell the story.
package degraded

import (
	"log/slog"
	"sync"
	"time"
)

// Tracker follows one dependency. It is safe for concurrent use; the zero value is not
// usable, call New.
type Tracker struct {
	name  string
	what  string // what happens meanwhile, e.g. "symbolizing without the Redis cache"
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu          sync.Mutex
	down        bool
	since       time.Time
	failures    int // since the degraded mode started
	lastSummary time.Time
	summarized  int // failures when the last summary was written
	lastErr     error
	onChange    func(down bool)
}

// New returns a tracker for the dependency name; meanwhile says what the service does while
// it is degraded. Summaries come at most every interval (default one minute).
func New(name, meanwhile string, interval time.Duration, log *slog.Logger) *Tracker {
	if log == nil {
		log = slog.Default()
	}
	if interval <= 0 {
		interval = time.Minute
	}
	return &Tracker{name: name, what: meanwhile, log: log, every: interval, now: time.Now}
}

// OnChange sets a function called when the degraded mode starts (true) and ends (false), for a
// gauge beside the logs. It runs with the tracker locked: it must not call back into it.
func (t *Tracker) OnChange(f func(down bool)) *Tracker {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onChange = f
	return t
}

// Fail records a failed call.
func (t *Tracker) Fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.failures++
	t.lastErr = err
	if !t.down {
		t.down, t.since, t.lastSummary, t.summarized = true, now, now, t.failures
		t.log.Warn(t.name+" degraded: "+t.what, "dependency", t.name, "err", err)
		if t.onChange != nil {
			t.onChange(true)
		}
		return
	}
	if now.Sub(t.lastSummary) >= t.every {
		t.log.Warn(t.name+" still degraded", "dependency", t.name, "for", now.Sub(t.since).Round(time.Second),
			"failures", t.failures, "failures_since_last_summary", t.failures-t.summarized, "last_err", err)
		t.lastSummary, t.summarized = now, t.failures
	}
}

// OK records a successful call; it ends a degraded mode.
func (t *Tracker) OK() { t.OKStarted(time.Time{}) }

// OKStarted records a successful call that began at start. A call begun before the degraded
// mode started was under way when the dependency went away: its success says nothing about
// the dependency now and does not end the mode (concurrent calls finish in any order; without
// this, an outage logged "degraded", "recovered" and "degraded" again within milliseconds).
// A zero start is a call of unknown start, which counts, as OK.
func (t *Tracker) OKStarted(start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.down || (!start.IsZero() && start.Before(t.since)) {
		return
	}
	t.log.Info(t.name+" recovered", "dependency", t.name, "after", t.now().Sub(t.since).Round(time.Millisecond),
		"failures", t.failures, "last_err", t.lastErr)
	t.down, t.failures, t.summarized, t.lastErr = false, 0, 0, nil
	if t.onChange != nil {
		t.onChange(false)
	}
}

// Degraded reports whether the dependency is degraded now.
func (t *Tracker) Degraded() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.down
}
