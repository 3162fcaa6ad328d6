package uploadcli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
)

// MissingCmd is `symbolizer debuginfo missing`.
type MissingCmd struct {
	Conn
	Reason string        `help:"Only binaries whose unresolved frames have this reason: no_debuginfo, invalid_file, upstream_miss, executable_needed, invalid_mapping, no_symbols." placeholder:"REASON"`
	Since  time.Duration `help:"Only binaries asked about within this long (e.g. 24h); 0: any time."`
	All    bool          `help:"Also list binaries whose every frame resolved."`
	Limit  uint32        `default:"100" help:"At most this many binaries, the most unresolved frames first."`
	JSON   bool          `help:"One JSON entry per line."`
	Paths  bool          `help:"Print only the executable paths the requests carried, one per line, for a CI step such as 'symbolizer debuginfo missing --paths | xargs symbolizer upload'."`
	Out    io.Writer     `kong:"-"`
}

// reasonValue parses a --reason value.
func reasonValue(s string) (debuginfov1.CoverageReason, error) {
	if s == "" {
		return debuginfov1.CoverageReason_COVERAGE_REASON_UNSPECIFIED, nil
	}
	if v, ok := debuginfov1.CoverageReason_value["COVERAGE_REASON_"+strings.ToUpper(s)]; ok && v != 0 {
		return debuginfov1.CoverageReason(v), nil
	}
	var names []string
	for v, n := range debuginfov1.CoverageReason_name {
		if v != 0 {
			names = append(names, strings.ToLower(strings.TrimPrefix(n, "COVERAGE_REASON_")))
		}
	}
	return 0, fmt.Errorf("--reason %q: want one of %s", s, strings.Join(names, ", "))
}

// Run prints, per binary the server was asked to symbolize, how much resolved and why the rest
// did not.
func (c *MissingCmd) Run() error {
	reason, err := reasonValue(c.Reason)
	if err != nil {
		return err
	}
	client, err := c.rpc(&http.Client{})
	if err != nil {
		return err
	}
	out := c.Out
	if out == nil {
		out = os.Stdout
	}
	req := &debuginfov1.ListCoverageRequest{Reason: reason, UnresolvedOnly: !c.All, Limit: c.Limit}
	if c.Since > 0 {
		req.Since = timestamppb.New(time.Now().Add(-c.Since))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	resp, err := client.ListCoverage(ctx, connect.NewRequest(req))
	if err != nil {
		return fmt.Errorf("list coverage: %w", err)
	}
	entries := resp.Msg.GetEntries()
	switch {
	case c.JSON:
		for _, e := range entries {
			b, err := protojson.Marshal(e)
			if err != nil {
				return fmt.Errorf("encode entry: %w", err)
			}
			fmt.Fprintln(out, string(b))
		}
		return nil
	case c.Paths:
		seen := map[string]bool{}
		for _, e := range entries {
			for _, f := range e.GetFilenames() {
				if !seen[f] {
					seen[f] = true
					fmt.Fprintln(out, f)
				}
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UNRESOLVED\tASKED\tRESOLVED\tFIDELITY\tREASON\tTYPE\tBUILD ID\tLAST SEEN\tEXECUTABLES")
	for _, e := range entries {
		un := e.GetFramesAsked() - min(e.GetFramesResolved(), e.GetFramesAsked())
		share := "-"
		if e.GetFramesAsked() > 0 {
			share = fmt.Sprintf("%.1f%%", 100*float64(e.GetFramesResolved())/float64(e.GetFramesAsked()))
		}
		why := "-"
		if un > 0 {
			why = short(e.GetReason().String(), "COVERAGE_REASON_")
		}
		files := strings.Join(e.GetFilenames(), ",")
		if files == "" {
			files = "-"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", un, e.GetFramesAsked(), share,
			short(e.GetFidelity().String(), "COVERAGE_FIDELITY_"), why, short(e.GetBuildIdType().String(), "BUILD_ID_TYPE_"),
			e.GetBuildId(), e.GetLastSeen().AsTime().UTC().Format(time.RFC3339), files)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if total := resp.Msg.GetTotal(); total > uint64(len(entries)) {
		fmt.Fprintf(out, "(%d of %d binaries; --limit shows more)\n", len(entries), total)
	}
	return nil
}

func short(enum, prefix string) string {
	s := strings.ToLower(strings.TrimPrefix(enum, prefix))
	if s == "unspecified" {
		return "none"
	}
	return s
}
