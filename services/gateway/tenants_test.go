package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/testsupport"
)

// Tenants (docs/operations.md): a gateway forwards the tenant of its profiles by the token its
// symbolize processor sends. A binary uploaded by tenant alpha is symbolized through alpha's
// gateway, and stays addresses through beta's, whose token reads beta's build IDs only.
func TestTenantGateways(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two gateways, the symbolizer and a downstream")
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tenants := write("tenants", "alpha upload alpha-upload\nalpha read alpha-read\nbeta read beta-read\n")
	sym := testsupport.StartSymbolizer(t, "", "--tenant-tokens-file", tenants)
	b := otlptest.Binaries(t)[:1]
	sym.Token = "alpha-upload"
	sym.Upload(t, b[0].Path)

	for _, c := range []struct {
		tenant     string
		symbolized bool
	}{{"alpha", true}, {"beta", false}} {
		t.Run(c.tenant, func(t *testing.T) {
			sk := startSink(t)
			g := startGateway(t, gwConfig{Symbolizer: sym.URL(), SymbolizerTokenFile: write(c.tenant+"-token", c.tenant+"-read\n"),
				Downstream: sk.addr, Deadline: 5 * time.Second})
			pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
			if err := g.send(t.Context(), pd); err != nil {
				t.Fatal(err)
			}
			sk.settle(t, int64(len(cases)), 30*time.Second)
			yes, no := symbolizedRequests(sk.received())
			if c.symbolized {
				if yes != 1 {
					t.Fatalf("alpha's gateway: %d requests symbolized, %d not", yes, no)
				}
				otlptest.CheckFrames(t, otlptest.Resolve(sk.received()[0]), cases)
			} else if yes != 0 || no != 1 {
				t.Fatalf("beta's gateway symbolized alpha's binary: %d requests symbolized, %d not", yes, no)
			}
		})
	}
}
