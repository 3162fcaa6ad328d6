package uploadcli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
)

// UsageCmd is `symbolizer debuginfo usage`.
type UsageCmd struct {
	Conn
	UnusedDays int       `name:"unused-days" help:"Only files not used (nor uploaded) in the last this many days: what --retention-keep-used-days=N would no longer keep for that reason."`
	JSON       bool      `help:"One JSON record per line."`
	Out        io.Writer `kong:"-"`
	// Now is the clock (tests).
	Now func() time.Time `kong:"-"`
}

// Run prints every stored file with its name, source, size, age and last use, the least
// recently used first.
func (c *UsageCmd) Run() error {
	if c.UnusedDays < 0 {
		return fmt.Errorf("--unused-days %d must not be negative", c.UnusedDays)
	}
	client, err := c.rpc(&http.Client{})
	if err != nil {
		return err
	}
	out := c.Out
	if out == nil {
		out = os.Stdout
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	var all []*debuginfov1.Debuginfo
	token := ""
	for {
		resp, err := client.List(context.Background(), connect.NewRequest(&debuginfov1.ListRequest{PageSize: 1000, PageToken: token}))
		if err != nil {
			return fmt.Errorf("list records: %w", err)
		}
		all = append(all, resp.Msg.GetDebuginfos()...)
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	// A use is what retention counts: the recorded last use, else the upload.
	used := func(d *debuginfov1.Debuginfo) time.Time {
		t := d.GetUploadedAt().AsTime()
		if d.GetLastUsed() != nil && d.GetLastUsed().AsTime().After(t) {
			t = d.GetLastUsed().AsTime()
		}
		return t
	}
	if c.UnusedDays > 0 {
		cutoff := now().Add(-time.Duration(c.UnusedDays) * 24 * time.Hour)
		kept := all[:0]
		for _, d := range all {
			if d.GetState() != debuginfov1.DebuginfoState_DEBUGINFO_STATE_UPLOADING && used(d).Before(cutoff) {
				kept = append(kept, d)
			}
		}
		all = kept
	}
	sort.SliceStable(all, func(i, j int) bool { return used(all[i]).Before(used(all[j])) })
	if c.JSON {
		for _, d := range all {
			b, err := protojson.Marshal(d)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, string(b))
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "BUILD ID\tNAME\tTYPE\tSOURCE\tSIZE\tUPLOADED\tAGE (DAYS)\tLAST USED")
	for _, d := range all {
		uploaded, age := "-", "-"
		if d.GetUploadedAt() != nil {
			uploaded = d.GetUploadedAt().AsTime().UTC().Format("2006-01-02")
			age = fmt.Sprint(int(now().Sub(d.GetUploadedAt().AsTime()).Hours() / 24))
		}
		last := "never"
		if d.GetLastUsed() != nil {
			last = d.GetLastUsed().AsTime().UTC().Format("2006-01-02")
		}
		name := d.GetName()
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.GetBuildId(), name, enumWord(d.GetType().String(), "DEBUGINFO_TYPE_"),
			enumWord(d.GetSource().String(), "UPLOAD_SOURCE_"), d.GetSize(), uploaded, age, last)
	}
	return tw.Flush()
}

// enumWord renders an enum value name without its prefix, in lower case.
func enumWord(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}
