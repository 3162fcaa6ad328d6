package symbolize_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize/symbolizetest"
	"github.com/profsym/profsym/pkg/testsupport"
)

func copyOf(pd pprofile.Profiles) pprofile.Profiles {
	c := pprofile.NewProfiles()
	pd.CopyTo(c)
	return c
}

// TestProcessProperty: over generated requests, the output equals the input except for added
// lines, functions, strings and has_* attributes; lines appear exactly where a native, go or
// untyped location with a build ID and no lines, or a kernel one under an all-zero mapping
// with a GNU build ID, got frames, and they are the frames the symbolizer gave.
func TestProcessProperty(t *testing.T) {
	h := &symbolizetest.Synthetic{}
	client := symbolizetest.Client(t, h)
	s := symbolize.New(symbolize.Config{Client: client, BatchAddresses: 7, BatchModules: 3, Concurrency: 3, CacheEntries: 64})
	r := rand.New(rand.NewPCG(1, 2))
	var symbolized, unresolved int
	for iter := range 300 {
		pd := otlptest.Generate(r)
		if err := otlpprofiles.Validate(pd); err != nil {
			t.Fatalf("iter %d: generated request invalid: %v", iter, err)
		}
		in := otlptest.Resolve(copyOf(pd))
		rep := s.Process(context.Background(), pd)
		if err := otlpprofiles.Validate(pd); err != nil {
			t.Fatalf("iter %d: output invalid: %v", iter, err)
		}
		// And it survives the wire.
		b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(copyOf(pd))
		if err != nil {
			t.Fatal(err)
		}
		back, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
		if err != nil {
			t.Fatal(err)
		}
		out := otlptest.Resolve(back)
		if err := otlptest.Compare(in, out); err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		for i := range in {
			for j, fin := range in[i].Stack {
				fout := out[i].Stack[j]
				if len(fin.Lines) > 0 {
					continue
				}
				native := !strings.Contains(fmt.Sprint(fin.Attrs), otlpattr.FrameType) ||
					strings.Contains(fmt.Sprint(fin.Attrs), "("+otlpattr.FrameTypeNative+")") ||
					strings.Contains(fmt.Sprint(fin.Attrs), "("+otlpattr.FrameTypeGo+")") ||
					// A kernel frame is an address of its file only under an all-zero mapping
					// with a GNU build ID.
					strings.Contains(fmt.Sprint(fin.Attrs), "("+otlpattr.FrameTypeKernel+")") &&
						fin.Start == 0 && fin.Limit == 0 && fin.Offset == 0 && strings.Contains(fmt.Sprint(fin.MappingAttrs), otlpattr.BuildIDGNU)
				ids := strings.Contains(fmt.Sprint(fin.MappingAttrs), "build_id")
				notFound := strings.Contains(fmt.Sprint(fin.MappingAttrs), otlpattr.BuildIDGNU+"=Str(f") &&
					!strings.Contains(fmt.Sprint(fin.MappingAttrs), otlpattr.BuildIDHTLHash)
				want := symbolizetest.Frames(fin.Address)
				if !native || !ids || notFound {
					want = nil
				}
				if len(want) != len(fout.Lines) {
					t.Fatalf("iter %d sample %d frame %d (addr %#x attrs %v mapping %v): %d lines, want %d",
						iter, i, j, fin.Address, fin.Attrs, fin.MappingAttrs, len(fout.Lines), len(want))
				}
				for k, w := range want {
					got := fout.Lines[k]
					if got.Function != w.Function || got.SystemName != w.Function || got.File != w.File ||
						got.Line != int64(w.Line) || got.Column != int64(w.Column) || got.StartLine != 7 {
						t.Fatalf("iter %d: line %d = %+v, want %+v", iter, k, got, w)
					}
				}
				if len(want) > 0 && !strings.Contains(fmt.Sprint(fout.MappingAttrs), otlpattr.MappingHasInlineFrames) {
					t.Fatalf("iter %d: symbolized mapping lacks has_inline_frames: %v", iter, fout.MappingAttrs)
				}
			}
		}
		if rep.Seen < rep.Symbolized {
			t.Fatalf("report %+v", rep)
		}
		symbolized += rep.Symbolized
		for _, n := range rep.Unresolved {
			unresolved += n
		}
	}
	if symbolized < 1000 || unresolved < 100 {
		t.Fatalf("generator too narrow: %d locations symbolized, %d unresolved", symbolized, unresolved)
	}
	t.Logf("%d locations symbolized, %d unresolved, %d calls", symbolized, unresolved, h.Calls.Load())
	if h.MaxAddresses() > 7 {
		t.Fatalf("a call carried %d addresses, batch is 7", h.MaxAddresses())
	}
}

