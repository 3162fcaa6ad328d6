// Package tenant keeps the tenants of one symbolizer apart. A tenant is named by the token a
// request carries (the tenant tokens file maps each token to its tenant), or, for an
// operator's or a gateway's token that belongs to no tenant, by the X-Profsym-Tenant header.
// Every key a tenant's data lives under, in the store, in Redis and in the leases, is built by
// Key; the default tenant ("", the only one of a single-tenant symbolizer) keeps the keys it
// always had.
package tenant

import (
	"context"
	"fmt"

	"github.com/profsym/profsym/pkg/uploadclient"
)

// Header names a tenant for a token that belongs to none (an operator's, a gateway's).
const Header = uploadclient.TenantHeader

// Key returns key inside tenant t's part of a key space shared by all tenants (object store,
// Redis, leases): key itself for the default tenant, so a single-tenant symbolizer keeps its
// layout, else "tenants/<t>/" + key. It is the one place such keys are built.
func Key(t, key string) string {
	if t == "" {
		return key
	}
	return "tenants/" + t + "/" + key
}

// Valid checks a tenant name: 1 to 63 lower-case letters, digits and '-', starting with a
// letter or digit; "default" is the name the default tenant goes by in metrics and logs.
func Valid(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("tenant %q: 1 to 63 characters", name)
	}
	if name == "default" {
		return fmt.Errorf("tenant %q: reserved for the default tenant", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0; !ok {
			return fmt.Errorf("tenant %q: only a-z, 0-9 and '-' (not first) are allowed", name)
		}
	}
	return nil
}

// Label is how t appears in metrics and logs: "default" for the default tenant.
func Label(t string) string {
	if t == "" {
		return "default"
	}
	return t
}

type ctxKey struct{}

// With returns ctx carrying tenant t.
func With(ctx context.Context, t string) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// From returns the tenant ctx carries: "" (the default tenant) when none.
func From(ctx context.Context) string {
	t, _ := ctx.Value(ctxKey{}).(string)
	return t
}
