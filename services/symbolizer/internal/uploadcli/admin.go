package uploadcli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
)

// ListCmd is `symbolizer debuginfo list`.
type ListCmd struct {
	Conn
	JSON bool      `help:"One JSON record per line."`
	Out  io.Writer `kong:"-"`
}

// Run prints every stored record.
func (c *ListCmd) Run() error {
	client, err := c.rpc(&http.Client{})
	if err != nil {
		return err
	}
	out := c.Out
	if out == nil {
		out = os.Stdout
	}
	token := ""
	for {
		resp, err := client.List(context.Background(), connect.NewRequest(&debuginfov1.ListRequest{PageSize: 1000, PageToken: token}))
		if err != nil {
			return fmt.Errorf("list records: %w", err)
		}
		for _, d := range resp.Msg.GetDebuginfos() {
			printRecord(out, d, c.JSON)
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

func printRecord(out io.Writer, d *debuginfov1.Debuginfo, asJSON bool) {
	if asJSON {
		b, _ := protojson.Marshal(d)
		fmt.Fprintln(out, string(b))
		return
	}
	q := d.GetQuality()
	fmt.Fprintf(out, "%s\t%s\t%s\t%s\t%s\t%d\tdwarf=%v inlines=%v gopclntab=%v symtab=%v%s\n", d.GetBuildId(), d.GetBuildIdType(), d.GetType(), d.GetSource(), d.GetState(), d.GetSize(),
		q.GetHasDwarf(), q.GetHasInlineInfo(), q.GetHasGopclntab(), q.GetHasSymtab(), companions(d.GetCompanions()))
}

// companions renders the files a record's DWARF needs, e.g. " supplementary=<id>:missing".
func companions(cs []*debuginfov1.Companion) string {
	var b strings.Builder
	for _, c := range cs {
		kind := strings.ToLower(strings.TrimPrefix(c.GetKind().String(), "COMPANION_KIND_"))
		state := strings.ToLower(strings.TrimPrefix(c.GetState().String(), "COMPANION_STATE_"))
		fmt.Fprintf(&b, " %s=%s:%s", kind, c.GetId(), state)
	}
	return b.String()
}

// GetCmd is `symbolizer debuginfo get`.
type GetCmd struct {
	Conn
	BuildID string    `arg:"" help:"Any ID of the file."`
	Out     io.Writer `kong:"-"`
}

// Run prints one record as JSON.
func (c *GetCmd) Run() error {
	client, err := c.rpc(&http.Client{})
	if err != nil {
		return err
	}
	resp, err := client.Get(context.Background(), connect.NewRequest(&debuginfov1.GetRequest{BuildId: c.BuildID}))
	if err != nil {
		return fmt.Errorf("get %s: %w", c.BuildID, err)
	}
	out := c.Out
	if out == nil {
		out = os.Stdout
	}
	printRecord(out, resp.Msg.GetDebuginfo(), true)
	return nil
}

// DeleteCmd is `symbolizer debuginfo delete`.
type DeleteCmd struct {
	Conn
	BuildID string `arg:"" help:"Any ID of the file."`
}

// Run deletes the record.
func (c *DeleteCmd) Run() error {
	client, err := c.rpc(&http.Client{})
	if err != nil {
		return err
	}
	if _, err := client.Delete(context.Background(), connect.NewRequest(&debuginfov1.DeleteRequest{BuildId: c.BuildID})); err != nil {
		return fmt.Errorf("delete %s: %w", c.BuildID, err)
	}
	fmt.Fprintln(os.Stdout, "deleted", c.BuildID)
	return nil
}