func request(addrs ...uint64) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("", otlpattr.BuildIDGNU, "abcdef01")
	d.AttributeTable().AppendEmpty()
	kv := d.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(1)
	kv.Value().SetStr("abcdef01")
	d.MappingTable().AppendEmpty()
	m := d.MappingTable().AppendEmpty()
	m.AttributeIndices().Append(1)
	d.LocationTable().AppendEmpty()
	st := d.StackTable()
	st.AppendEmpty()
	stack := st.AppendEmpty()
	for _, a := range addrs {
		l := d.LocationTable().AppendEmpty()
		l.SetMappingIndex(1)
		l.SetAddress(a)
		stack.LocationIndices().Append(int32(d.LocationTable().Len() - 1))
	}
	p := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.Samples().AppendEmpty().SetStackIndex(1)
	return pd
}

func TestDedupeAndCache(t *testing.T) {
	h := &symbolizetest.Synthetic{}
	s := symbolize.New(symbolize.Config{Client: symbolizetest.Client(t, h)})
	rep := s.Process(context.Background(), request(0x11, 0x12, 0x11, 0x11, 0x13, 0x12))
	if rep.Seen != 6 || rep.Symbolized != 6 || h.Addresses.Load() != 3 || h.Calls.Load() != 1 {
		t.Fatalf("report %+v, %d addresses sent in %d calls; want 6 seen, 6 symbolized, 3 addresses, 1 call", rep, h.Addresses.Load(), h.Calls.Load())
	}
	rep = s.Process(context.Background(), request(0x11, 0x12, 0x13))
	if rep.CacheHits != 3 || rep.Symbolized != 3 || h.Calls.Load() != 1 {
		t.Fatalf("second request: report %+v after %d calls; want 3 cache hits and no call", rep, h.Calls.Load())
	}
}

// An answer below FIDELITY_FULL is asked again once PartialAnswerTTL has passed, so that a
// better file uploaded after it (the executable first, its debug file next) shows; a FULL
// answer stays until evicted.
func TestPartialAnswersExpire(t *testing.T) {
	h := &symbolizetest.Synthetic{}
	h.Fidelity.Store(int32(symbolizerv1.Fidelity_FIDELITY_SYMBOLS))
	s := symbolize.New(symbolize.Config{Client: symbolizetest.Client(t, h), PartialAnswerTTL: time.Minute})
	now := time.Unix(1_000_000_000, 0)
	symbolize.SetCacheClock(s, func() time.Time { return now })
	for i, step := range []struct {
		advance   time.Duration
		fidelity  symbolizerv1.Fidelity
		calls     int64
		cacheHits int
	}{
		{0, symbolizerv1.Fidelity_FIDELITY_SYMBOLS, 1, 0},
		{59 * time.Second, symbolizerv1.Fidelity_FIDELITY_SYMBOLS, 1, 2}, // within the TTL: cached
		{time.Second, symbolizerv1.Fidelity_FIDELITY_FULL, 2, 0},         // expired: asked again, now FULL
		{time.Hour, symbolizerv1.Fidelity_FIDELITY_FULL, 2, 2},           // FULL answers stay
	} {
		now = now.Add(step.advance)
		h.Fidelity.Store(int32(step.fidelity))
		rep := s.Process(context.Background(), request(0x11, 0x12))
		if h.Calls.Load() != step.calls || rep.CacheHits != step.cacheHits || rep.Symbolized != 2 {
			t.Fatalf("step %d (+%v): %d calls, report %+v; want %d calls, %d cache hits, 2 symbolized",
				i, step.advance, h.Calls.Load(), rep, step.calls, step.cacheHits)
		}
	}
}

func TestFailuresLeaveDataAlone(t *testing.T) {
	slow := &symbolizetest.Synthetic{Delay: 2 * time.Second}
	tests := []struct {
		name   string
		client symbolizerv1connect.SymbolizerServiceClient
		reason string
	}{
		{"slow", symbolizetest.Client(t, slow), symbolize.ReasonDeadline},
		{"down", symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, "http://127.0.0.1:1"), symbolize.ReasonSymbolizerError},
		{"disabled", nil, symbolize.ReasonDisabled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := symbolize.New(symbolize.Config{Client: tc.client, Timeout: 200 * time.Millisecond})
			pd := request(0x21, 0x22)
			in := otlptest.Resolve(copyOf(pd))
			t0 := time.Now()
			rep := s.Process(context.Background(), pd)
			if el := time.Since(t0); el > time.Second {
				t.Fatalf("took %v, deadline is 200ms", el)
			}
			if rep.Unresolved[tc.reason] != 2 || rep.Symbolized != 0 {
				t.Fatalf("report %+v, want 2 unresolved for %s", rep, tc.reason)
			}
			out := otlptest.Resolve(pd)
			if err := otlptest.Compare(in, out); err != nil {
				t.Fatal(err)
			}
			if len(out[0].Stack[0].Lines) != 0 {
				t.Fatal("lines added although nothing was symbolized")
			}
		})
	}
}

