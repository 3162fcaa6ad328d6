package server

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/services/symbolizer/internal/uploadcli"
)

// TestRetentionWiring runs retention through the server: Symbolize records use, the usage
// reaches List and `symbolizer debuginfo usage`, and a sweep with --retention-keep-builds=1
// deletes the older build of a name, logs and counts it, and the build is no longer found.
func TestRetentionWiring(t *testing.T) {
	r := start(t, "--retention-keep-builds=1")
	older, newer := compile(t, "-g", "-O2"), compile(t, "-g", "-O1")
	if older.ids.GNU == newer.ids.GNU {
		t.Fatal("two builds with one build ID")
	}
	named := func(c *uploadcli.UploadCmd) { c.Name = "prog" }
	uploadWith(t, r.url, named, older.path)
	time.Sleep(10 * time.Millisecond) // the newer build is uploaded later, by the server's clock
	uploadWith(t, r.url, named, newer.path)

	ctx := context.Background()
	sym := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	ask := func(b binary) symbolizerv1.ModuleStatus {
		resp, err := sym.Symbolize(ctx, connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{
			GnuBuildId: b.ids.GNU, Addresses: b.addrs[:1], Filename: "/opt/app/prog"}}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetModules()[0].GetStatus()
	}
	if st := ask(older); st != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		t.Fatalf("older build: %v", st)
	}
	if err := r.srv.Usage.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	cmd := &uploadcli.UsageCmd{Conn: uploadcli.Conn{Server: r.url, Timeout: time.Minute}, Out: &out}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	t.Logf("symbolizer debuginfo usage:\n%s", out.String())
	today := time.Now().UTC().Format("2006-01-02")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("usage printed %d lines, want a header and 2 records", len(lines))
	}
	// Least recently used first: the newer build, never used, then the older one, used today.
	if f := strings.Fields(lines[1]); f[0] != newer.ids.GNU || f[1] != "prog" || f[len(f)-1] != "never" {
		t.Errorf("first line %q, want the newer build, named prog, never used", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != older.ids.GNU || f[3] != "ci" || f[len(f)-1] != today {
		t.Errorf("second line %q, want the older build, from ci, used %s", lines[2], today)
	}

	res, err := r.srv.Retention.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != "" || res.Deleted != 1 || res.Kept != 1 {
		t.Fatalf("sweep: %+v, want the older build deleted and the newer kept", res)
	}
	if st := ask(older); st != symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND {
		t.Errorf("older build after the sweep: %v, want not found", st)
	}
	if st := ask(newer); st != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
		t.Errorf("newer build after the sweep: %v", st)
	}
	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	if _, err := dc.Get(ctx, connect.NewRequest(&debuginfov1.GetRequest{BuildId: older.ids.GNU})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Get of the deleted build: %v, want not found", err)
	}
	if v := metricValue(t, r.url, `symbolizer_retention_records_total{result="deleted"}`); v != 1 {
		t.Errorf("symbolizer_retention_records_total{result=\"deleted\"} = %v, want 1", v)
	}
}
