// Package pprofcmd implements `symbolizer pprof`: it symbolizes a pprof profile's native
// addresses from a symbolizer's store, as `pprof -symbolize` does from local files, so that
// pprof tooling gets functions, file:line and inline frames without OTLP in between.
//
// Each mapping names its binary by the build ID pprof keeps in Mapping.BuildID (a GNU build ID
// in hex, or a Go build ID); its addresses are runtime addresses with the mapping's start,
// limit and file offset, which go to the Symbolize API as they stand: the symbolizer, which
// holds the ELF headers, normalizes them (docs: design "Addresses"). Inline frames become
// pprof lines of one location, innermost first, as pprof orders them.
package pprofcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"
	"google.golang.org/protobuf/proto"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/binaryid"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/symbolizecodec"
)

// Cmd is `symbolizer pprof`.
type Cmd struct {
	Server    string        `env:"SYMBOLIZER_SERVER" xor:"source" help:"Base URL of the symbolizer to ask, e.g. http://127.0.0.1:7070."`
	StoreDir  string        `name:"store-dir" type:"existingdir" xor:"source" help:"Or a folder store (what 'symbolizer serve --store-dir' keeps), read by the symbolizer's own code in this process: no server needed." placeholder:"DIR"`
	Token     string        `env:"SYMBOLIZER_TOKEN" help:"Bearer token (a read or an upload token), when the server wants one for reads."`
	TokenFile string        `name:"token-file" env:"SYMBOLIZER_TOKEN_FILE" type:"path" help:"File holding the bearer token."`
	Timeout   time.Duration `default:"2m" env:"SYMBOLIZER_CLIENT_TIMEOUT" help:"Timeout of one Symbolize call."`
	Force     bool          `help:"Symbolize locations that already have lines too (their lines are replaced when the symbolizer answers)."`
	Output    string        `short:"o" required:"" type:"path" help:"Where to write the symbolized profile (gzipped profile.proto)." placeholder:"OUT"`
	Input     string        `arg:"" type:"existingfile" help:"pprof profile to symbolize (gzipped or not)." placeholder:"IN"`
	// Stderr receives the summary and the mappings left unsymbolized.
	Stderr io.Writer `kong:"-"`
}

