package tenant

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
	"slices"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/profsym/profsym/services/symbolizer/internal/auth"
)

// Roles of a tenant's token: an upload token writes and reads its tenant's data, a read token
// reads it.
const (
	RoleUpload = "upload"
	RoleRead   = "read"
)

// Quota bounds what a tenant may store; 0 is no bound.
type Quota struct {
	// Bytes is the total size of the files the tenant's records hold, uploads in progress
	// included.
	Bytes uint64
	// UploadsPerDay is how many uploads the tenant may start in a UTC day.
	UploadsPerDay int
}

type token struct {
	hash   [32]byte
	tenant string
	role   string
}

// Tokens maps tokens to tenants, from a file of lines
//
//	TENANT upload|read TOKEN
//	TENANT quota bytes=N uploads-per-day=M
//
// ('#' starts a comment). A quota line overrides the default quota for its tenant.
type Tokens struct {
	file string
	def  Quota

	mu     sync.RWMutex
	tokens []token
	quotas map[string]Quota
	names  []string
}

// LoadTokens reads file; def is the quota of tenants without a quota line.
func LoadTokens(file string, def Quota) (*Tokens, error) {
	t := &Tokens{file: file, def: def}
	return t, t.Reload()
}

// Reload re-reads the file; on error the previous tokens stay in force.
func (t *Tokens) Reload() error {
	data, err := os.ReadFile(t.file)
	if err != nil {
		return fmt.Errorf("read tenant tokens file: %w", err)
	}
	var toks []token
	quotas := map[string]Quota{}
	seen := map[[32]byte]string{}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("tenant tokens file %s line %d: %s", t.file, n, fmt.Sprintf(format, args...))
		}
		if len(f) < 2 {
			return bad("want TENANT upload|read TOKEN or TENANT quota bytes=N uploads-per-day=M")
		}
		if err := Valid(f[0]); err != nil {
			return bad("%v", err)
		}
		if !slices.Contains(names, f[0]) {
			names = append(names, f[0])
		}
		switch f[1] {
		case RoleUpload, RoleRead:
			if len(f) != 3 {
				return bad("want TENANT %s TOKEN (a token has no spaces)", f[1])
			}
			h := sha256.Sum256([]byte(f[2]))
			if other, ok := seen[h]; ok {
				return bad("this token is already given to tenant %s: a token names one tenant", other)
			}
			seen[h] = f[0]
			toks = append(toks, token{hash: h, tenant: f[0], role: f[1]})
		case "quota":
			q := t.def
			for _, kv := range f[2:] {
				k, v, _ := strings.Cut(kv, "=")
				n, err := strconv.ParseUint(v, 10, 63)
				if err != nil {
					return bad("quota %q: want a whole number", kv)
				}
				switch k {
				case "bytes":
					q.Bytes = n
				case "uploads-per-day":
					q.UploadsPerDay = int(n)
				default:
					return bad("quota %q: want bytes=N or uploads-per-day=M", kv)
				}
			}
			quotas[f[0]] = q
		default:
			return bad("role %q: want upload, read or quota", f[1])
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read tenant tokens file %s: %w", t.file, err)
	}
	t.mu.Lock()
	t.tokens, t.quotas, t.names = toks, quotas, names
	t.mu.Unlock()
	return nil
}

// Names returns the tenants the file names, in file order.
func (t *Tokens) Names() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Clone(t.names)
}

// Known reports whether the file names tenant name.
func (t *Tokens) Known(name string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Contains(t.names, name)
}

// Quota returns tenant name's quota.
func (t *Tokens) Quota(name string) Quota {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if q, ok := t.quotas[name]; ok {
		return q
	}
	return t.def
}

// lookup finds the tenant and role of an Authorization header's token; ok is false when the
// token is none of the tenants'.
func (t *Tokens) lookup(header string) (tenant, role string, ok bool) {
	tok, found := strings.CutPrefix(header, "Bearer ")
	if !found || strings.TrimSpace(tok) == "" {
		return "", "", false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	t.mu.RLock()
	defer t.mu.RUnlock()
	// Every token is compared, in constant time, so the time taken says nothing of which
	// one matched.
	match := -1
	for i, k := range t.tokens {
		if subtle.ConstantTimeCompare(h[:], k.hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", "", false
	}
	return t.tokens[match].tenant, t.tokens[match].role, true
}

// Errors of Access.Resolve beyond auth's.
var (
	ErrReadOnly    = errors.New("a read token cannot write")
	ErrOtherTenant = errors.New("a tenant's token cannot act for another tenant")
	ErrUnknown     = errors.New("unknown tenant")
)

// Access decides which tenant a request acts for. Writers and Readers are the tokens of no
// tenant (--upload-token, --read-token and their files): they act for the default tenant, or
// for the tenant the X-Profsym-Tenant header names. Readers must not be nil: with tenants,
// every read needs a token.
type Access struct {
	Tenants *Tokens
	Writers *auth.Tokens
	Readers *auth.Tokens
}

// Resolve returns the tenant of a request with these headers; write says whether it writes.
func (a *Access) Resolve(h http.Header, write bool) (string, error) {
	authz, named := h.Get("Authorization"), strings.TrimSpace(h.Get(Header))
	if t, role, ok := a.Tenants.lookup(authz); ok {
		if write && role != RoleUpload {
			return "", fmt.Errorf("tenant %s: %w", t, ErrReadOnly)
		}
		if named != "" && named != t {
			return "", fmt.Errorf("the token of tenant %s names tenant %q: %w", t, named, ErrOtherTenant)
		}
		return t, nil
	}
	need := a.Readers
	if write {
		need = a.Writers
	}
	if err := need.Check(authz); err != nil {
		return "", err
	}
	if named == "" {
		return "", nil
	}
	if err := Valid(named); err != nil {
		return "", fmt.Errorf("%s header: %w: %w", Header, ErrUnknown, err)
	}
	if !a.Tenants.Known(named) {
		return "", fmt.Errorf("%s header: %w %q (not in the tenant tokens file)", Header, ErrUnknown, named)
	}
	return named, nil
}

// connectError maps a Resolve error to a Connect error.
func connectError(err error) error {
	if errors.Is(err, auth.ErrMissing) {
		return connect.NewError(connect.CodeUnauthenticated, err)
	}
	return connect.NewError(connect.CodePermissionDenied, err)
}

// Interceptor resolves each call's tenant (a writer's for the procedures in writes) and puts
// it in the call's context (From).
func (a *Access) Interceptor(writes map[string]bool) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			t, err := a.Resolve(req.Header(), writes[req.Spec().Procedure])
			if err != nil {
				return nil, connectError(err)
			}
			return next(With(ctx, t), req)
		}
	})
}

// Guard serves h only to requests that resolve to a tenant, with the tenant in the request's
// context.
func (a *Access) Guard(write bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := a.Resolve(r.Header, write)
		if err != nil {
			http.Error(w, err.Error(), auth.HTTPStatus(err))
			return
		}
		h.ServeHTTP(w, r.WithContext(With(r.Context(), t)))
	})
}