// TestFrameTypes: by default locations without a frame type, native and kernel ones are
// symbolized; a configuration that lists only kernel turns the others off, one without kernel
// leaves kernel frames alone.
func TestFrameTypes(t *testing.T) {
	typed := func(frameType string) pprofile.Profiles {
		pd := request(0x31)
		d := pd.Dictionary()
		d.StringTable().Append(otlpattr.FrameType, frameType)
		kv := d.AttributeTable().AppendEmpty()
		kv.SetKeyStrindex(int32(d.StringTable().Len() - 2))
		kv.Value().SetStr(frameType)
		d.LocationTable().At(1).AttributeIndices().Append(int32(d.AttributeTable().Len() - 1))
		return pd
	}
	client := symbolizetest.Client(t, &symbolizetest.Synthetic{})
	for _, tc := range []struct {
		name       string
		frameTypes []string
		pd         pprofile.Profiles
		want       int
	}{
		{"default, no type", nil, request(0x31), 1},
		{"default, native", nil, typed(otlpattr.FrameTypeNative), 1},
		{"default, kernel", nil, typed(otlpattr.FrameTypeKernel), 1},
		{"native only, kernel", []string{otlpattr.FrameTypeNative}, typed(otlpattr.FrameTypeKernel), 0},
		{"kernel only, kernel", []string{otlpattr.FrameTypeKernel}, typed(otlpattr.FrameTypeKernel), 1},
		{"kernel only, no type", []string{otlpattr.FrameTypeKernel}, request(0x31), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := symbolize.New(symbolize.Config{Client: client, FrameTypes: tc.frameTypes, CacheEntries: -1})
			if rep := s.Process(t.Context(), tc.pd); rep.Seen != tc.want || rep.Symbolized != tc.want {
				t.Fatalf("report %+v, want %d seen and symbolized", rep, tc.want)
			}
		})
	}
}

// TestCallTimeout: a call that outlives CallTimeout ends with it, well before the request's
// deadline, and its addresses pass on as timed out.
func TestCallTimeout(t *testing.T) {
	s := symbolize.New(symbolize.Config{Client: symbolizetest.Client(t, &symbolizetest.Synthetic{Delay: 5 * time.Second}),
		Timeout: 10 * time.Second, CallTimeout: 100 * time.Millisecond})
	t0 := time.Now()
	rep := s.Process(t.Context(), request(0x41, 0x42))
	if el := time.Since(t0); el > 2*time.Second {
		t.Fatalf("took %v with a 100ms call timeout", el)
	}
	if rep.Unresolved[symbolize.ReasonDeadline] != 2 {
		t.Fatalf("report %+v, want 2 unresolved for %s", rep, symbolize.ReasonDeadline)
	}
}

// TestBreaker: a symbolizer that accepts calls and has answered nothing for BreakerGiveUp
// (hung, not busy) costs the first requests their deadline; after BreakerFailures of them,
// requests pass on at once, unsymbolized and counted; once the symbolizer answers again, a probe closes the breaker and symbolization
// resumes by itself. The logs tell the outage's start and end.
func TestBreaker(t *testing.T) {
	h := &symbolizetest.Synthetic{}
	h.Hung.Store(true)
	var logs testsupport.Buffer
	s := symbolize.New(symbolize.Config{Client: symbolizetest.Client(t, h), Timeout: 150 * time.Millisecond,
		BreakerFailures: 3, BreakerOpen: 300 * time.Millisecond, BreakerGiveUp: time.Millisecond, CacheEntries: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := range 3 {
		if rep := s.Process(t.Context(), request(0x51)); rep.Unresolved[symbolize.ReasonDeadline] != 1 {
			t.Fatalf("call %d: report %+v, want the deadline", i, rep)
		}
	}
	if !s.BreakerOpen() {
		t.Fatal("breaker still closed after 3 calls that timed out")
	}
	calls := h.Calls.Load()
	t0 := time.Now()
	rep := s.Process(t.Context(), request(0x52))
	if el := time.Since(t0); el > 100*time.Millisecond {
		t.Errorf("with the breaker open a request took %v; it should pass at once", el)
	}
	if rep.Unresolved[symbolize.ReasonBreakerOpen] != 1 || h.Calls.Load() != calls {
		t.Fatalf("report %+v and %d calls made while open, want breaker_open and none", rep, h.Calls.Load()-calls)
	}

	h.Hung.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		if rep := s.Process(t.Context(), request(0x53)); rep.Symbolized == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("symbolization did not resume after the symbolizer recovered")
		}
	}
	if s.BreakerOpen() {
		t.Error("breaker still open after a successful probe")
	}
	text := logs.String()
	for _, want := range []string{"symbolizer degraded", "symbolizer calls stopped", "symbolizer calls resumed", "symbolizer recovered"} {
		if strings.Count(text, want) != 1 {
			t.Errorf("log has %q %d times, want once:\n%s", want, strings.Count(text, want), text)
		}
	}
}
