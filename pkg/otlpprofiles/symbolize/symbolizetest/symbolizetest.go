// Package symbolizetest is a synthetic symbolizer for tests and benchmarks that need answers
// without real binaries: every address gets frames derived from it, so a test can check what
// was added, and the calls are counted.
package symbolizetest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/symbolizecodec"
)

// Synthetic answers Symbolize: address%5==0 resolves to nothing, GNU build IDs starting with
// "f" are not found, and everything else gets the 1 to 3 inline frames of Frames.
type Synthetic struct {
	// Calls and Addresses count the calls answered and the addresses they carried.
	Calls, Addresses atomic.Int64
	// Delay holds every answer back, or until the call's context ends.
	Delay time.Duration
	// Hung, while set, holds every answer until the call's context ends: a symbolizer that
	// accepts calls and never answers.
	Hung atomic.Bool
	// Fidelity, when set, is the fidelity of every answer (a symbolizer.v1.Fidelity; unset:
	// FIDELITY_FULL).
	Fidelity atomic.Int32

	mu       sync.Mutex
	maxAddrs int
}

// Frames are the frames Synthetic answers for addr, innermost first.
func Frames(addr uint64) []symbolizecodec.Frame {
	if addr%5 == 0 {
		return nil
	}
	var out []symbolizecodec.Frame
	for k := range 1 + int(addr%3) {
		out = append(out, symbolizecodec.Frame{
			Function:  fmt.Sprintf("fn_%x_%d", addr, k),
			File:      fmt.Sprintf("src/f%d.c", addr%4),
			Line:      uint32(addr%97) + uint32(k),
			Column:    uint32(k),
			StartLine: 7,
		})
	}
	return out
}

// Answer lays out locs (the frames of each address, innermost first) in r as the symbolizer
// lays out its answers, with a symbolizecodec.Builder: each distinct string once, the
// frames of each address as one key.
func Answer(r *symbolizerv1.ModuleResult, locs [][]symbolizecodec.Frame) {
	var b symbolizecodec.Builder
	b.Reset(len(locs))
	ids := map[string]uint32{"": 0}
	str := func(s string) uint32 {
		i, ok := ids[s]
		if !ok {
			i = b.AddString(s)
			ids[s] = i
		}
		return i
	}
	ok, slot := make([]bool, len(locs)), make([]int, len(locs))
	for j, frames := range locs {
		first := b.Rows()
		for _, f := range frames {
			b.AppendRow(str(f.Function), str(f.LinkageName), str(f.File), f.Line, f.Column, f.StartLine)
		}
		b.SetKey(j, first)
		ok[j], slot[j] = true, j
	}
	b.Emit(r, ok, slot)
}

// Symbolize implements the service.
func (s *Synthetic) Symbolize(ctx context.Context, req *connect.Request[symbolizerv1.SymbolizeRequest]) (*connect.Response[symbolizerv1.SymbolizeResponse], error) {
	s.Calls.Add(1)
	if s.Hung.Load() {
		<-ctx.Done()
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	if s.Delay > 0 {
		select {
		case <-time.After(s.Delay):
		case <-ctx.Done():
			return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
		}
	}
	resp := &symbolizerv1.SymbolizeResponse{}
	n := 0
	for _, m := range req.Msg.GetModules() {
		n += len(m.GetAddresses())
		if strings.HasPrefix(m.GetGnuBuildId(), "f") {
			resp.Modules = append(resp.Modules, &symbolizerv1.ModuleResult{
				Status: symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND, FrameCounts: make([]uint32, len(m.GetAddresses()))})
			continue
		}
		r := &symbolizerv1.ModuleResult{Status: symbolizerv1.ModuleStatus_MODULE_STATUS_OK, Fidelity: symbolizerv1.Fidelity_FIDELITY_FULL}
		if f := s.Fidelity.Load(); f != 0 {
			r.Fidelity = symbolizerv1.Fidelity(f)
		}
		var locs [][]symbolizecodec.Frame
		for _, a := range m.GetAddresses() {
			locs = append(locs, Frames(a))
		}
		Answer(r, locs)
		resp.Modules = append(resp.Modules, r)
	}
	s.Addresses.Add(int64(n))
	s.mu.Lock()
	s.maxAddrs = max(s.maxAddrs, n)
	s.mu.Unlock()
	return connect.NewResponse(resp), nil
}

// MaxAddresses is the most addresses one call carried.
func (s *Synthetic) MaxAddresses() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxAddrs
}

// Start serves h on a loopback port until the test ends and returns its base URL.
func Start(t testing.TB, h *Synthetic) string {
	t.Helper()
	path, handler := symbolizerv1connect.NewSymbolizerServiceHandler(h)
	mux := http.NewServeMux()
	mux.Handle(path, handler)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Client serves h as Start does and returns a client that decodes answers as the gateway and
// the Collector processor do.
func Client(t testing.TB, h *Synthetic) symbolizerv1connect.SymbolizerServiceClient {
	t.Helper()
	return symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, Start(t, h), connect.WithCodec(symbolizecodec.Codec{}))
}

var _ symbolizerv1connect.SymbolizerServiceHandler = (*Synthetic)(nil)
