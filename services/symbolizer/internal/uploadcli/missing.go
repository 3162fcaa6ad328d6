package uploadcli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/services/symbolizer/internal/kernelpkg"
)

// MissingCmd is `symbolizer debuginfo missing`.
type MissingCmd struct {
	Conn
	Reason     string        `help:"Only binaries whose unresolved frames have this reason: no_debuginfo, invalid_file, upstream_miss, executable_needed, invalid_mapping, no_symbols, companion_missing (a supplementary file or DWARF package is not stored; such binaries are listed even when every frame resolved, at a lower fidelity)." placeholder:"REASON"`
	Since      time.Duration `help:"Only binaries asked about within this long (e.g. 24h); 0: any time."`
	All        bool          `help:"Also list binaries whose every frame resolved and that miss no companion."`
	Limit      uint32        `default:"100" help:"At most this many binaries, the most unresolved frames first."`
	JSON       bool          `help:"One JSON entry per line (missing companions in missingCompanions; for a kernel image or module, its release and debug packages in kernel)."`
	Paths      bool          `help:"Print only the executable paths the requests carried, one per line, for a CI step such as 'symbolizer debuginfo missing --paths | xargs symbolizer upload'. Missing companions have no path the server knows: --companions lists them."`
	Companions bool          `help:"Print only the missing companions, one per line, tab-separated: the kind (supplementary: the dwz file a debug file's .gnu_debugaltlink or .debug_sup names; dwarf_package: the .dwp of a -gsplit-dwarf executable), the ID it is uploaded under (the supplementary file's build ID or .debug_sup checksum; the executable's GNU build ID), then the executable paths the requests carried for binaries that need it. For a CI step such as 'symbolizer debuginfo missing --companions | while IFS=$'\\t' read -r kind id paths; do ...; done'."`
	Out        io.Writer     `kong:"-"`
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
// did not; then, per kernel release among them, the package of its debuginfo.
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
	case c.Companions:
		printCompanions(out, entries)
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
	fmt.Fprintln(tw, "UNRESOLVED\tASKED\tRESOLVED\tFIDELITY\tREASON\tTYPE\tBUILD ID\tLAST SEEN\tEXECUTABLES\tMISSING COMPANIONS")
	for _, e := range entries {
		un := e.GetFramesAsked() - min(e.GetFramesResolved(), e.GetFramesAsked())
		share := "-"
		if e.GetFramesAsked() > 0 {
			share = fmt.Sprintf("%.1f%%", 100*float64(e.GetFramesResolved())/float64(e.GetFramesAsked()))
		}
		why := "-"
		if un > 0 || len(e.GetMissingCompanions()) > 0 {
			why = short(e.GetReason().String(), "COVERAGE_REASON_")
		}
		files := strings.Join(e.GetFilenames(), ",")
		if files == "" {
			files = "-"
		}
		comps := "-"
		if cs := e.GetMissingCompanions(); len(cs) > 0 {
			var parts []string
			for _, c := range cs {
				parts = append(parts, companionKind(c.GetKind())+":"+c.GetId())
			}
			comps = strings.Join(parts, ",")
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", un, e.GetFramesAsked(), share,
			short(e.GetFidelity().String(), "COVERAGE_FIDELITY_"), why, short(e.GetBuildIdType().String(), "BUILD_ID_TYPE_"),
			e.GetBuildId(), e.GetLastSeen().AsTime().UTC().Format(time.RFC3339), files, comps)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if total := resp.Msg.GetTotal(); total > uint64(len(entries)) {
		fmt.Fprintf(out, "(%d of %d binaries; --limit shows more)\n", len(entries), total)
	}
	printKernels(out, entries)
	return nil
}

// printKernels writes, per kernel release whose image or modules are among the entries with
// something to upload, one line naming the package of its debuginfo and the files of it to
// upload (one line per package, should several distributions name the release).
func printKernels(out io.Writer, entries []*debuginfov1.Coverage) {
	var releases []string
	for _, e := range entries {
		k := e.GetKernel()
		if k == nil {
			k = kernelpkg.Proto(e.GetFilenames()) // a server from before KernelDebuginfo
		}
		needs := e.GetFramesResolved() < e.GetFramesAsked() || len(e.GetMissingCompanions()) > 0
		if k == nil || !needs || slices.Contains(releases, k.GetRelease()) {
			continue
		}
		releases = append(releases, k.GetRelease())
		ps := kernelpkg.Packages(k.GetRelease())
		switch {
		case len(ps) == 0 && len(k.GetPackages()) > 0:
			// The server knows a distribution this command does not: its names, without paths.
			fmt.Fprintf(out, "kernel %s: debuginfo in %s\n", k.GetRelease(), strings.Join(k.GetPackages(), " or "))
		case len(ps) == 0:
			fmt.Fprintf(out, "kernel %s: no distribution package known for this release: upload its vmlinux and the modules' .ko "+
				"with debug info from the kernel's build, or give the symbolizer a debuginfod server that has them (--debuginfod-url)\n", k.GetRelease())
		}
		for _, p := range ps {
			pkg := p.String()
			if p.Install != "" {
				pkg = p.Name + " (" + p.Distribution + "; " + p.Install + ")"
			}
			fmt.Fprintf(out, "kernel %s: debuginfo in %s: upload %s and the modules' %s under %s\n",
				k.GetRelease(), pkg, p.Vmlinux, p.ModuleExt, p.ModuleDir)
		}
	}
}

// printCompanions writes one line per missing companion: kind, ID and the executables of the
// binaries that need it, tab-separated. A supplementary file shared by several binaries is
// one line: it is uploaded once.
func printCompanions(out io.Writer, entries []*debuginfov1.Coverage) {
	type comp struct {
		kind debuginfov1.CompanionKind
		id   string
	}
	var order []comp
	paths := map[comp][]string{}
	for _, e := range entries {
		for _, c := range e.GetMissingCompanions() {
			k := comp{c.GetKind(), c.GetId()}
			if _, ok := paths[k]; !ok {
				order = append(order, k)
				paths[k] = []string{}
			}
			for _, f := range e.GetFilenames() {
				if !slices.Contains(paths[k], f) {
					paths[k] = append(paths[k], f)
				}
			}
		}
	}
	for _, k := range order {
		fmt.Fprintln(out, strings.Join(append([]string{companionKind(k.kind), k.id}, paths[k]...), "\t"))
	}
}

// companionKind is the word --companions and the table print for a kind.
func companionKind(k debuginfov1.CompanionKind) string {
	return short(k.String(), "COMPANION_KIND_")
}

func short(enum, prefix string) string {
	s := strings.ToLower(strings.TrimPrefix(enum, prefix))
	if s == "unspecified" {
		return "none"
	}
	return s
}
