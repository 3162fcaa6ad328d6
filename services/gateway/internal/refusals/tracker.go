package refusals

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// MetricName is the counter of refused requests, by transport and reason.
const MetricName = "otelcol_refused_requests"

// Transport is the protocol a request came in on.
type Transport int

// The transports, as the metric's transport attribute names them.
const (
	GRPC Transport = iota
	HTTP
	numTransports
)

func (t Transport) String() string {
	if t == GRPC {
		return "grpc"
	}
	return "http"
}

// Reason is why a request was refused. The names are the metric's reason attribute.
type Reason int

const (
	// Undecodable: the body is not an OTLP export request (gRPC InvalidArgument, HTTP 400).
	Undecodable Reason = iota
	// TooLarge: over the receiver's size limit (gRPC ResourceExhausted, HTTP 413 or a body
	// cut off at max_request_body_size).
	TooLarge
	// BadEncoding: a compression the server does not have, or a compressed stream that does
	// not decompress.
	BadEncoding
	// BadContentType: HTTP 415.
	BadContentType
	// BadMethodOrPath: HTTP 404 or 405, gRPC Unimplemented for an unknown service or method.
	BadMethodOrPath
	// Unauthenticated: gRPC Unauthenticated or PermissionDenied, HTTP 401 or 403.
	Unauthenticated
	// Pushback: the pipeline cannot take data now (memory_limiter above its limit, a full
	// sending queue): gRPC Unavailable, HTTP 503 or 429. Senders retry.
	Pushback
	// Other: any other refusal (a permanent error from the pipeline, an internal error, a
	// deadline that passed while the request was processed, a body that could not be read).
	Other
	numReasons
)

var reasonNames = [numReasons]string{
	Undecodable:     "undecodable",
	TooLarge:        "too_large",
	BadEncoding:     "bad_encoding",
	BadContentType:  "bad_content_type",
	BadMethodOrPath: "bad_method_or_path",
	Unauthenticated: "unauthenticated",
	Pushback:        "pushback",
	Other:           "other",
}

func (r Reason) String() string {
	if r < 0 || r >= numReasons {
		return "other"
	}
	return reasonNames[r]
}

// episode is one run of refusals of one reason on one transport: it starts with the first
// refusal and ends when a whole log interval passes without another.
type episode struct {
	active     bool
	started    time.Time
	last       time.Time
	total      int64 // in this episode
	sinceLog   int64 // since the last line about this episode
	lastPeer   string
	lastErr    string
	lastLogged time.Time
}

// tracker counts refusals in the metric, logs them per episode (a WARN when an episode starts,
// a summary at most once per interval while it lasts, an INFO when it ends: never a line per
// request) and remembers when the last pushback happened, for readiness.
type tracker struct {
	logger   *zap.Logger
	interval time.Duration
	now      func() time.Time
	counter  metric.Int64Counter
	// attrs holds the counter's attribute sets, built once: counting a refusal allocates
	// nothing.
	attrs [numTransports][numReasons]metric.AddOption

	mu       sync.Mutex
	episodes [numTransports][numReasons]episode

	// lastPushback is the time of the last pushback refusal, in Unix nanoseconds (0: never).
	lastPushback atomic.Int64

	stop chan struct{}
	done chan struct{}
}

func newTracker(logger *zap.Logger, mp metric.MeterProvider, interval time.Duration, now func() time.Time) (*tracker, error) {
	meter := mp.Meter("github.com/profsym/profsym/services/gateway/internal/refusals")
	counter, err := meter.Int64Counter(MetricName,
		metric.WithDescription("Requests the receivers refused, by transport and reason (undecodable, too_large, bad_encoding, bad_content_type, bad_method_or_path, unauthenticated, pushback, other)."),
		metric.WithUnit("{requests}"))
	if err != nil {
		return nil, err
	}
	t := &tracker{logger: logger, interval: interval, now: now, counter: counter}
	for tr := range numTransports {
		for r := range numReasons {
			t.attrs[tr][r] = metric.WithAttributeSet(attribute.NewSet(
				attribute.String("transport", tr.String()),
				attribute.String("reason", r.String())))
		}
	}
	return t, nil
}

// refused records one refused request. peer is the sender's address, msg what it was told.
func (t *tracker) refused(tr Transport, r Reason, peer, msg string) {
	now := t.now()
	// The pushback time first: whoever sees the refusal counted (a test, a dashboard) must
	// find readiness already answering for it.
	if r == Pushback {
		t.lastPushback.Store(now.UnixNano())
	}
	t.counter.Add(context.Background(), 1, t.attrs[tr][r])
	t.mu.Lock()
	e := &t.episodes[tr][r]
	e.last, e.lastPeer, e.lastErr = now, peer, msg
	e.total++
	if e.active {
		e.sinceLog++
		t.mu.Unlock()
		return
	}
	e.active, e.started, e.lastLogged, e.total, e.sinceLog = true, now, now, 1, 0
	t.mu.Unlock()
	t.logger.Warn("Refusing requests",
		zap.String("transport", tr.String()), zap.String("reason", r.String()),
		zap.String("peer", peer), zap.String("error", msg),
		zap.Duration("summary_interval", t.interval))
}

// pushbackSince reports whether a pushback refusal happened at or after since.
func (t *tracker) pushbackSince(since time.Time) bool {
	last := t.lastPushback.Load()
	return last != 0 && last >= since.UnixNano()
}

// tick writes the summaries and the ends of episodes that are due at now.
func (t *tracker) tick(now time.Time) {
	type line struct {
		tr       Transport
		r        Reason
		e        episode
		finished bool
	}
	var lines []line
	t.mu.Lock()
	for tr := range numTransports {
		for r := range numReasons {
			e := &t.episodes[tr][r]
			if !e.active {
				continue
			}
			switch {
			case now.Sub(e.last) >= t.interval:
				lines = append(lines, line{tr, r, *e, true})
				*e = episode{}
			case e.sinceLog > 0 && now.Sub(e.lastLogged) >= t.interval:
				lines = append(lines, line{tr, r, *e, false})
				e.sinceLog, e.lastLogged = 0, now
			}
		}
	}
	t.mu.Unlock()
	// Logged outside the lock: a slow log sink must not hold up requests being refused.
	for _, l := range lines {
		fields := []zap.Field{
			zap.String("transport", l.tr.String()), zap.String("reason", l.r.String()),
			zap.Int64("refused", l.e.total), zap.Duration("duration", l.e.last.Sub(l.e.started)),
			zap.String("last_peer", l.e.lastPeer), zap.String("last_error", l.e.lastErr),
		}
		if l.finished {
			t.logger.Info("Stopped refusing requests", fields...)
			continue
		}
		t.logger.Warn("Still refusing requests", append(fields, zap.Int64("refused_since_last_log", l.e.sinceLog))...)
	}
}

// run ticks until close(t.stop); the ticker runs at half the interval so that a summary or an
// end is at most half an interval late.
func (t *tracker) run() {
	defer close(t.done)
	tk := time.NewTicker(max(t.interval/2, time.Millisecond))
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tk.C:
			t.tick(t.now())
		}
	}
}

func (t *tracker) start() {
	t.stop, t.done = make(chan struct{}), make(chan struct{})
	go t.run()
}

func (t *tracker) shutdown() {
	if t.stop == nil {
		return
	}
	close(t.stop)
	<-t.done
	t.stop = nil
}
