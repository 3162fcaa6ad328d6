// Package auth checks bearer tokens: every write needs an upload token; reads need a token when
// the operator says so (read tokens configured, or --require-read-token), and then an upload
// token serves as a read token too, so one writer's credential need not be two. Tokens come
// from files (one per line, '#' comments) that can be reloaded while the server runs, and from
// flags.
package auth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"

	"connectrpc.com/connect"
)

// Tokens is the set of accepted tokens.
type Tokens struct {
	files []string
	fixed []string

	mu     sync.RWMutex
	hashes [][32]byte
}

// New loads tokens from file (optional) plus fixed ones.
func New(file string, fixed []string) (*Tokens, error) {
	return Union([]string{file}, fixed)
}

// Union loads the tokens of every file (empty names are skipped) plus fixed ones: a set that
// accepts what any of them accepts, reloaded as one.
func Union(files, fixed []string) (*Tokens, error) {
	t := &Tokens{fixed: fixed}
	for _, f := range files {
		if f != "" {
			t.files = append(t.files, f)
		}
	}
	return t, t.Reload()
}

// Reload re-reads the tokens files; on error the previous tokens stay in force.
func (t *Tokens) Reload() error {
	toks := append([]string(nil), t.fixed...)
	for _, file := range t.files {
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("read tokens file: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			toks = append(toks, line)
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read tokens file %s: %w", file, err)
		}
	}
	hashes := make([][32]byte, 0, len(toks))
	for _, tok := range toks {
		if tok = strings.TrimSpace(tok); tok != "" {
			hashes = append(hashes, sha256.Sum256([]byte(tok)))
		}
	}
	t.mu.Lock()
	t.hashes = hashes
	t.mu.Unlock()
	return nil
}

// Count returns how many tokens are accepted.
func (t *Tokens) Count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.hashes)
}

// Errors of Check, mapped to UNAUTHENTICATED and PERMISSION_DENIED.
var (
	ErrMissing  = errors.New("missing bearer token: send Authorization: Bearer <token>")
	ErrRejected = errors.New("token not accepted")
)

// Check validates an Authorization header value.
func (t *Tokens) Check(header string) error {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return ErrMissing
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	t.mu.RLock()
	defer t.mu.RUnlock()
	found := 0
	for _, k := range t.hashes {
		found |= subtle.ConstantTimeCompare(h[:], k[:])
	}
	if found == 0 {
		return ErrRejected
	}
	return nil
}

// ConnectError converts a Check error to a Connect error.
func ConnectError(err error) error {
	if errors.Is(err, ErrMissing) {
		return connect.NewError(connect.CodeUnauthenticated, err)
	}
	return connect.NewError(connect.CodePermissionDenied, err)
}

// HTTPStatus converts a Check error to an HTTP status.
func HTTPStatus(err error) int {
	if errors.Is(err, ErrMissing) {
		return http.StatusUnauthorized
	}
	return http.StatusForbidden
}

// Interceptor requires a writer's token for the procedures in writes and, when readers is not
// nil, a reader's token for every other procedure. A nil readers leaves reads open.
func Interceptor(writers, readers *Tokens, writes map[string]bool) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			need := readers
			if writes[req.Spec().Procedure] {
				need = writers
			}
			if need != nil {
				if err := need.Check(req.Header().Get("Authorization")); err != nil {
					return nil, ConnectError(err)
				}
			}
			return next(ctx, req)
		}
	})
}

// Guard wraps a plain HTTP handler: with t nil it is served as is, else only to requests that
// carry one of t's tokens.
func Guard(t *Tokens, h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := t.Check(r.Header.Get("Authorization")); err != nil {
			http.Error(w, err.Error(), HTTPStatus(err))
			return
		}
		h.ServeHTTP(w, r)
	})
}
