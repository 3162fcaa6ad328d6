// Package otlpsinktest is an in-process OTLP profiles receiver on a loopback port, for tests of
// the collector's export path: it keeps every request it accepts.
package otlpsinktest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // accept gzip-compressed requests
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Sink is a running receiver.
type Sink struct {
	Addr string
	srv  *grpc.Server

	mu       sync.Mutex
	received []pprofile.Profiles
	// parents are the W3C traceparent headers of the requests accepted ("" when none).
	parents []string
	fail    error
	arrived chan struct{}
}

// Start listens on addr ("127.0.0.1:0" for any free port); ctx bounds the bind only.
func Start(ctx context.Context, addr string) (*Sink, error) {
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("otlpsink: listen %s: %w", addr, err)
	}
	s := &Sink{Addr: lis.Addr().String(), arrived: make(chan struct{}, 1)}
	s.srv = otlptest.NewProfilesServer(s.Export)
	go func() {
		// Serve returns nil after Stop; anything else ends the sink under a running test.
		if err := s.srv.Serve(lis); err != nil {
			slog.Error("otlpsink: serve", "addr", s.Addr, "err", err)
		}
	}()
	return s, nil
}

// Export implements the OTLP profiles service.
func (s *Sink) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return pprofileotlp.NewExportResponse(), s.fail
	}
	p := pprofile.NewProfiles()
	req.Profiles().CopyTo(p)
	s.received = append(s.received, p)
	md, _ := metadata.FromIncomingContext(ctx)
	s.parents = append(s.parents, strings.Join(md.Get("traceparent"), ","))
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	return pprofileotlp.NewExportResponse(), nil
}

// FailWith makes Export answer with the gRPC status of err (nil: accept again).
func (s *Sink) FailWith(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		err = status.Convert(err).Err()
	}
	s.fail = err
}

// Received returns the requests accepted so far.
func (s *Sink) Received() []pprofile.Profiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pprofile.Profiles(nil), s.received...)
}

// Traceparents returns the W3C traceparent header of each accepted request, in order.
func (s *Sink) Traceparents() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.parents...)
}

// Arrived is signalled (coalesced) whenever a request is accepted.
func (s *Sink) Arrived() <-chan struct{} { return s.arrived }

// Stop stops the server.
func (s *Sink) Stop() { s.srv.Stop() }