// Run reads the profile, symbolizes it and writes it.
func (c *Cmd) Run() error {
	stderr := c.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	tok := c.Token
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return fmt.Errorf("read token file: %w", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	f, err := os.Open(c.Input)
	if err != nil {
		return err
	}
	p, err := profile.Parse(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: not a pprof profile: %w", c.Input, err)
	}
	url := c.Server
	switch {
	case c.StoreDir != "":
		local, stop, err := serveStore(c.StoreDir)
		if err != nil {
			return err
		}
		defer stop()
		url = local
	case url == "":
		return errors.New("say where the debuginfo is: --server URL or --store-dir DIR")
	}
	client := symbolize.NewClient(&http.Client{}, url, tok)
	st, err := Symbolize(context.Background(), client, p, Options{Force: c.Force, Timeout: c.Timeout})
	if err != nil {
		return err
	}
	out, err := os.Create(c.Output)
	if err != nil {
		return err
	}
	if err := p.Write(out); err != nil {
		out.Close()
		return fmt.Errorf("write %s: %w", c.Output, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("write %s: %w", c.Output, err)
	}
	fmt.Fprintf(stderr, "symbolized %d of %d locations (%d mappings asked, %d frames); wrote %s\n",
		st.Symbolized, st.Asked, st.Mappings, st.Frames, c.Output)
	for _, m := range st.Unresolved {
		fmt.Fprintf(stderr, "  not symbolized: %s\n", m)
	}
	return nil
}

// Options tune Symbolize.
type Options struct {
	// Force asks for locations that already have lines too.
	Force bool
	// Timeout bounds one Symbolize call (zero: none beyond ctx).
	Timeout time.Duration
	// BatchAddresses is how many addresses one call carries at most (zero: 10000, well
	// below the server's default limit of 100000).
	BatchAddresses int
}

// Stats say what Symbolize did.
type Stats struct {
	Mappings   int // mappings asked about
	Asked      int // locations asked about
	Symbolized int // locations that got lines
	Frames     int // lines added, inline frames included
	// Unresolved says, per mapping not symbolized, why (the module status and message).
	Unresolved []string
}

// Symbolize adds lines to the profile's locations from the symbolizer: every location of a
// mapping with a build ID and no lines yet (all of them with Force). A module the symbolizer
// cannot answer leaves its locations as they were and is listed in Stats.Unresolved. Mappings
// travel together, up to BatchAddresses addresses and maxModules modules per call.
func Symbolize(ctx context.Context, client symbolizerv1connect.SymbolizerServiceClient, p *profile.Profile, o Options) (Stats, error) {
	var st Stats
	batch := o.BatchAddresses
	if batch <= 0 {
		batch = 10000
	}
	byMapping := map[*profile.Mapping][]*profile.Location{}
	var order []*profile.Mapping
	for _, loc := range p.Location {
		m := loc.Mapping
		if m == nil || m.BuildID == "" || (len(loc.Line) > 0 && !o.Force) {
			continue
		}
		if _, ok := byMapping[m]; !ok {
			order = append(order, m)
		}
		byMapping[m] = append(byMapping[m], loc)
	}
	// parts: each mapping's locations, in pieces of at most batch addresses.
	type part struct {
		m    *profile.Mapping
		mod  *symbolizerv1.Module
		locs []*profile.Location
	}
	var parts []part
	for _, m := range order {
		mod, err := module(m)
		if err != nil {
			st.Unresolved = append(st.Unresolved, fmt.Sprintf("%s (%s): %v", m.File, m.BuildID, err))
			continue
		}
		st.Mappings++
		for locs := byMapping[m]; len(locs) > 0; {
			n := min(batch, len(locs))
			req := proto.CloneOf(mod)
			req.Addresses = make([]uint64, n)
			for i, l := range locs[:n] {
				req.Addresses[i] = l.Address
			}
			parts = append(parts, part{m: m, mod: req, locs: locs[:n]})
			locs = locs[n:]
		}
	}
	funcs := newFunctions(p)
	fidelity := map[*profile.Mapping]symbolizerv1.Fidelity{}
	failed := map[*profile.Mapping]bool{}
	for len(parts) > 0 {
		n, addrs := 0, 0
		for n < len(parts) && n < maxModules && (n == 0 || addrs+len(parts[n].locs) <= batch) {
			addrs += len(parts[n].locs)
			n++
		}
		group := parts[:n]
		parts = parts[n:]
		req := &symbolizerv1.SymbolizeRequest{}
		for _, pt := range group {
			req.Modules = append(req.Modules, pt.mod)
		}
		res, err := call(ctx, client, req, o.Timeout)
		if err != nil {
			return st, err
		}
		for i, pt := range group {
			r, m := res[i], pt.m
			st.Asked += len(pt.locs)
			if r.GetStatus() != symbolizerv1.ModuleStatus_MODULE_STATUS_OK {
				if !failed[m] {
					failed[m] = true
					st.Unresolved = append(st.Unresolved, fmt.Sprintf("%s (%s): %s %s", m.File, m.BuildID, r.GetStatus(), r.GetMessage()))
				}
				continue
			}
			frames, err := symbolizecodec.Decode(r, len(pt.locs))
			if err != nil {
				return st, fmt.Errorf("answer for mapping %s (%s): %w", m.File, m.BuildID, err)
			}
			fidelity[m] = r.GetFidelity()
			for j, l := range pt.locs {
				if len(frames[j]) == 0 {
					continue
				}
				l.Line = l.Line[:0]
				for _, fr := range frames[j] {
					l.Line = append(l.Line, profile.Line{Function: funcs.get(fr), Line: int64(fr.Line), Column: int64(fr.Column)})
				}
				st.Symbolized++
				st.Frames += len(frames[j])
			}
		}
	}
	for m, f := range fidelity {
		// What the symbolizer had, so that pprof does not try again.
		m.HasFunctions = true
		m.HasFilenames = f >= symbolizerv1.Fidelity_FIDELITY_LINES
		m.HasLineNumbers = f >= symbolizerv1.Fidelity_FIDELITY_LINES
		m.HasInlineFrames = f >= symbolizerv1.Fidelity_FIDELITY_FULL
	}
	if err := p.CheckValid(); err != nil {
		return st, fmt.Errorf("symbolized profile: %w", err)
	}
	return st, nil
}

// maxModules is how many modules one call carries at most, well below the server's default
// limit of 1024.
const maxModules = 256

// module is the request's module for a mapping: its build ID by kind, its runtime range and
// file offset as pprof holds them.
func module(m *profile.Mapping) (*symbolizerv1.Module, error) {
	mod := &symbolizerv1.Module{MemoryStart: m.Start, MemoryLimit: m.Limit, FileOffset: m.Offset, Filename: m.File}
	id := strings.ToLower(m.BuildID)
	switch {
	case binaryid.ValidGNU(id):
		mod.GnuBuildId = id
	case binaryid.ValidGo(m.BuildID):
		mod.GoBuildId = m.BuildID
	default:
		return mod, fmt.Errorf("build ID %q is neither a GNU (hex) nor a Go build ID", m.BuildID)
	}
	if m.Limit <= m.Start {
		return mod, fmt.Errorf("mapping %#x-%#x is empty", m.Start, m.Limit)
	}
	return mod, nil
}

func call(ctx context.Context, client symbolizerv1connect.SymbolizerServiceClient, req *symbolizerv1.SymbolizeRequest, timeout time.Duration) ([]*symbolizerv1.ModuleResult, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	resp, err := client.Symbolize(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, fmt.Errorf("symbolize %d modules: %w", len(req.Modules), err)
	}
	mods := resp.Msg.GetModules()
	if len(mods) != len(req.Modules) {
		return nil, fmt.Errorf("the answer holds %d modules for %d asked", len(mods), len(req.Modules))
	}
	return mods, nil
}

// functions interns pprof functions by what a frame says of them, starting from those the
// profile has.
type functions struct {
	p      *profile.Profile
	byKey  map[funcKey]*profile.Function
	nextID uint64
}

type funcKey struct {
	name, system, file string
	start              int64
}

func newFunctions(p *profile.Profile) *functions {
	f := &functions{p: p, byKey: map[funcKey]*profile.Function{}}
	for _, fn := range p.Function {
		f.byKey[funcKey{fn.Name, fn.SystemName, fn.Filename, fn.StartLine}] = fn
		f.nextID = max(f.nextID, fn.ID)
	}
	return f
}

func (f *functions) get(fr symbolizecodec.Frame) *profile.Function {
	system := fr.LinkageName
	if system == "" {
		system = fr.Function
	}
	k := funcKey{fr.Function, system, fr.File, int64(fr.StartLine)}
	if fn := f.byKey[k]; fn != nil {
		return fn
	}
	f.nextID++
	fn := &profile.Function{ID: f.nextID, Name: fr.Function, SystemName: system, Filename: fr.File, StartLine: int64(fr.StartLine)}
	f.p.Function = append(f.p.Function, fn)
	f.byKey[k] = fn
	return fn
}
