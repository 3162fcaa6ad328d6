package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
)

// Upper bounds of one module's encoding apart from its addresses: a 2,048-digit GNU build
// ID, a Go build ID of four 64-character parts, an htlhash, three 64-bit varints, a 4 KiB
// file name, and the tags and lengths around them.
const (
	moduleBytes  = 2048 + 4*65 + 32 + 3*11 + 4096 + 64
	addressBytes = 11 // an unpacked 64-bit varint with its tag
	// amplification is the memory a request costs per byte of its encoding while it is
	// decoded and answered: the buffered body, the decoded slices, the answer.
	amplification = 4
)

// maxSymbolizeBytes is the largest encoding of a legal Symbolize request under the limits.
func maxSymbolizeBytes(maxModules, maxAddresses int) int64 {
	return int64(maxModules)*moduleBytes + int64(maxAddresses)*addressBytes + 4096
}

// admission keeps Symbolize requests from making the server hold more memory than its
// budget before they are decoded: a body over what a legal request can need is refused
// from its declared size, and each request reserves its worst-case cost (its declared size,
// or the largest legal size when it is compressed or of unknown length, times the
// amplification) from a shared budget, or is answered resource_exhausted at once.
type admission struct {
	budget  *semaphore.Weighted
	total   int64
	maxBody int64
	errw    *connect.ErrorWriter
	refused *prometheus.CounterVec
	log     *slog.Logger
	lastLog atomic.Int64 // unix nanoseconds of the last refusal logged
}

func newAdmission(budget, maxBody int64, reg prometheus.Registerer, log *slog.Logger) *admission {
	a := &admission{
		budget: semaphore.NewWeighted(budget), total: budget, maxBody: maxBody,
		errw: connect.NewErrorWriter(),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "symbolizer_symbolize_refused_total",
			Help: "Symbolize requests refused before they were decoded, by reason (too_large: over what a legal request needs; busy: the memory budget for requests in flight was spent)."}, []string{"reason"}),
		log: log,
	}
	if reg != nil {
		reg.MustRegister(a.refused)
	}
	return a
}

// compressed reports whether the body's size says nothing of its decoded size.
func compressed(r *http.Request) bool {
	for _, h := range []string{"Content-Encoding", "Grpc-Encoding", "Connect-Content-Encoding"} {
		if v := strings.TrimSpace(r.Header.Get(h)); v != "" && v != "identity" {
			return true
		}
	}
	return false
}

func (a *admission) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > a.maxBody {
			a.refuse(w, r, "too_large", fmt.Errorf("request body of %d bytes: a Symbolize request within the limits needs at most %d", r.ContentLength, a.maxBody))
			return
		}
		cost := a.maxBody
		if r.ContentLength >= 0 && !compressed(r) {
			cost = r.ContentLength
		}
		cost = min(cost*amplification, a.total)
		if !a.budget.TryAcquire(cost) {
			a.refuse(w, r, "busy", fmt.Errorf("symbolizer busy: its memory budget for requests in flight (%d bytes) is spent; retry with backoff", a.total))
			return
		}
		defer a.budget.Release(cost)
		// A body that lies about its length is cut at the limit too.
		r.Body = http.MaxBytesReader(w, r.Body, a.maxBody)
		next.ServeHTTP(w, r)
	})
}

// busy reports whether any reservation is held (for tests).
func (a *admission) busy() bool {
	if a.budget.TryAcquire(a.total) {
		a.budget.Release(a.total)
		return false
	}
	return true
}

func (a *admission) refuse(w http.ResponseWriter, r *http.Request, reason string, err error) {
	a.refused.WithLabelValues(reason).Inc()
	now := time.Now().UnixNano()
	if last := a.lastLog.Load(); now-last > int64(10*time.Second) && a.lastLog.CompareAndSwap(last, now) {
		a.log.Warn("Symbolize request refused before decoding (logged at most every 10 s)", "reason", reason, "peer", r.RemoteAddr, "err", err)
	}
	cerr := connect.NewError(connect.CodeResourceExhausted, err)
	if a.errw.IsSupported(r) {
		if werr := a.errw.Write(w, r, cerr); werr != nil && !errors.Is(werr, http.ErrHandlerTimeout) {
			a.log.Debug("write refusal", "err", werr)
		}
		return
	}
	http.Error(w, err.Error(), http.StatusTooManyRequests)
}
